"""The allocation spine through the processor: every device of a node in the stream whether or
not its telemetry answers, telemetry verified as the node's own, and everything aging in event
time (stale, gone, tombstones) — the same code the Faust agent runs, over dict tables."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from contract.inputs import (
    AgentStatus,
    ClockTick,
    DcgmScrape,
    DeviceInventory,
    GpuInfo,
    MigInfo,
    NodeRecord,
    OwnerRef,
    PodListSnapshot,
    PodRecord,
    PodResourcesSnapshot,
    SourceStatus,
)
from contract.inputs import AllocatableDevice as Alloc
from contract.inputs import DcgmSample as S
from contract.inputs import DeviceAssignment as A
from contract.outputs import Alert, AttributionEvent, TelemetryRefused
from infra.settings import AlertSettings
from streams.core.flow.processor import Output, Processor, Tables, UnusableRecord
from streams.core.lifetimes import Lifetimes

NODE, OTHER = "gpu-a", "gpu-b"
G0, G1, G2 = "GPU-00000000-aaaa", "GPU-11111111-bbbb", "GPU-22222222-cccc"
FOREIGN = "GPU-99999999-ffff"
T0 = 1_700_000_000_000
S_ = 1000
MIN = 60 * S_
LIFE = Lifetimes(heartbeat_ms=MIN, stale_after_ms=3 * MIN, node_ttl_ms=10 * MIN)
#: for tests whose records are minutes apart with nothing between them (no tick, no other
#: node): the clock's jump bound (tests/unit/test_clock.py) set out of their way
UNBOUNDED = Lifetimes(
    heartbeat_ms=MIN, stale_after_ms=3 * MIN, node_ttl_ms=10 * MIN, max_clock_jump_ms=24 * 60 * MIN
)
# five MPS tenants on G0, a trainer on G1, G2 free
TENANTS = [A("inf", f"mps-{i}", "srv", "nvidia.com/gpu", f"{G0}::{i}") for i in range(5)]
TRAINER = A("ml", "trainer-0", "main", "nvidia.com/gpu", G1)
ALLOCATABLE = (
    *(Alloc("nvidia.com/gpu", f"{G0}::{i}") for i in range(8)),
    Alloc("nvidia.com/gpu", G1),
    Alloc("nvidia.com/gpu", G2),
)
LABELS = (
    ("kubernetes.io/hostname", NODE),
    ("nvidia.com/gpu.sharing-strategy", "mps"),
    ("nvidia.com/gpu.replicas", "8"),
)


def uid(pod: str) -> str:
    return f"uid-{pod}"


def setup(ts: int = T0, node: str = NODE) -> list[object]:
    pods = [*TENANTS, TRAINER]
    return [
        NodeRecord(node, ts, LABELS),
        DeviceInventory(
            node,
            ts,
            "nvml",
            (GpuInfo(0, G0, "H100"), GpuInfo(1, G1, "H100"), GpuInfo(2, G2, "H100")),
        ),
        *(
            PodRecord(
                node,
                ts,
                uid(a.pod),
                a.namespace,
                a.pod,
                ts,
                workload=OwnerRef("StatefulSet", a.pod),
            )
            for a in pods
        ),
        PodListSnapshot(node, ts, tuple(sorted(uid(a.pod) for a in pods))),
        PodResourcesSnapshot(node, ts, tuple(sorted(pods)), ALLOCATABLE),
    ]


def dcgm(state: str, reason: str = "", ts: int = T0) -> SourceStatus:
    return SourceStatus(
        "dcgm", state, ts, reason, "connect: connection refused", "http://10.1.2.3:9400/metrics"
    )  # type: ignore[arg-type]


def scrape(ts: int, *uuids: str, hostname: str = NODE, util: float = 40.0) -> DcgmScrape:
    return DcgmScrape(
        NODE,
        ts,
        tuple(
            S(NODE, ts, u, i, "H100", hostname, util_pct=util, fb_used_mib=5000.0)
            for i, u in enumerate(uuids)
        ),
        "http://10.1.2.3:9400/metrics",
        "gpu-operator/nvidia-dcgm-exporter-abcde",
    )


def feed(proc: Processor, records: Iterable[object], partition: int = 0) -> list[Output]:
    out: list[Output] = []
    for record in records:
        out += proc.handle(record, partition)
    return out


def events(outputs: Iterable[Output], origin: str | None = None) -> list[AttributionEvent]:
    return [
        o
        for o in outputs
        if isinstance(o, AttributionEvent) and (origin is None or o.origin == origin)
    ]


def new() -> Processor:
    return Processor(
        Tables.in_memory(), AlertSettings.model_construct(idle_window_s=120.0, cooldown_s=0.0), LIFE
    )


def test_no_exporter_no_gpus_is_over_every_held_gpu_is_reported_with_why() -> None:
    """The issue's measurement: six pods on two H100s, the exporter unreachable: every held GPU
    in every heartbeat, every holder with its UID, usage unknown with the reason, no idle."""
    proc = new()
    out = feed(proc, setup())
    allocation = events(out, "allocation")
    assert {e.device_uuid for e in allocation} == {G0, G1}  # reported at once, before any sample
    status = [
        AgentStatus(NODE, T0 + t * 15 * S_, (dcgm("failing", "unreachable"),)) for t in range(1, 41)
    ]
    out = feed(proc, status)
    beats = events(out, "heartbeat")
    by_time: dict[int, dict[str, AttributionEvent]] = {}
    for e in beats:
        by_time.setdefault(e.ts_ms, {})[e.device_uuid] = e
    assert len(by_time) == 10  # one beat a minute for ten minutes
    for devices in by_time.values():
        assert set(devices) == {G0, G1, G2}  # the free GPU too: every device the node has
        mps, trainer, free = devices[G0], devices[G1], devices[G2]
        assert (mps.state, mps.sharing, mps.tenant_count) == ("shared", "mps", 5)
        assert {h.uid for h in mps.holders} == {uid(f"mps-{i}") for i in range(5)}
        assert all(h.uid_status == "resolved" for e in devices.values() for h in e.holders)
        assert [h.pod for h in trainer.holders] == ["trainer-0"]
        assert free.state == "unallocated"
        for e in devices.values():
            assert e.telemetry.status == "unknown"
            assert e.telemetry.cause == "exporter-unreachable"
            assert "http://10.1.2.3:9400/metrics" in (e.telemetry.reason or "")
            assert e.usage.util_pct is None  # never 0
        assert sum(p.share for p in mps.pods) == pytest.approx(5 / 8)
        assert [(p.pod, p.share, p.basis) for p in trainer.pods] == [("trainer-0", 1.0, "whole")]
    assert [o for o in out if isinstance(o, Alert)] == []  # unknown is never idle


def test_a_fresh_sample_speaks_for_its_device_and_the_heartbeat_for_the_rest() -> None:
    proc = new()
    feed(proc, setup())
    out = feed(proc, [scrape(T0 + t * 10 * S_, G0, G1) for t in range(1, 13)])
    beats = events(out, "heartbeat")
    assert {e.device_uuid for e in beats} == {G2}  # the exporter has no row for G2
    assert {e.telemetry.cause for e in beats} == {"no-row"}
    assert {e.device_uuid for e in events(out, "sample")} == {G0, G1}


def test_another_nodes_exporter_is_refused_and_the_node_still_reports_its_own() -> None:
    """The agent scraping whichever exporter a cluster-routed Service picked: the other node's
    GPUs appear nowhere; this node's held GPUs are still reported, usage unknown, said why."""
    proc = new()
    feed(proc, setup())
    out = feed(proc, [scrape(T0 + t * 10 * S_, FOREIGN, hostname=OTHER) for t in range(1, 13)])
    refused = [o for o in out if isinstance(o, TelemetryRefused)]
    assert len(refused) == 12  # one per refused scrape: counted and flagged
    assert {(r.cause, r.uuids, r.rows) for r in refused} == {("hostname", (FOREIGN,), 1)}
    assert OTHER in refused[0].reason
    reported = events(out)
    assert FOREIGN not in {e.device_uuid for e in reported}
    assert not [o for o in out if isinstance(o, Alert)]
    beats = events(out, "heartbeat")
    assert {e.device_uuid for e in beats} == {G0, G1, G2}
    assert {e.telemetry.cause for e in beats} == {"scrape-refused"}


