"""Operator views and the allocation report: pure functions over attribution events."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from contract.inputs import DcgmSample, NodeRecord, PodResourcesSnapshot
from contract.outputs import (
    AttributionEvent,
    ExporterView,
    Holder,
    MigInstance,
    Telemetry,
    Usage,
    Workload,
)
from contract.records import replace
from gpuattr.report import accumulate, csv_rows
from gpuattr.report_cli import parse_duration
from sim.cluster import Cluster
from sim.scenario import gpu_uuid, load
from streams.core.alerts.alerts import DeviceAlerts, Episode
from streams.core.alerts.healthalerts import HealthAlerts
from streams.core.alerts.lowefficiency import LowEfficiency
from streams.core.flow.processor import Processor, Tables
from streams.present.views import Filter, device_row, merge, select, usage_text
from streams.worker.live import LiveDevices

TRAIN = Holder(
    "ml",
    "train-0",
    "c",
    "nvidia.com/gpu",
    ("GPU-A",),
    1,
    1.0,
    "11111111-aaaa",
    "resolved",
    Workload("Job", "train"),
)
ALICE = Holder(
    "dev",
    "alice-0",
    "c",
    "nvidia.com/gpu",
    ("GPU-S::0",),
    1,
    0.5,
    "22222222-bbbb",
    "resolved",
    Workload("StatefulSet", "alice"),
)
BOB = replace(
    ALICE,
    pod="bob-0",
    device_ids=("GPU-S::1",),
    uid="33333333-cccc",
    workload=Workload("StatefulSet", "bob"),
)


def ev(
    device: str,
    ts_s: float,
    util: float | None,
    holders: Sequence[Holder],
    *,
    node: str = "n1",
    sharing: str = "none",
    mig: MigInstance | None = None,
) -> AttributionEvent:
    state = (
        "unallocated"
        if not holders
        else ("shared" if sharing in ("time-slicing", "mps") else "exclusive")
    )
    return AttributionEvent(
        node=node,
        ts_ms=int(ts_s * 1000),
        device_uuid=device,
        gpu_uuid=device,
        gpu_index=0,
        model="A100",
        mig=mig,
        state=state,
        sharing=sharing,  # type: ignore[arg-type]
        replicas=2 if state == "shared" else None,
        tenant_count=len(holders),
        holders=tuple(holders),
        usage=Usage("device", util, "DCGM_FI_DEV_GPU_UTIL", 100, 900, 60, 30, 0),
        credit="device-wide" if state == "shared" else "holder",
        exporter=ExporterView((), True, ""),
        notes=(),
        summary="",
    )


def test_shared_row_lists_every_tenant_and_one_device_wide_figure() -> None:
    row = device_row(ev("GPU-S", 10, 40, (ALICE, BOB), sharing="time-slicing"), None)
    assert [h.pod for h in row.holders] == ["alice-0", "bob-0"]
    assert [h.uid_prefix for h in row.holders] == ["22222222", "33333333"]
    assert [h.allocation_share for h in row.holders] == [0.5, 0.5]
    assert row.usage_scope == "device"
    assert usage_text(row) == "2 tenants · device-wide 40%"
    assert usage_text(device_row(ev("GPU-A", 10, 92, (TRAIN,)), None)) == "92%"


def test_idle_time_is_event_time_and_alerts_are_listed() -> None:
    alerts = DeviceAlerts(idle=Episode(since_ms=4_000, firing=True), orphan=None)
    row = device_row(ev("GPU-A", 64, 0, (TRAIN,)), alerts)
    assert row.idle_since_ms == 4_000
    assert row.idle_s == 60.0
    assert row.open_alerts == ("idle",)
    pending = device_row(ev("GPU-A", 64, 0, (TRAIN,)), DeviceAlerts(idle=Episode(60_000)))
    assert pending.open_alerts == ()
    assert pending.idle_s == 4.0


def test_open_health_and_low_efficiency_alerts_are_listed_pending_ones_not() -> None:
    alerts = DeviceAlerts(
        low_eff=LowEfficiency(episode=Episode(since_ms=1_000, firing=True)),
        health=HealthAlerts(
            thermal=Episode(2_000, firing=True),
            memory_fault=Episode(3_000, firing=True),
            pcie=Episode(4_000),  # pending: not open
        ),
    )
    row = device_row(ev("GPU-A", 64, 100, (TRAIN,)), alerts)
    assert row.open_alerts == ("low-efficiency", "thermal", "memory-fault")


def test_filters_and_sorting() -> None:
    rows = [
        device_row(ev("GPU-A", 10, 92, (TRAIN,)), None),
        device_row(ev("GPU-S", 10, 40, (ALICE, BOB), sharing="time-slicing", node="n2"), None),
        device_row(ev("GPU-F", 10, 0, (), node="n2"), DeviceAlerts(idle=Episode(0, True))),
    ]
    assert [r.device_uuid for r in select(rows, Filter(namespace="dev"))] == ["GPU-S"]
    assert [r.device_uuid for r in select(rows, Filter(workload="Job/train"))] == ["GPU-A"]
    assert [r.device_uuid for r in select(rows, Filter(workload="bob"))] == ["GPU-S"]
    assert [r.device_uuid for r in select(rows, Filter(sharing="time-slicing"))] == ["GPU-S"]
    assert [r.device_uuid for r in select(rows, Filter(node="n2"))] == ["GPU-F", "GPU-S"]
    assert [r.device_uuid for r in select(rows, Filter(idle=True))] == ["GPU-F"]
    assert [r.device_uuid for r in select(rows, Filter(), "util")] == ["GPU-A", "GPU-S", "GPU-F"]
    assert next(r.device_uuid for r in select(rows, Filter(), "tenants")) == "GPU-S"
    with pytest.raises(ValueError, match="sort by"):
        select(rows, Filter(), "price")
    q = Filter.from_query({"namespace": "dev", "idle": "true", "alerts": "0"})
    assert (q.namespace, q.idle, q.alerts) == ("dev", True, False)


def test_live_keeps_newest_and_only_owned_partitions() -> None:
    live = LiveDevices()
    live.update(0, ev("GPU-A", 20, 50, (TRAIN,)))
    live.update(0, ev("GPU-A", 10, 99, (TRAIN,)))  # late, older: ignored
    live.update(1, ev("GPU-S", 10, 40, (ALICE,), node="n2", sharing="mps"))
    assert [(r.device_uuid, r.util_pct) for r in live.rows({0, 1}, {})] == [
        ("GPU-A", 50),
        ("GPU-S", 40),
    ]
    assert [r.device_uuid for r in live.rows({0}, {})] == ["GPU-A"]  # partition 1 moved away
    assert len(live) == 1
    a, b = (
        device_row(ev("GPU-A", 10, 1, (TRAIN,)), None),
        device_row(ev("GPU-A", 20, 2, (TRAIN,)), None),
    )
    assert merge([[a], [b]]) == [b]


def test_report_counts_known_holding_times() -> None:
    """train holds GPU-A 0-60 s (busy 80 %, idle from 40 s); alice and bob share GPU-S
    (2 replicas) for 0-30 s, then alice alone for 30-60 s; samples every 5 s; a 120 s exporter
    gap on GPU-A counts only max_gap."""
    events = []
    for t in range(0, 65, 5):
        events.append(ev("GPU-A", t, 80 if t < 40 else 1, (TRAIN,)))
        tenants = (ALICE, BOB) if t < 30 else (ALICE,)
        events.append(ev("GPU-S", t, 50, tenants, sharing="time-slicing"))
    events.append(ev("GPU-A", 180, 80, (TRAIN,)))  # after a 120 s gap: counts 30 s
    lines = {
        (x.namespace, x.workload): x for x in accumulate(events, max_gap_s=30, idle_threshold_pct=5)
    }
    train = lines["ml", "Job/train"]
    assert train.held_gpu_hours == pytest.approx((60 + 30) / 3600)
    assert train.busy_gpu_hours == pytest.approx((40 * 0.8 + 20 * 0.01 + 30 * 0.01) / 3600)
    assert train.idle_share == pytest.approx(50 / 90)
    assert train.shared_held_gpu_hours == 0
    alice, bob = lines["dev", "StatefulSet/alice"], lines["dev", "StatefulSet/bob"]
    assert alice.held_gpu_hours == pytest.approx(60 * 0.5 / 3600)  # allocation share, not usage
    assert alice.shared_held_gpu_hours == alice.held_gpu_hours
    assert alice.busy_gpu_hours is None  # no per-pod figure on a shared device
    assert alice.idle_share is None
    assert bob.held_gpu_hours == pytest.approx(30 * 0.5 / 3600)
    assert csv_rows([alice])[0][:5] == ["dev", "StatefulSet/alice", "", "0.0083", "0.0083"]
    assert csv_rows([alice])[0][5:] == ["0.0000", "", "", "", "0.0000", "", "0.0000"]


def test_mig_instances_count_as_whole_devices_of_their_profile() -> None:
    """A MIG instance is a device of its own, held whole: its instance-hours are kept apart
    from GPU-hours, under its profile."""
    mig = MigInstance(7, "1g.10gb")
    holder = replace(TRAIN, allocation_share=None)
    events = [ev("MIG-7", t, 50, (holder,), sharing="mig", mig=mig) for t in (0, 10, 20)]
    events += [ev("GPU-A", t, 50, (TRAIN,)) for t in (0, 10, 20)]
    lines = {x.mig_profile: x for x in accumulate(events, max_gap_s=30, idle_threshold_pct=5)}
    assert set(lines) == {"", "1g.10gb"}
    assert lines["1g.10gb"].held_gpu_hours == pytest.approx(20 / 3600)
    assert lines["1g.10gb"].busy_gpu_hours == pytest.approx(10 / 3600)
    assert lines[""].held_gpu_hours == pytest.approx(20 / 3600)


def test_held_without_telemetry_is_held_and_unmeasured_never_idle() -> None:
    """The allocation spine: heartbeats with usage unknown still carry who holds the GPU, so
    its hours are held; busy is unknown, never 0, and nothing counts as idle."""
    blind = Telemetry("unknown", "exporter-unreachable", "dcgm-exporter failing", 0)
    events = [
        replace(ev("GPU-A", t, None, (TRAIN,)), origin="heartbeat", telemetry=blind)
        for t in range(0, 3601, 60)
    ]
    (line,) = accumulate(events, max_gap_s=90, idle_threshold_pct=5)
    assert line.held_gpu_hours == pytest.approx(1.0)
    assert line.unmeasured_held_gpu_hours == pytest.approx(1.0)
    assert (line.busy_gpu_hours, line.idle_share) == (None, None)


def test_nothing_is_charged_once_a_device_is_stale_or_gone() -> None:
    events = [ev("GPU-A", t, 50, (TRAIN,)) for t in (0, 30)]
    stale = Telemetry("unknown", "node-silent", "no record", 30_000)
    events += [
        replace(ev("GPU-A", t, None, (TRAIN,)), origin="stale", telemetry=stale) for t in (60, 90)
    ]
    events.append(replace(ev("GPU-A", 120, None, ()), origin="gone", state="unknown"))
    (line,) = accumulate(events, max_gap_s=90, idle_threshold_pct=5)
    assert line.held_gpu_hours == pytest.approx(60 / 3600)  # 0-60 s, not the stale minute


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400), ("1h30m", 5400)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2", "h", "2x", "1h 30m", "-1h"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_exclusive_gpu_on_a_sharing_node_counts_in_full() -> None:
    """mps-subset: GPU 1 is handed out whole on a node GFD labels mps/8. Through the worker's
    own processor, its trainer is credited the whole GPU: full GPU-hours, busy hours measured,
    its usage shown as its own; the MPS tenants of GPU 0 keep allocation shares only."""
    scenario = load("mps-subset")
    spec = scenario.node("h100-mps")
    held, allocatable = Cluster(scenario, lambda: 10.0).podresources("h100-mps")
    proc = Processor(Tables.in_memory())
    proc.handle(NodeRecord("h100-mps", 0, spec.labels))
    proc.handle(PodResourcesSnapshot("h100-mps", 0, held, allocatable))
    events: list[AttributionEvent] = []
    for t in range(0, 3601, 60):
        for gpu, util in ((0, 30.0), (1, 88.0)):
            sample = DcgmSample(
                "h100-mps", t * 1000, gpu_uuid("h100-mps", gpu), gpu, "H100", "h100-mps"
            )
            events += [
                o
                for o in proc.handle(replace(sample, util_pct=util))
                if isinstance(o, AttributionEvent)
            ]
    lines = {x.workload: x for x in accumulate(events, max_gap_s=120, idle_threshold_pct=5)}
    trainer = lines["Pod/train-mixtral-0"]
    assert trainer.held_gpu_hours == pytest.approx(1.0)  # one GPU for one hour, not 1/8
    assert trainer.shared_held_gpu_hours == 0
    assert trainer.busy_gpu_hours == pytest.approx(0.88)
    dan = lines["Pod/notebook-dan-0"]
    assert dan.held_gpu_hours == pytest.approx(2 / 8)  # two of eight replicas: an allocation
    assert dan.busy_gpu_hours is None
    rows = {r.gpu_index: r for r in (device_row(e, None) for e in events[-2:])}
    assert (rows[1].state, rows[1].sharing, usage_text(rows[1])) == ("exclusive", "none", "88%")
    assert [h.allocation_share for h in rows[1].holders] == [1.0]
    assert usage_text(rows[0]) == "5 tenants · device-wide 30%"
