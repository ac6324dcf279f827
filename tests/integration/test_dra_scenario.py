"""The ``dra`` scenario end to end on the real local Kafka: GPUs allocated through ResourceClaims.

Every holder of every shared claim is named with its UID in 100 % of the events after warm-up;
no per-pod usage figure appears on a shared device; MIG instances are never merged with their
parent; the adminAccess pod (dcgm-exporter) is never credited; a dynamic MIG placement is said
unknown, never guessed; and a pod deleted while its claim stays allocated leaves the holders.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from contract.outputs import AttributionEvent
from sim.cluster import Cluster
from sim.scenario import gpu_uuid, load, mig_uuid
from tests.helpers import wait_for
from tests.integration.pipeline import Collected, collect, pipeline
from tests.integration.test_sharing_scenarios import events_since

pytestmark = pytest.mark.integration

SCENARIO = load("dra")
UIDS = {p.name: p.uid for p in SCENARIO.pods}
INFER = sorted(p.name for p in SCENARIO.pods if p.claim == "infer-shared")
GONE = next(p for p in SCENARIO.pods if p.claim == "infer-shared" and p.stop_s is not None)
GH, A100 = "gh200-dra", "a100-dra"
USAGE_WORDS = ("util", "usage", "fb_", "power", "temp")


def devices_at(t: float) -> set[str]:
    """Every device the exporter reports: GPUs, and MIG instances by the UUID NVML gives them
    (a dynamic instance has one on the node; only the slice lacks it)."""
    cluster = Cluster(SCENARIO, lambda: t)
    out = set()
    for node in SCENARIO.nodes:
        for row in cluster.exporter_rows(node.name, 0):
            gi = row.mig_instance_id
            out.add(row.uuid if gi is None else mig_uuid(node.name, row.gpu, gi))
    return out


async def settle(
    events: Collected,
    devices: set[str],
    ready: Callable[[AttributionEvent], bool],
    logs: Callable[[], str],
) -> list[AttributionEvent]:
    """Wait until every device has a ready event, then collect four events per device after."""

    def missing() -> str:
        done = {e.device_uuid for e in events_since(events, 0) if ready(e)}
        last = {e.device_uuid: e for e in events_since(events, 0)}
        return "\n".join(
            f"{d}: {last[d].state} {last[d].allocation} {last[d].notes}"
            if d in last
            else f"{d}: none"
            for d in sorted(devices - done)
        )

    await wait_for(
        lambda: devices <= {e.device_uuid for e in events_since(events, 0) if ready(e)},
        timeout_s=90,
        what=lambda: f"warm-up; not ready:\n{missing()}\n{logs()}",
    )
    since = int(time.time() * 1000) + 1500

    def enough() -> bool:
        seen = [e.device_uuid for e in events_since(events, since)]
        return all(seen.count(d) >= 4 for d in devices)

    await wait_for(enough, timeout_s=60, what=lambda: f"four events per device\n{logs()}")
    return events_since(events, since)


def check_honesty(events: list[AttributionEvent]) -> None:
    for ev in events:
        assert ev.allocation == "dra"
        for h in ev.holders:
            assert h.uid == UIDS[h.pod], (ev.device_uuid, h)  # 100 %: every holder, its UID
            assert h.namespace != "gpu-operator"  # the adminAccess observer is never a holder
            assert not any(w in f for f in h.__struct_fields__ for w in USAGE_WORDS)
        if ev.state == "shared":
            assert ev.credit == "device-wide"
            assert all(h.allocation_share in (None, 0.25, 0.5) for h in ev.holders)
        if ev.mig is not None:
            assert ev.device_uuid != ev.gpu_uuid  # an instance is a device of its own
            assert ev.usage.scope == "mig-instance"
        else:
            assert all("mig" not in (h.claim or "") for h in ev.holders)


async def test_dra_claims_end_to_end(kafka_bootstrap: str, tmp_path: Path) -> None:
    async with (
        pipeline(kafka_bootstrap, SCENARIO, tmp_path) as p,
        collect(p.kafka, "attribution") as ev,
    ):
        p.clock.offset_s = 20.0
        devices = devices_at(20.0)

        def ready(e: AttributionEvent) -> bool:
            return (
                e.allocation == "dra"
                and (e.holders or e.state in ("unallocated", "unknown"))
                and "not seen allocated" not in " ".join(e.notes)
            )

        events = await settle(ev, devices, ready, p.logs)
        check_honesty(events)
        by = {}
        for e in events:
            by.setdefault(e.device_uuid, []).append(e)

        for e in by[gpu_uuid(GH, 1)]:  # one time-sliced claim, three pods
            assert (e.state, e.sharing, e.tenant_count) == ("shared", "time-slicing", 3)
            assert [h.pod for h in e.holders] == INFER
            assert {h.claim for h in e.holders} == {"ml/infer-shared"}
            assert all(h.allocation_share is None for h in e.holders)  # one allocation: no split
        for e in by[gpu_uuid(GH, 2)]:
            assert (e.state, e.sharing, e.tenant_count) == ("shared", "mps", 2)
        for e in by[gpu_uuid(GH, 0)]:
            assert (e.state, e.sharing, [h.pod for h in e.holders]) == (
                "exclusive",
                "none",
                ["train-0"],
            )
            assert any("adminAccess" in n for n in e.notes)
        for e in by[mig_uuid(GH, 3, 1)]:
            assert (e.state, e.sharing, [h.pod for h in e.holders]) == (
                "exclusive",
                "mig",
                ["notebook-mig-0"],
            )
        for e in by[mig_uuid(GH, 3, 2)]:
            assert (e.state, e.holders) == ("unallocated", ())
        for e in by[gpu_uuid(A100, 1)]:  # consumable capacity: allocation shares, labelled so
            assert [(h.pod, h.allocation_share) for h in e.holders] == [
                ("small-a-0", 0.25),
                ("small-b-0", 0.5),
            ]
        for gi in (1, 2):  # dynamic MIG: which instance is held is not known, and says so
            for e in by[mig_uuid(A100, 0, gi)]:
                assert (e.state, e.holders) == ("unknown", ())
                assert any("profile 3g.40gb, UUID unknown" in n for n in e.notes)

        # infer-c is deleted at 40 s (5 s grace); its claim stays allocated for the other two
        p.clock.offset_s = 50.0
        t0 = int(time.time() * 1000)
        two = [n for n in INFER if n != GONE.name]
        await wait_for(
            lambda: any(
                e.device_uuid == gpu_uuid(GH, 1) and [h.pod for h in e.holders] == two
                for e in events_since(ev, t0)
            ),
            timeout_s=60,
            what=lambda: f"the deleted pod to leave the shared claim\n{p.logs()}",
        )
        later = await settle(ev, devices_at(50.0), ready, p.logs)
        check_honesty(later)
        for e in later:
            if e.device_uuid == gpu_uuid(GH, 1):
                assert [h.pod for h in e.holders] == two
                assert e.tenant_count == 2
