"""Time is checked, never trusted: a tick or record far ahead of its partition's event time is
refused, a tick ages the partition it was read from, a node leaves only past its TTL at two
accepted ticks, and a late record never moves a node's last heard back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract.inputs import (
    AgentStatus,
    ClockTick,
    NodeSupply,
    PodRecord,
    SourceStatus,
    SupplyDevice,
)
from contract.records import replace
from streams.core.flow.demandstage import DemandClockJump, DemandStage, DemandTables
from streams.core.flow.processor import ClockJump, Output, Processor, UnusableRecord
from streams.core.lifetimes import QUANTUM_MS
from streams.core.node import nodestate
from streams.core.node.nodestate import NodeState
from tests.unit.test_spine import (
    G0,
    G1,
    G2,
    LIFE,
    MIN,
    NODE,
    OTHER,
    S_,
    T0,
    events,
    feed,
    new,
    scrape,
)
from tests.unit.test_spine import setup as node_setup

#: a quantum's start, as the node's times are kept
Q0 = T0 - T0 % QUANTUM_MS


def status(ts: int, node: str = NODE) -> AgentStatus:
    return AgentStatus(node, ts, (SourceStatus("dcgm", "ok", ts),))


def ticks(proc: Processor, start: int, end: int, every: int = 15 * S_, p: int = 0) -> list[Output]:
    out: list[Output] = []
    for ts in range(start, end + 1, every):
        out += proc.handle(ClockTick(p, ts), p)
    return out


def live(partition: int = 0) -> Processor:
    proc = new()
    feed(proc, node_setup(), partition)
    feed(proc, [scrape(T0 + 10 * S_, G0, G1, G2)], partition)
    return proc


@pytest.mark.parametrize(
    ("last", "ts", "expected"),
    [
        pytest.param(
            Q0 + QUANTUM_MS, Q0 + 3 * QUANTUM_MS, Q0 + 3 * QUANTUM_MS, id="newer-moves-on"
        ),
        pytest.param(Q0 + QUANTUM_MS, Q0 + QUANTUM_MS + 7, Q0 + QUANTUM_MS, id="same-quantum"),
        pytest.param(Q0 + 16 * QUANTUM_MS, Q0, Q0 + 16 * QUANTUM_MS, id="4-min-late-stays"),
        pytest.param(Q0 + 16 * QUANTUM_MS, Q0 + 15 * QUANTUM_MS + 1, Q0 + 16 * QUANTUM_MS, id="1q"),
    ],
)
def test_last_heard_never_moves_back(last: int, ts: int, expected: int) -> None:
    state = NodeState(Q0, last)
    assert nodestate.heard(state, ts, QUANTUM_MS).last_ms == expected


def test_a_late_stale_node_record_leaves_it_stale() -> None:
    state = NodeState(Q0, Q0 + 16 * QUANTUM_MS, stale=True, stale_ms=Q0 + 30 * QUANTUM_MS)
    assert nodestate.heard(state, Q0, QUANTUM_MS) == state


def test_a_scrape_four_minutes_late_after_a_fresh_status_keeps_the_node_live() -> None:
    """After a broker outage each collector retries on its own: the exporter's answer from four
    minutes back comes after the agent's status of 10 s ago."""
    proc = live()
    ticks(proc, T0 + 15 * S_, T0 + 5 * MIN)
    feed(proc, [status(T0 + 5 * MIN - 10 * S_), scrape(T0 + MIN, G0, G1, G2)])
    out = proc.handle(ClockTick(0, T0 + 5 * MIN + 5 * S_), 0)
    assert events(out, "stale") == []
    assert events(out, "gone") == []
    assert not proc.tables.node_state[NODE].stale


def test_a_tick_far_ahead_is_refused_and_ages_nobody() -> None:
    proc = live()
    ticks(proc, T0 + 15 * S_, T0 + MIN)
    forged = ClockTick(0, T0 + MIN + 15 * MIN)
    with pytest.raises(ClockJump, match=r"the cluster role at \d+ is \d+s ahead of partition 0"):
        proc.handle(forged, 0)
    with pytest.raises(ClockJump):  # the same source again confirms nothing
        proc.handle(ClockTick(0, forged.ts_ms + 15 * S_), 0)
    assert NODE in proc.tables.node_state
    out = feed(proc, [status(T0 + MIN + 5 * S_), scrape(T0 + MIN + 6 * S_, G0)])
    out += proc.handle(ClockTick(0, T0 + MIN + 15 * S_), 0)
    assert events(out, "gone") == []
    assert events(out, "stale") == []


def test_a_node_record_far_ahead_is_refused_until_another_source_confirms_it() -> None:
    """The whole cluster back after a long stop: no single source moves the clock that far, a
    second one does."""
    proc = live()
    feed(proc, node_setup(T0, OTHER))
    back = T0 + 30 * MIN
    with pytest.raises(ClockJump, match=f"node '{NODE}' at {back}"):
        proc.handle(status(back), 0)
    with pytest.raises(ClockJump):
        proc.handle(status(back + 10 * S_), 0)  # the same node again
    proc.handle(status(back + 20 * S_, OTHER), 0)  # another node: confirmed
    proc.handle(status(back + 30 * S_), 0)
    assert proc.tables.node_state[NODE].last_ms > back