def test_foreign_gpus_behind_the_right_hostname_are_refused_row_by_row() -> None:
    proc = new()
    feed(proc, setup())
    out = feed(proc, [scrape(T0 + 10 * S_, G0, FOREIGN)])
    (refused,) = [o for o in out if isinstance(o, TelemetryRefused)]
    assert (refused.cause, refused.uuids) == ("foreign-devices", (FOREIGN,))
    assert [e.device_uuid for e in events(out, "sample")] == [G0]


def test_the_exporter_pods_own_name_is_an_accepted_hostname() -> None:
    """Without NODE_NAME, dcgm-exporter's Hostname is its pod's name (a genuine capture shows
    nvidia-dcgm-exporter-ml2wh): the agent found that pod on this node."""
    proc = new()
    feed(proc, setup())
    out = feed(proc, [scrape(T0 + 10 * S_, G0, hostname="nvidia-dcgm-exporter-abcde")])
    assert [e.device_uuid for e in events(out, "sample")] == [G0]


def test_a_node_deleted_goes_with_every_key() -> None:
    proc = new()
    feed(proc, setup(), partition=3)
    feed(proc, [scrape(T0 + 10 * S_, G0, G1, G2)], partition=3)
    before = proc.tables.sizes()
    assert (before["slot_holders"], before["pods"], before["alert_state"]) == (2, 6, 3)
    out = proc.handle(NodeRecord(NODE, T0 + 20 * S_, (), deleted=True), 3)
    gone = events(out, "gone")
    assert {e.device_uuid for e in gone} == {G0, G1, G2}
    assert all(e.holders == () and e.telemetry.cause == "gone" for e in gone)
    sizes = proc.tables.sizes()
    # every key of the node deleted; its partition remembers what its leaving emitted
    assert sizes == {**dict.fromkeys(before, 0), "partition_nodes": 1}
    assert proc.tables.partition_nodes["3"].nodes == ()


