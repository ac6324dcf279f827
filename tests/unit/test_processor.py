"""The processor over plain dict tables: the same code the Faust agent runs."""

from __future__ import annotations

from contract.inputs import (
    DcgmSample,
    DeviceInventory,
    ExporterClaim,
    GpuInfo,
    MigInfo,
    PodResourcesDiff,
    PodResourcesSnapshot,
)
from contract.inputs import DeviceAssignment as A
from contract.outputs import AttributionEvent, TelemetryRefused
from streams.core.flow.processor import Processor, Tables
from streams.core.node.nodestate import NodeState, accepted
from streams.core.replays import SCRAPES_REMEMBERED

G0, G1 = "GPU-aaaa", "GPU-bbbb"


def proc() -> Processor:
    return Processor(Tables.in_memory())


def sample(ts: int, uuid: str = G0, **kw: object) -> DcgmSample:
    return DcgmSample(
        node="n1",
        ts_ms=ts,
        uuid=uuid,
        gpu_index=0,
        model="A100",  # type: ignore[arg-type]
        hostname="n1",
        util_pct=50.0,
        **kw,
    )


def only_event(out: list[object]) -> AttributionEvent:
    events = [o for o in out if isinstance(o, AttributionEvent)]
    assert len(events) == 1
    return events[0]


def test_holders_follow_snapshots_and_diffs() -> None:
    p = proc()
    a = A("ml", "a", "c", "nvidia.com/gpu", G0)
    b = A("ml", "b", "c", "nvidia.com/gpu", G0)
    # the allocation is reported at once, before any sample: usage unknown, with the reason
    first = only_event(p.handle(PodResourcesSnapshot("n1", 100, (a,))))
    assert (first.origin, first.state, [h.pod for h in first.holders]) == (
        "allocation",
        "exclusive",
        ["a"],
    )
    assert (first.telemetry.status, first.telemetry.cause) == ("unknown", "no-sample-yet")
    assert first.usage.util_pct is None
    assert [h.pod for h in only_event(p.handle(sample(150))).holders] == ["a"]
    p.handle(PodResourcesDiff("n1", 200, added=(b,), removed=(a,)))
    assert [h.pod for h in only_event(p.handle(sample(250))).holders] == ["b"]
    # a sample taken before the hand-over but processed after it still joins the old holder
    assert [h.pod for h in only_event(p.handle(sample(180))).holders] == ["a"]


def test_sample_before_any_podresources_view_is_unknown_not_unallocated() -> None:
    p = proc()
    p.handle(DeviceInventory("n1", 0, "nvml", (GpuInfo(0, G0), GpuInfo(1, G1))))
    out = p.handle(sample(1, G1, exporter_claims=(ExporterClaim("ml", "x", "c"),)))
    ev = only_event(out)
    assert (ev.state, ev.credit, ev.holders) == ("unknown", "none", ())
    assert not ev.exporter.trusted
    assert len(out) == 1  # no misattribution flag: the claim cannot be checked yet
    p.handle(PodResourcesSnapshot("n1", 2, ()))
    assert only_event(p.handle(sample(3, G1))).state == "unallocated"


def test_a_scrape_nothing_can_check_is_refused_not_attributed() -> None:
    p = proc()
    out = p.handle(sample(1, G1))
    [refused] = out
    assert isinstance(refused, TelemetryRefused)
    assert (refused.cause, refused.uuids) == ("unverifiable", (G1,))


def test_mig_sample_joins_instance_holder_via_inventory() -> None:
    p = proc()
    p.handle(
        DeviceInventory("n1", 0, "nvml", (GpuInfo(0, G0),), (MigInfo("MIG-1", G0, 3, "1g.10gb"),))
    )
    p.handle(PodResourcesSnapshot("n1", 1, (A("ml", "m", "c", "nvidia.com/mig-1g.10gb", "MIG-1"),)))
    ev = only_event(p.handle(sample(5, mig_instance_id=3, gr_engine_active=0.5)))
    assert (ev.device_uuid, ev.state, ev.sharing) == ("MIG-1", "exclusive", "mig")
    assert [h.pod for h in ev.holders] == ["m"]
    parent = only_event(p.handle(sample(5)))
    assert parent.state == "mig-parent"
    assert parent.holders == ()


def test_an_allocation_processed_again_after_the_first_scrape_says_what_it_said_then() -> None:
    """Regression (bench.run, two workers: ~2,000 redelivered events differed): a PodResources
    record processed again after a rebalance, against state that already held the node's first
    scrapes, said "holders changed, not measured since" and named a sample from after its own
    time. Before the first scrape no sample had come, whatever came since."""
    p = proc()
    a = A("ml", "a", "c", "nvidia.com/gpu", G0)
    snapshot = PodResourcesSnapshot("n1", 100, (a,))
    first = only_event(p.handle(snapshot))
    assert first.telemetry.cause == "no-sample-yet"
    p.handle(sample(150))
    p.handle(sample(5_150))
    assert only_event(p.handle(snapshot)) == first
    # after the first scrape, an allocation change is "holders changed"
    b = A("ml", "b", "c", "nvidia.com/gpu", G0)
    moved = only_event(p.handle(PodResourcesDiff("n1", 5_200, added=(b,), removed=(a,))))
    assert moved.telemetry.cause == "holders-changed"