def test_a_node_alone_on_its_partition_confirms_its_own_jump_after_the_bound() -> None:
    """Back after a long silence while no tick comes: its records are refused for the bound, then
    its own time is the partition's; a skewed cluster role's ticks never confirm themselves."""
    proc = live()
    back = T0 + 30 * MIN
    refused = 0
    for t in range(back, back + 3 * MIN, 15 * S_):
        try:
            proc.handle(status(t), 0)
        except ClockJump:
            refused += 1
    assert refused == 8  # 120 s of its records, then confirmed by its own kept up
    assert proc.tables.node_state[NODE].last_ms >= back + 2 * MIN
    skewed = back + 3 * MIN + 15 * MIN
    for t in range(skewed, skewed + 5 * MIN, 15 * S_):
        with pytest.raises(ClockJump):
            proc.handle(ClockTick(0, t), 0)
    assert proc.tables.node_state[NODE].stale is False


def test_a_tick_ages_the_partition_it_was_read_from() -> None:
    proc = live(partition=1)
    with pytest.raises(UnusableRecord, match=r"clock\.tick of partition 0 read from partition 1"):
        proc.handle(ClockTick(0, T0 + 15 * S_), 1)
    out = ticks(proc, T0 + 15 * S_, T0 + 4 * MIN, p=1)
    assert {e.device_uuid for e in events(out, "stale")} == {G0, G1, G2}


def test_a_node_leaves_only_past_its_ttl_at_two_ticks() -> None:
    proc = live()
    last = proc.tables.node_state[NODE].last_ms
    first_past = last + QUANTUM_MS + 10 * MIN  # the node judged a quantum late
    ticks(proc, T0 + MIN, first_past - MIN, every=MIN)
    out = proc.handle(ClockTick(0, first_past), 0)
    assert events(out, "gone") == []  # past its TTL at one tick only
    assert NODE in proc.tables.node_state
    out = proc.handle(ClockTick(0, first_past + 15 * S_), 0)
    assert {e.device_uuid for e in events(out, "gone")} == {G0, G1, G2}
    assert NODE not in proc.tables.node_state
    assert proc.handle(ClockTick(0, first_past + 15 * S_), 0) == out  # processed again


# --- records of any kind shuffled within a bounded lateness never change a live node's phase

END = T0 + 20 * MIN
#: what the retrying collectors send, re-stamped (the exporter's answers, the pod watch, the
#: kubelet's lists, the node object): late by up to nine minutes, any order
RETRIED = [*node_setup(), scrape(T0, G0, G1, G2)]


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(range(len(RETRIED))), min_size=110, max_size=110),
    late_s=st.lists(st.integers(0, 9 * 60), min_size=110, max_size=110),
    status_late_s=st.lists(st.integers(0, 20), min_size=40, max_size=40),
)
def test_late_and_shuffled_records_never_change_a_live_nodes_phase(
    kinds: list[int], late_s: list[int], status_late_s: list[int]
) -> None:
    """The node's agent speaks every 30 s (its status, nearly on time); its other collectors'
    records (every 10 s) arrive up to nine minutes late, in any order; ticks come every 15 s.
    The node is live throughout: no tick or record makes it stale or gone."""
    proc = live()
    arrivals: list[tuple[int, int, object]] = []
    for i, (kind, late) in enumerate(zip(kinds, late_s, strict=True)):
        ts = T0 + MIN + i * 10 * S_
        record = replace(RETRIED[kind], ts_ms=ts)  # type: ignore[type-var]
        if isinstance(record, PodRecord):
            record = replace(record, created_ms=T0)
        arrivals.append((ts + late * S_, 1, record))
    for i, late in enumerate(status_late_s):
        ts = T0 + MIN + i * 30 * S_
        arrivals.append((ts + late * S_, 1, status(ts)))
    for ts in range(T0 + MIN, END, 15 * S_):
        arrivals.append((ts, 0, ClockTick(0, ts)))
    last = proc.tables.node_state[NODE].last_ms
    for _, _, record in sorted(arrivals, key=lambda a: (a[0], a[1])):
        out = proc.handle(record, 0)
        assert events(out, "stale") == [], record
        assert events(out, "gone") == [], record
        state = proc.tables.node_state[NODE]
        assert state.last_ms >= last
        assert not state.stale
        last = state.last_ms


# --- the demand stage's partitions: the same bound


def test_the_demand_stage_refuses_a_tick_far_ahead_until_a_node_confirms_it() -> None:
    stage = DemandStage(DemandTables(), 900.0, life=LIFE)
    stage.handle(NodeSupply(T0, NODE, "nvidia.com/gpu", (SupplyDevice(G0),)), 0, b"nvidia.com/gpu")
    before = DemandTables(**{k: dict(v) for k, v in vars(stage.tables).items()})
    with pytest.raises(DemandClockJump, match=r"the cluster role at \d+ is 90\ds ahead"):
        stage.handle(ClockTick(0, T0 + 15 * MIN), 0, None)
    assert vars(stage.tables) == vars(before)  # refused whole
    stage.handle(ClockTick(0, T0 + MIN), 0, None)  # within the bound
    supply = NodeSupply(T0 + 15 * MIN + S_, NODE, "nvidia.com/gpu", (SupplyDevice(G0),))
    stage.handle(supply, 0, b"nvidia.com/gpu")  # a node as far ahead: confirmed
    assert stage.tables.demand_partitions["0"].clock_ms == T0 + 15 * MIN + S_ - (
        (T0 + 15 * MIN + S_) % QUANTUM_MS
    )
