"""No alert is lost, whatever the crash point between a state write and an output write.

A worker's table writes (changelogs) and its outputs (the alerts topic) are flushed through
different partitions, and its input offset is committed only after both. A crash can therefore
leave any prefix of the state writes and any prefix of the outputs since the last commit. This
test enumerates every crash point of an alert-heavy input stream: after each input ``k``, with
the last commit at ``c`` (up to three inputs back), state persisted for the inputs before ``s``
and outputs delivered for the inputs before ``o`` (``c <= s, o <= k + 1``). The restarted worker
starts from the persisted state and processes the inputs again from ``c``. What was delivered
must be exactly the alerts of a run without a crash, by idempotency key (``<id>:<status>``):
nothing missing, nothing invented; repeats carry the same key.
"""

from __future__ import annotations

from collections.abc import Sequence

from contract.inputs import (
    DcgmSample,
    DeviceAssignment,
    NodeRecord,
    OwnerRef,
    PodRecord,
    PodResourcesDiff,
    PodResourcesSnapshot,
    SinceLast,
)
from contract.outputs import Alert
from contract.topics import TABLES
from infra.settings import AlertSettings
from streams.core.flow.processor import Output, Processor, Tables
from tests.crashpoints import every_crash_point

G0, G1 = "GPU-00000000-aaaa", "GPU-11111111-bbbb"
P0 = DeviceAssignment("ml", "p0", "main", "nvidia.com/gpu", G0)
P1 = DeviceAssignment("ml", "p1", "main", "nvidia.com/gpu", G1)
POLICY = AlertSettings.model_construct(
    idle_threshold_pct=5.0,
    idle_hysteresis_pct=2.0,
    idle_window_s=10.0,
    cooldown_s=0.0,
    orphan_fb_mib=1024.0,
    orphan_window_s=10.0,
)
Record = NodeRecord | PodRecord | PodResourcesSnapshot | PodResourcesDiff | DcgmSample
State = dict[str, dict[str, object]]


def g0_util(t: int) -> float:
    return 1.0 if t < 60 or t >= 95 else 50.0  # idle, fires, recovers, idle again, fires again


def g1_sample(t: int) -> dict[str, object]:
    xid = 13 if 40 <= t < 80 else (31 if t >= 80 else 0)
    fb = 2000.0 if 100 <= t < 140 else 0.0  # memory left behind once p1 is gone, then freed
    return {"util_pct": 60.0, "xid": xid, "fb_used_mib": fb}


def stream() -> list[Record]:
    ms = 1_000
    out: list[Record] = [
        NodeRecord("n", 0, (("nvidia.com/gpu.sharing-strategy", "none"),)),
        *(
            PodRecord("n", 0, f"uid-{p}", "ml", p, 0, workload=OwnerRef("Job", p))
            for p in ("p0", "p1")
        ),
        PodResourcesSnapshot("n", 0, (P0, P1)),
    ]
    for t in range(5, 155, 5):
        if t == 100:
            out.append(PodResourcesDiff("n", t * ms, (), (P1,)))
        out.append(DcgmSample("n", t * ms, G0, 0, "A100", "n", util_pct=g0_util(t)))
        out.append(DcgmSample("n", t * ms, G1, 1, "A100", "n", **g1_sample(t)))  # type: ignore[arg-type]
    return out


def keys(outputs: Sequence[Output]) -> set[str]:
    return {f"{o.id}:{o.status}" for o in outputs if isinstance(o, Alert)}


def run(
    records: Sequence[Record], state: State, policy: AlertSettings = POLICY
) -> tuple[list[list[Output]], list[State]]:
    """Outputs per input, and the tables after each input (values are immutable records)."""
    tables = {name: dict(table) for name, table in state.items()}
    proc = Processor(Tables(**tables), policy)  # type: ignore[arg-type]
    outputs, states = [], []
    for record in records:
        outputs.append(proc.handle(record))
        states.append({name: dict(table) for name, table in tables.items()})
    return outputs, states


def test_every_crash_point_delivers_every_alert_exactly_by_key() -> None:
    records = stream()
    empty: State = {name: {} for name in TABLES}
    reference, after = run(records, empty)
    expected = set().union(*(keys(outs) for outs in reference))
    kinds = {key.split("-")[0] for key in expected}
    # idle fired, resolved, fired again; XID 13 fired, resolved when 31 superseded it, 31 fired
    # and resolved when its holder left; orphaned memory fired and resolved
    assert len(expected) == 9
    assert kinds == {"idle", "xid", "orphaned"}
    persisted = [empty, *after]  # persisted[s]: the tables once the inputs before s are written
    crash_points = every_crash_point(
        records, reference, persisted, expected, lambda rs, st: run(rs, st)[0], keys
    )
    assert crash_points > 1000


HEALTH_POLICY = AlertSettings.model_construct(
    cooldown_s=0.0,
    low_eff_window_s=10.0,
    thermal_window_s=10.0,
    health_quiet_s=30.0,
)


def g0_health(t: int) -> dict[str, object]:
    """Busy but ineffective until 60 s, then effective; hot from 20 s to 70 s."""
    return {
        "util_pct": 100.0,
        "sm_active": 0.03 if t < 60 else 0.6,
        "temp_c": 90.0 if 20 <= t < 70 else 60.0,
        "since_last": SinceLast(5_000, thermal_violation_us=0.0),
    }


def g1_health(t: int) -> dict[str, object]:
    """Remapped rows rise at 40 s (resolved after the quiet period), the exporter restarts at
    80 s (counters reset: nothing), PCIe replays from 90 s; p1 leaves at 100 s (resolved)."""
    if t == 80:
        since = SinceLast(5_000, resets=("pcie_replays", "uncorrectable_remapped_rows"))
    else:
        since = SinceLast(
            5_000,
            uncorrectable_remapped_rows=1.0 if t == 40 else 0.0,
            pcie_replays=100.0 if 90 <= t < 100 else 0.0,
        )
    return {"util_pct": 60.0, "sm_active": 0.5, "since_last": since}


def health_stream() -> list[Record]:
    ms = 1_000
    out = stream()[:4]  # the node, its pods and the snapshot
    for t in range(5, 130, 5):
        if t == 100:
            out.append(PodResourcesDiff("n", t * ms, (), (P1,)))
        out.append(DcgmSample("n", t * ms, G0, 0, "A100", "n", **g0_health(t)))  # type: ignore[arg-type]
        out.append(DcgmSample("n", t * ms, G1, 1, "A100", "n", **g1_health(t)))  # type: ignore[arg-type]
    return out


def test_every_crash_point_delivers_every_health_and_efficiency_alert_exactly_by_key() -> None:
    records = health_stream()
    empty: State = {name: {} for name in TABLES}

    def replay(rs: Sequence[Record], st: State) -> list[list[Output]]:
        return run(rs, st, HEALTH_POLICY)[0]

    reference, after = run(records, empty, HEALTH_POLICY)
    expected = set().union(*(keys(outs) for outs in reference))
    kinds = {(o.kind, o.status) for outs in reference for o in outs if isinstance(o, Alert)}
    assert kinds == {
        (kind, status)
        for kind in ("low-efficiency", "thermal", "memory-fault", "pcie-replays")
        for status in ("firing", "resolved")
    }
    assert len(expected) == 8  # the exporter restart at 80 s raised nothing
    persisted = [empty, *after]
    assert every_crash_point(records, reference, persisted, expected, replay, keys) > 1000