def test_a_node_state_written_before_the_first_scrape_was_kept_reads_as_before() -> None:
    """A value from an older worker has scrapes but no first-scrape time: every time is judged
    against its scrapes, and the first time is not invented later."""
    old = NodeState(first_ms=0, last_ms=5_000, scrape_ms=5_000, scraped=("k",))
    assert old.scraped_by(10)
    assert old.first_scrape_ms is None
    assert accepted(old, 10_000, ("k",), 15_000).first_scrape_ms is None
    fresh = accepted(NodeState(first_ms=0, last_ms=0), 7_000, ("k",), 15_000)
    assert fresh.first_scrape_ms == 7_000
    assert not fresh.scraped_by(6_999)
    assert fresh.scraped_by(7_000)
    assert accepted(fresh, 6_000, ("k",), 15_000).first_scrape_ms == 6_000  # an older one came


def test_an_allocation_processed_again_after_later_scrapes_names_the_sample_it_named_then() -> None:
    """A diff processed again after a rebalance, against state that already holds the node's next
    scrape, says "not measured since" the sample before its own time, never the one after it
    (found by bench.run with two workers)."""
    p = proc()
    a = A("ml", "a", "c", "nvidia.com/gpu", G0)
    b = A("ml", "b", "c", "nvidia.com/gpu", G0)
    p.handle(PodResourcesSnapshot("n1", 100, (a,)))
    p.handle(sample(35_000))  # the quantum of 30 s (15 s quanta)
    p.handle(sample(40_000))
    diff = PodResourcesDiff("n1", 44_999, added=(b,), removed=(a,))
    first = only_event(p.handle(diff))
    assert (first.telemetry.cause, first.telemetry.last_sample_ms) == ("holders-changed", 30_000)
    p.handle(sample(45_000))  # a new quantum: the node's latest scrape is after the diff
    assert only_event(p.handle(diff)) == first


def test_a_diff_processed_again_after_two_more_changes_leaves_the_holders_as_they_are() -> None:
    """Regression (a replay of the bench fleet from 45 s back): a diff processed again against
    the holders of two changes later removed what was no longer there and added its pods back
    beside the later ones: six tenants of two generations on a 3-tenant GPU until the next
    diff. It names the holders of its own time again and changes nothing."""
    p = proc()
    g0, g1, g2 = (A("ml", f"p{i}", "c", "nvidia.com/gpu", G0) for i in range(3))
    p.handle(PodResourcesSnapshot("n1", 100, (g0,)))
    first = only_event(p.handle(diff := PodResourcesDiff("n1", 20_000, added=(g1,), removed=(g0,))))
    p.handle(PodResourcesDiff("n1", 40_000, added=(g2,), removed=(g1,)))
    holders = dict(p.tables.slot_holders)
    assert only_event(p.handle(diff)) == first
    assert dict(p.tables.slot_holders) == holders
    assert [h.pod for h in only_event(p.handle(sample(30_000))).holders] == ["p1"]
    assert [h.pod for h in only_event(p.handle(sample(45_000))).holders] == ["p2"]
    # a snapshot processed again after later changes leaves them as they are too
    p2 = proc()
    snap = PodResourcesSnapshot("n1", 100, (g0,))
    p2.handle(snap)
    p2.handle(PodResourcesDiff("n1", 20_000, added=(g1,), removed=(g0,)))
    holders = dict(p2.tables.slot_holders)
    p2.handle(snap)
    assert dict(p2.tables.slot_holders) == holders
    assert [h.pod for h in only_event(p2.handle(sample(25_000))).holders] == ["p1"]


def test_a_node_remembers_the_first_scrape_of_its_last_quanta_and_reads_each_time_its_own() -> None:
    q = 15_000
    state = NodeState(first_ms=0, last_ms=0)
    for ts in (7_000, 12_000, 16_000, 29_000, 31_000):
        state = accepted(state, ts, ("k",), q)
    assert state.scrape_starts == (31_000, 16_000, 7_000)
    assert state.scrape_ms == 30_000
    # a record of each time reads the scrape it read when it came in order, never a later one
    assert [state.scrape_at(t, q) for t in (6_999, 7_000, 15_999, 16_000, 30_999, 31_000)] == [
        None,
        0,
        0,
        15_000,
        15_000,
        30_000,
    ]
    # a quantum's first scrape only: later ones of the same quantum change nothing (no write)
    assert accepted(state, 33_000, ("k",), q) is state
    # an earlier one of a kept quantum, come late, is its first from now on
    assert accepted(state, 15_500, ("k",), q).scrape_starts == (31_000, 15_500, 7_000)
    # the memory keeps the newest quanta; one from before all of a full memory is not kept
    for ts in range(45_000, 200_000, q):
        state = accepted(state, ts, ("k",), q)
    assert len(state.scrape_starts) == SCRAPES_REMEMBERED
    oldest = state.scrape_starts[-1]
    assert accepted(state, 5_000, ("k",), q).scrape_starts == state.scrape_starts
    assert state.scrape_at(oldest - 1, q) == state.scrape_ms  # further back than it remembers
    # a value of an older worker, without that memory, reads its latest scrape
    old = NodeState(first_ms=0, last_ms=5_000, scrape_ms=5_000, scraped=("k",))
    assert old.scrape_at(1, q) == 5_000
