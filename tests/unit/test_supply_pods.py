"""A pod's record recomputes its node's supply only when a pod the supply lists no longer
resolves to the UID and workload it names
(:meth:`streams.core.flow.processor.Processor._identities_moved`): the rule is checked
against a processor that recomputes the supply on every pod record, over fleet streams with
pod records inserted anywhere (deletions, new lives of a name, workloads, out of event-time
order)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from agents.types import AgentRecord
from bench import fleet as bench_fleet
from contract import codec
from contract.inputs import OwnerRef, PodRecord, PodResourcesDiff, SupplyHolder
from streams.core.flow.processor import SUPPLY_INPUTS, Output, Processor, Tables
from tests.unit.test_fuzz_processor import record_streams
from tests.unit.test_spine import MIN, NODE, S_, T0, TRAINER, UNBOUNDED, setup, uid
from tests.unit.test_supply import Counting, new, supplies

START_MS = 1_700_000_000_000
DEPLOY = OwnerRef("Deployment", "w0")


class EveryPodRecord(Processor):
    """The oracle: every pod record recomputes its node's supply."""

    def _changes_supply(self, node: str, record: object) -> bool:
        return isinstance(record, SUPPLY_INPUTS)


# --- through the processor


def test_a_holders_deletion_before_the_kubelet_lets_go_neither_emits_nor_writes() -> None:
    tables = Tables.in_memory()
    tables.node_supply = Counting()  # type: ignore[assignment]
    proc = new(tables=tables)
    for r in setup():
        proc.handle(r)
    writes = tables.node_supply.writes  # type: ignore[attr-defined]
    gone = PodRecord(NODE, T0 + S_, uid("trainer-0"), "ml", "trainer-0", T0, deleted=True)
    assert supplies(proc.handle(gone)) == []
    assert tables.node_supply.writes == writes  # type: ignore[attr-defined]
    # the kubelet lets go: the allocation says so
    out = supplies(proc.handle(PodResourcesDiff(NODE, T0 + 2 * S_, (), (TRAINER,))))
    assert "trainer-0" not in {h.pod for r in out for d in r.devices for h in d.holders}


def test_a_new_life_of_a_holders_name_is_supplied_with_its_uid_and_workload() -> None:
    proc = new()
    for r in setup():
        proc.handle(r)
    recreated = PodRecord(
        NODE, T0 + S_, "uid-new", "ml", "trainer-0", T0 + S_, workload=OwnerRef("Job", "again")
    )
    (record,) = supplies(proc.handle(recreated))
    (holder,) = [h for d in record.devices for h in d.holders if h.pod == "trainer-0"]
    assert holder == SupplyHolder("ml", "trainer-0", "uid-new", "Job/again")


def test_a_holders_last_life_forgotten_is_supplied_without_its_uid() -> None:
    """The kubelet still lists a pod deleted longer ago than the node remembers it: another
    pod's record prunes the name, and the supply stops naming a UID it no longer knows."""
    proc = new(life=UNBOUNDED)
    for r in setup():
        proc.handle(r)
    gone = PodRecord(NODE, T0 + S_, uid("trainer-0"), "ml", "trainer-0", T0, deleted=True)
    assert supplies(proc.handle(gone)) == []
    later = T0 + S_ + 11 * MIN  # past the history the node keeps of a gone life
    other = PodRecord(NODE, later, "uid-other", "ml", "elsewhere", later)
    (record,) = supplies(proc.handle(other))
    (holder,) = [h for d in record.devices for h in d.holders if h.pod == "trainer-0"]
    assert holder == SupplyHolder("ml", "trainer-0", None, None)


# --- the rule against the oracle


@st.composite
def pod_streams(draw: st.DrawFn) -> list[object]:
    """A fleet stream with churn, and pod records of its pods' names inserted anywhere."""
    records: list[object] = list(
        bench_fleet.stream(
            draw(st.integers(1, 2)),
            draw(st.integers(2, 6)),
            start_ms=START_MS,
            interval_ms=draw(st.sampled_from([1000, 5000, 240_000])),
            churn_every=draw(st.integers(1, 3)),
            seed=draw(st.integers(0, 1000)),
        )
    )
    pods = sorted(
        {(r.node, r.namespace, r.name, r.uid) for r in records if isinstance(r, PodRecord)}
    )
    times = [getattr(r, "ts_ms", START_MS) for r in records]
    for _ in range(draw(st.integers(1, 25))):
        node, namespace, name, known = draw(st.sampled_from(pods))
        ts = draw(st.integers(min(times), max(times) + 20 * MIN))
        rec = PodRecord(
            node,
            ts,
            draw(st.sampled_from([known, known, f"{known}-again", "uid-stranger"])),
            namespace,
            name,
            draw(st.one_of(st.none(), st.integers(ts - 2 * MIN, ts))),
            deletion_ts_ms=draw(st.one_of(st.none(), st.just(ts))),
            deleted=draw(st.booleans()),
            annotations=draw(st.sampled_from([(), (("gpuattr/idle-window", "60s"),)])),
            workload=draw(st.sampled_from([None, DEPLOY, OwnerRef("Job", "j")])),
        )
        records.insert(draw(st.integers(0, len(records))), rec)
    return records


@settings(max_examples=150, deadline=None)
@given(stream=pod_streams())
def test_the_rule_emits_exactly_what_recomputing_on_every_pod_record_emits(
    stream: list[object],
) -> None:
    same_as_the_oracle(stream)


@settings(max_examples=100, deadline=None)
@given(stream=record_streams())
def test_the_rule_holds_on_the_fuzzers_streams(stream: list[AgentRecord]) -> None:
    """Random records of every kind inserted, dropped, repeated, swapped and mutated."""
    same_as_the_oracle(stream)


def same_as_the_oracle(stream: Sequence[object]) -> None:
    ruled, oracle = new(), new(cls=EveryPodRecord)
    for record in stream:
        wire = codec.decode(codec.encode(record))
        assert outcome(ruled, wire) == outcome(oracle, wire), record
    assert ruled.tables == oracle.tables


def outcome(proc: Processor, record: object) -> list[Output] | str:
    """The record's outputs, or the refusal of a record that is bad input (both alike)."""
    try:
        return proc.handle(record)
    except ValueError as error:
        return f"refused: {error}"


def test_the_check_can_fail_a_rule_that_never_recomputes_misses_a_recreated_holder() -> None:
    """The comparison above can fail: a rule that never recomputes on pod records misses the
    holder whose name is recreated."""

    class Never(Processor):
        def _identities_moved(self, node: str, old: object, at: int) -> bool:
            return False

    never, oracle = new(cls=Never), new(cls=EveryPodRecord)
    for r in setup():
        never.handle(r)
        oracle.handle(r)
    recreated = PodRecord(NODE, T0 + S_, "uid-new", "ml", "trainer-0", T0 + S_)
    assert supplies(never.handle(recreated)) == []
    assert supplies(oracle.handle(recreated)) != []
