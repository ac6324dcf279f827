"""The worker's attribution exposition, byte for byte, on fixed tables: every demo scenario's
device rows (some idle, alerting or stale), two nodes' GPU stacks and three pools' demand.

Regenerate on purpose only: ``python -m tests.unit.test_promexport_golden``.
"""

from __future__ import annotations

from pathlib import Path

from contract.records import replace
from sim.scenario import builtin_names, load
from streams.present.noderows import NodeRow, PlaneRow
from streams.present.poolrows import PoolRow, pool_row
from streams.present.views import DeviceRow, device_row
from streams.worker.promexport import exposition
from tests.scenario_events import events
from tests.unit.test_demand_outputs import A100, MIG, STALL

GOLDEN = Path(__file__).parent.parent / "golden" / "promexport" / "exposition.prom"


def device_rows() -> list[DeviceRow]:
    rows = []
    for name in builtin_names():
        latest = {(ev.node, ev.device_uuid): ev for ev in events(load(name), at_s=10.0, minutes=1)}
        rows += [device_row(ev, None) for ev in latest.values()]
    # the figures only an alert state gives, and a stale device: on every fourth, fifth row
    for i in range(0, len(rows), 4):
        rows[i] = replace(rows[i], idle_s=120.0 + i, open_alerts=("idle", "xid-79"))
    for i in range(1, len(rows), 5):
        rows[i] = replace(rows[i], origin="stale")
    return rows


def node_rows() -> list[NodeRow]:
    planes = (
        PlaneRow("driver", "ready", "deploy", ""),
        PlaneRow("container-toolkit", "not-ready", "deploy", "CrashLoopBackOff"),
        PlaneRow("dcgm-exporter", "waiting", "deploy", "waits on container-toolkit"),
        PlaneRow("device-plugin", "unreachable", "host", "no answer"),
    )
    broken = NodeRow(
        "gpu-a", "broken", "container-toolkit not ready", "container-toolkit",
        "CrashLoopBackOff", ("dcgm-exporter",), planes, None, False, "stack-broken/gpu-a", 1,
    )  # fmt: skip
    ready = replace(broken, node="gpu-b", state="ready", planes=planes[:1], alert=None)
    return [broken, ready]


def pool_rows() -> list[PoolRow]:
    return [pool_row(p) for p in (STALL, A100, MIG)]


def rendered() -> bytes:
    return exposition(device_rows(), node_rows(), pool_rows())


def test_the_exposition_is_byte_for_byte_the_golden() -> None:
    assert rendered() == GOLDEN.read_bytes()


if __name__ == "__main__":
    GOLDEN.write_bytes(rendered())