def test_a_silent_node_goes_stale_then_leaves_in_partition_time() -> None:
    proc = new()
    feed(proc, setup(), partition=1)
    feed(proc, [scrape(T0 + 10 * S_, G0, G1, G2)], partition=1)
    outs = [proc.handle(ClockTick(1, T0 + t * 15 * S_), 1) for t in range(1, 50)]
    stale = [(i, e) for i, out in enumerate(outs, 1) for e in events(out, "stale")]
    gone = [(i, e) for i, out in enumerate(outs, 1) for e in events(out, "gone")]
    (when,) = {i * 15 for i, _ in stale}  # once
    # silent 3 min after the last record (10 s): never earlier, at most a quantum and a tick later
    assert 10 + 180 <= when <= 10 + 180 + 15 + 15
    assert {e.device_uuid for _, e in stale} == {G0, G1, G2}
    assert all(e.telemetry.cause == "node-silent" for _, e in stale)
    assert [h.pod for h in next(e for _, e in stale if e.device_uuid == G1).holders] == [
        "trainer-0"
    ]
    (left,) = {i * 15 for i, _ in gone}
    assert 10 + 600 <= left <= 10 + 600 + 15 + 15 + 15  # silent 10 min, at two ticks
    sizes = proc.tables.sizes()
    assert sizes == {**dict.fromkeys(sizes, 0), "partition_nodes": 1}, sizes
    # another partition's tick never touches it
    other = new()
    feed(other, setup(), partition=1)
    assert other.handle(ClockTick(2, T0 + 20 * MIN), 2) == []
    assert other.tables.sizes()["node_state"] == 1


def test_a_record_older_than_the_nodes_leaving_is_bad_input_a_later_one_a_new_life() -> None:
    proc = new()
    feed(proc, setup())
    proc.handle(NodeRecord(NODE, T0 + 60 * S_, (), deleted=True))
    with pytest.raises(UnusableRecord, match="predates the node leaving"):
        proc.handle(scrape(T0 + 30 * S_, G0))
    out = feed(proc, setup(T0 + 90 * S_))  # the node came back (re-registered)
    assert {e.device_uuid for e in events(out, "allocation")} == {G0, G1}
    assert proc.tables.node_state[NODE].first_ms == T0 + 90 * S_  # a new life


def test_mig_reconfiguration_retires_the_old_instances_and_their_state() -> None:
    proc = new()
    mig = lambda n, gi: MigInfo(f"MIG-{n}", G0, gi, "1g.10gb")  # noqa: E731
    inv = lambda *migs: DeviceInventory(NODE, T0, "nvml", (GpuInfo(0, G0, "A100"),), migs)  # noqa: E731
    feed(proc, [NodeRecord(NODE, T0, LABELS), inv(mig("old-1", 1), mig("old-2", 2))])
    feed(
        proc,
        [
            PodResourcesSnapshot(
                NODE,
                T0,
                (),
                (
                    Alloc("nvidia.com/mig-1g.10gb", "MIG-old-1"),
                    Alloc("nvidia.com/mig-1g.10gb", "MIG-old-2"),
                ),
            )
        ],
    )

    def sample(ts: int, gi: int) -> S:
        return S(NODE, ts, G0, 0, "A100", NODE, mig_instance_id=gi, mig_profile="1g.10gb")

    feed(proc, [DcgmScrape(NODE, T0 + 10 * S_, (sample(T0 + 10 * S_, 1), sample(T0 + 10 * S_, 2)))])
    assert {f"{NODE}/MIG-old-1", f"{NODE}/MIG-old-2"} <= set(proc.tables.alert_state)
    # reconfigured: new instance UUIDs (GI 3 and 4), new allocatable IDs
    later = T0 + 2 * MIN
    new_inv = DeviceInventory(
        NODE, later, "nvml", (GpuInfo(0, G0, "A100"),), (mig("new-3", 3), mig("new-4", 4))
    )
    snap = PodResourcesSnapshot(
        NODE,
        later,
        (),
        (
            Alloc("nvidia.com/mig-1g.10gb", "MIG-new-3"),
            Alloc("nvidia.com/mig-1g.10gb", "MIG-new-4"),
        ),
    )
    scraped = DcgmScrape(NODE, later, (sample(later, 3), sample(later, 4)))
    out = feed(proc, [new_inv, snap, scraped])
    assert {e.device_uuid for e in events(out, "gone")} == {"MIG-old-1", "MIG-old-2"}
    assert not {k for k in proc.tables.alert_state if "old" in k}  # their state went with them
    state = proc.tables.node_state[NODE]
    assert {d for _, d in state.devices} == {"MIG-new-3", "MIG-new-4"}  # the GPU is its instances


def test_spine_outputs_survive_a_crash_at_any_point() -> None:
    """Every output a spine transition causes (heartbeat, stale, gone, the alerts the gone
    resolves) is emitted again when its input is processed again after a crash, whatever prefix
    of its state writes reached the changelog (the model of tests/unit/test_alert_crash_points)."""
    records: list[object] = [*setup()]
    records += [scrape(T0 + t * 10 * S_, G0, G1, G2, util=1.0) for t in range(1, 20)]  # idle G1
    records += [ClockTick(0, T0 + t * 15 * S_) for t in range(14, 60)]  # silent: stale, gone
    reference, states = [], []
    proc = new()
    tables = proc.tables
    for r in records:
        reference.append(proc.handle(r))
        states.append({f: dict(getattr(tables, f)) for f in tables.sizes()})

    def keys(outs: Iterable[Output]) -> set[str]:
        out = set()
        for o in outs:
            if isinstance(o, Alert):
                out.add(f"alert {o.id}:{o.status}")
            elif isinstance(o, AttributionEvent) and o.origin != "sample":
                out.add(f"{o.origin} {o.device_uuid} {o.ts_ms}")
        return out

    expected = set().union(*(keys(o) for o in reference))
    assert any(k.startswith("stale") for k in expected)
    assert any(k.startswith("gone") for k in expected)
    assert any(k.startswith("heartbeat") for k in expected) or any(
        k.startswith("allocation") for k in expected
    )
    assert any(":resolved" in k for k in expected)  # the idle alert the node's leaving resolved
    empty = {f: {} for f in tables.sizes()}
    persisted = [empty, *states]
    checked = 0
    for k in range(len(records)):
        for s in (k, k + 1):  # the input's state writes lost, or kept
            for o in (k, k + 1):  # its outputs lost, or delivered
                delivered = set().union(*(keys(x) for x in reference[:o]))
                replay = Processor(
                    Tables(**{f: dict(v) for f, v in persisted[s].items()}), proc.policy, LIFE
                )
                for r in records[k:]:
                    delivered |= keys(replay.handle(r))
                assert delivered == expected, (k, s, o, expected - delivered)
                checked += 1
    assert checked > 200


@pytest.mark.parametrize(
    "record",
    [
        NodeRecord("", T0, (("nvidia.com/gpu.present", "true"),)),
        NodeRecord("", T0 + S_, (), deleted=True),
        PodResourcesSnapshot("", T0, ()),
    ],
    ids=["labels", "deletion", "podresources"],
)
def test_a_record_naming_no_node_is_bad_input_and_changes_nothing(record: object) -> None:
    """Found by the processor fuzz test: a node named "" lived and left like any other, and its
    leaving wrote a node-status tombstone under the empty key."""
    proc = new()
    feed(proc, setup())
    before = proc.tables.sizes()
    with pytest.raises(UnusableRecord, match="names no node"):
        proc.handle(record)
    assert proc.tables.sizes() == before
