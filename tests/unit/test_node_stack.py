"""The GPU stack through the processor: operand pods kept per node, the ClusterPolicy per
partition, a node's ``node-status`` emitted when its stack inputs change it (and only then), its
telemetry line in every "usage unknown" of the allocation spine, retired with the node, and
every status it emitted emitted again after a crash at any point."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson
import pytest

from contract import codec
from contract.inputs import (
    AgentStatus,
    ClockTick,
    ClusterPolicyRecord,
    NodeRecord,
    OperandPod,
    OperandPods,
)
from contract.outputs import MigReconcile, NodeStatus, NodeStatusRetired
from contract.records import replace
from streams.core.flow.processor import Output, Processor, Tables
from streams.core.flow.state import TABLE_CODEC
from streams.core.stack.nodestack import REMEMBERED, Emission, NodeStack, PartitionPolicies, step
from tests.unit.test_operatorstack import (
    DP,
    EXPORTER,
    GFD,
    HEALTHY,
    LABELS,
    NS,
    READY_POLICY,
    SEED_POLICY,
    crashloop,
    in_init,
    validator,
    with_pods,
)
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
    dcgm,
    events,
    feed,
    new,
    scrape,
    setup,
    uid,
)
from tests.unit.test_spine import LABELS as SPINE_LABELS

DEPLOYED = (*SPINE_LABELS, *sorted(LABELS.items()))
OFF = "nvidia.com/gpu.deploy.dcgm-exporter"
NO_MIG = MigReconcile(None, None, None, None, "no MIG configuration for this node")


def node_record(ts: int, *extra: tuple[str, str], node: str = NODE) -> NodeRecord:
    labels = dict(DEPLOYED) | dict(extra)
    return NodeRecord(node, ts, tuple(sorted(labels.items())))


def operands(ts: int, pods: tuple[OperandPod, ...], node: str = NODE) -> OperandPods:
    return OperandPods(node, ts, NS, pods)


def statuses(outputs: Iterable[Output]) -> list[NodeStatus]:
    return [o for o in outputs if isinstance(o, NodeStatus)]


def agent(ts: int, state: str, reason: str = "") -> AgentStatus:
    return AgentStatus(NODE, ts, (replace(dcgm(state, reason, ts), since_ms=T0),))


@dataclass(frozen=True)
class Case:
    pods: tuple[OperandPod, ...]
    labels: tuple[tuple[str, str], ...] = ()
    policy: ClusterPolicyRecord | None = READY_POLICY
    dcgm: tuple[str, str] = ("failing", "unreachable")
    # expected
    state: str = "broken"
    first: str | None = None
    cause: str = "exporter-unreachable"
    reason: str = ""
    intended: bool = False
    extra: dict[str, str] = field(default_factory=dict)
    plane: str | None = "dcgm-exporter"  # the first broken boundary the telemetry names


CASES = {
    # the seed's lab: the toolkit is the one broken boundary; the exporter waits on it
    "seed: toolkit not ready, four operands wait": Case(
        pods=with_pods(
            in_init(DP), in_init(EXPORTER), in_init(GFD), validator("toolkit-validation", 7)
        ),
        policy=SEED_POLICY,
        first="container-toolkit",
        cause="stack-broken",  # not the exporter's own boundary: the toolkit's
        plane="container-toolkit",
        reason="dcgm-exporter waits on the container toolkit (container toolkit not ready: "
        "the validator's toolkit-validation CrashLoopBackOff, 7 restarts)",
    ),
    "exporter disabled by label: not an error": Case(
        pods=with_pods(drop=(EXPORTER,)),
        labels=((OFF, "false"),),
        dcgm=("disabled", "no-exporter-pod"),
        state="ready",
        cause="no-exporter",
        reason="dcgm-exporter disabled on this node by nvidia.com/gpu.deploy.dcgm-exporter=false "
        "(disabled by intent, not a fault)",
        intended=True,
        plane=None,
    ),
    # unset in the policy, the operator's default is on, the label says true: its pod is missing
    "exporter intended by the operator's default, its pod missing": Case(
        pods=with_pods(drop=(EXPORTER,)),
        policy=replace(
            READY_POLICY,
            operands=tuple(o for o in READY_POLICY.operands if o.operand != "dcgmExporter"),
        ),
        first="dcgm-exporter",
        reason="dcgm-exporter no nvidia-dcgm-exporter pod on this node",
    ),
    "exporter crash looping": Case(
        pods=with_pods(crashloop(EXPORTER, 12)),
        first="dcgm-exporter",
        reason="dcgm-exporter CrashLoopBackOff, 12 restarts",
    ),
    "all ready: the agent's own word stays": Case(
        pods=HEALTHY,
        state="broken",
        first="dcgm-exporter",
        reason="dcgm-exporter ready, but our agent cannot scrape it since",
    ),
}


def run(case: Case) -> tuple[Processor, list[Output]]:
    proc = new()
    out = feed(proc, setup())
    if case.policy is not None:
        out += proc.handle(case.policy, 0)
    out += feed(
        proc,
        [
            node_record(T0 + S_, *case.labels),
            operands(T0 + S_, case.pods),
            *(agent(T0 + t * 15 * S_, *case.dcgm) for t in range(1, 9)),
        ],
    )
    return proc, out


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_every_held_gpu_says_why_its_usage_is_unknown_as_the_stack_says(case: Case) -> None:
    proc, out = run(case)
    status = statuses(out)[-1]
    assert (status.state, status.first_broken) == (case.state, case.first)
    assert status.telemetry_disabled is case.intended
    assert proc.tables.node_stack[NODE].last == status
    beats = events(out, "heartbeat")
    assert {e.ts_ms for e in beats} == {T0 + MIN, T0 + 2 * MIN}
    for e in beats:
        assert e.telemetry.status == "unknown"
        assert (e.telemetry.cause, e.telemetry.plane) == (case.cause, case.plane)
        assert codec.decode(codec.encode(e)) == e
        assert (e.telemetry.reason or "").startswith(case.reason), e.telemetry.reason
        assert e.usage.util_pct is None  # never 0
    by_device = {e.device_uuid: e for e in beats if e.ts_ms == T0 + 2 * MIN}
    assert set(by_device) == {G0, G1, G2}  # every device, held or not
    assert {h.uid for h in by_device[G0].holders} == {uid(f"mps-{i}") for i in range(5)}
    assert [h.pod for h in by_device[G1].holders] == ["trainer-0"]


def test_an_attribution_event_of_v1_without_the_plane_is_still_read() -> None:
    _, out = run(CASES["exporter crash looping"])
    event = events(out, "heartbeat")[0]
    raw = orjson.loads(codec.encode(event))
    assert raw["v"] == 2
    raw["v"] = 1
    del raw["telemetry"]["plane"]
    assert codec.decode(orjson.dumps(raw)) == replace(
        event, telemetry=replace(event.telemetry, plane=None)
    )


def test_exporter_disabled_by_label_every_held_gpu_reported_with_holders_disabled_by_intent() -> (
    None
):
    """The issue's check, in the worker: on the node whose exporter is off by its deploy label,
    every held GPU is in every heartbeat with its holders, its usage unknown "disabled by intent",
    and no alert of any kind."""
    _, out = run(CASES["exporter disabled by label: not an error"])
    held = [e for e in events(out, "heartbeat") if e.holders]
    assert {e.device_uuid for e in held} == {G0, G1}
    assert all("disabled by intent" in (e.telemetry.reason or "") for e in held)
    assert not [o for o in out if type(o).__name__ == "Alert"]


def test_a_status_is_emitted_when_it_changes_and_only_then() -> None:
    proc = new()
    feed(proc, setup())
    proc.handle(READY_POLICY, 0)
    first = feed(
        proc,
        [
            node_record(T0 + S_),
            operands(T0 + S_, HEALTHY),
            AgentStatus(NODE, T0 + S_, (dcgm("ok", "", T0),)),
        ],
    )
    # pods not seen yet; seen; reached by the agent
    assert [s.state for s in statuses(first)] == ["unknown", "ready", "ready"]
    assert statuses(first)[-1].planes != statuses(first)[-2].planes
    same = feed(
        proc,
        [
            node_record(T0 + 2 * S_),  # the same labels, later
            operands(T0 + 3 * S_, HEALTHY),  # the same pods, later
            AgentStatus(NODE, T0 + 4 * S_, (dcgm("ok", "", T0),)),  # the same word, later
            replace(READY_POLICY, ts_ms=T0 + 4 * S_),  # the same policy, read again
        ],
    )
    assert statuses(same) == []
    # the first policy record delivered twice: what it emitted then, and the latest after it
    twice = proc.handle(READY_POLICY, 0)
    assert [s.ts_ms for s in statuses(twice)] == [READY_POLICY.ts_ms, T0 + S_]
    assert statuses(twice)[-1] == proc.tables.node_stack[NODE].last
    crash = feed(proc, [operands(T0 + 5 * S_, with_pods(crashloop(EXPORTER, 3)))])
    [broken] = statuses(crash)
    assert (broken.ts_ms, broken.first_broken) == (T0 + 5 * S_, "dcgm-exporter")
    healed = feed(proc, [operands(T0 + 6 * S_, HEALTHY)])
    assert [s.state for s in statuses(healed)] == ["ready"]


def test_a_node_without_the_gpu_operator_emits_no_status() -> None:
    proc = new()
    out = feed(proc, [*setup(), AgentStatus(NODE, T0 + S_, (dcgm("failing", "timeout"),))])
    assert statuses(out) == []
    assert NODE not in proc.tables.node_stack
    # its telemetry keeps the rule's own reason
    out = feed(proc, [AgentStatus(NODE, T0 + t * 15 * S_, (dcgm("failing", "x"),)) for t in (4, 5)])
    assert all("10.1.2.3" in (e.telemetry.reason or "") for e in events(out, "heartbeat"))


def test_the_clusterpolicy_judges_every_node_of_its_partition_and_only_those() -> None:
    proc = new()
    feed(proc, setup(), partition=1)
    feed(proc, setup(node=OTHER), partition=2)
    out = proc.handle(SEED_POLICY, 1)
    assert [s.node for s in statuses(out)] == [NODE]
    assert proc.tables.cluster_policies["1"].in_charge() == SEED_POLICY
    assert "2" not in proc.tables.cluster_policies
    gone = proc.handle(replace(SEED_POLICY, ts_ms=T0 + S_, deleted=True), 1)
    assert "1" not in proc.tables.cluster_policies  # a deleted policy leaves the partition
    [seen_no_more] = statuses(gone)
    assert seen_no_more.summary.startswith("no GPU Operator seen")


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        ((), None),
        ((SEED_POLICY,), "cluster-policy"),
        ((replace(SEED_POLICY, name="b", state="ignored"), SEED_POLICY), "cluster-policy"),
        ((replace(SEED_POLICY, name="a", state="ignored"), SEED_POLICY), "cluster-policy"),
        ((replace(SEED_POLICY, name="a", state="ignored"),), "a"),
        ((SEED_POLICY, replace(SEED_POLICY, deleted=True)), None),
    ],
)
def test_the_policy_in_charge(records: tuple[ClusterPolicyRecord, ...], expected: str) -> None:
    policies = PartitionPolicies()
    for r in records:
        policies = policies.apply(r)
    charge = policies.in_charge()
    assert (charge.name if charge else None) == expected
    assert TABLE_CODEC.decode(TABLE_CODEC.encode(policies)) == policies


def test_step_remembers_what_each_record_emitted() -> None:
    a = NodeStatus(NODE, 1, "unknown", "a", (), NO_MIG)
    b = replace(a, ts_ms=2, state="ready", summary="b")
    s1, e1 = step(None, a, 1, "r1")
    assert e1 == (a,)
    assert s1 == NodeStack((Emission(1, "r1", a),))
    assert step(s1, replace(a, ts_ms=9), 9, "r9") == (None, ())  # unchanged but for time
    assert step(s1, a, 1, "r1") == (None, (a,))  # processed again: emitted again
    s2, e2 = step(s1, b, 2, "r2")
    assert e2 == (b,)
    assert s2 is not None
    assert s2.last == b
    assert step(s2, b, 1, "r1") == (None, (a, b))  # r1 again: what it emitted, then the latest
    assert step(None, a, 1, "r1", seen=False) == (None, ())
    assert step(s2, a, 3, "r3", seen=False)[1] == (a,)  # out of sight: a change like any
    many = s2
    for i in range(10):
        many, _ = step(many, replace(a, summary=str(i)), 10 + i, f"x{i}")
    assert many is not None
    assert len(many.emitted) == REMEMBERED
    assert TABLE_CODEC.decode(TABLE_CODEC.encode(s2)) == s2


def test_a_replay_from_further_back_than_the_memory_leaves_it_as_a_calm_run_left_it() -> None:
    """A record processed again after a long stretch uncommitted, older than every emission
    remembered, meets a state ahead of it: a status it emits then (the exporter accepted again
    for a moment, say) is sent, but neither pushes a newer emission out nor becomes the node's
    last word, so the records replayed after it end where the calm run ended."""
    a = NodeStatus(NODE, 1, "unknown", "a", (), NO_MIG)
    words = [replace(a, ts_ms=10 * i, summary=f"s{i}") for i in range(1, 7)]
    calm: NodeStack | None = None
    for i, w in enumerate(words, start=1):
        calm = step(calm, w, 10 * i, f"r{i}")[0] or calm
    assert calm is not None
    assert [e.ts_ms for e in calm.emitted] == [60, 50, 40, 30]
    state, outputs = calm, []
    for i in range(1, 7):  # again from the first record; the first sees the state ahead of it
        now = replace(a, ts_ms=10 * i, summary="for a moment") if i == 1 else words[-1]
        new, out = step(state, now, 10 * i, f"r{i}")
        state, outputs = new or state, [*outputs, *out]
    assert state == calm
    assert replace(a, ts_ms=10, summary="for a moment") in outputs  # said ...
    assert outputs[-1] == words[-1]  # ... and the last word is the latest


def test_a_node_leaving_retires_its_status_and_every_stack_key() -> None:
    proc = new()
    feed(proc, [*setup(), node_record(T0 + S_), operands(T0 + S_, HEALTHY)], partition=3)
    assert NODE in proc.tables.node_stack
    assert NODE in proc.tables.operand_pods
    out = proc.handle(NodeRecord(NODE, T0 + 20 * S_, (), deleted=True), 3)
    assert out[-1] == NodeStatusRetired(NODE)
    assert NODE not in proc.tables.node_stack
    assert NODE not in proc.tables.operand_pods
    again = proc.handle(NodeRecord(NODE, T0 + 20 * S_, (), deleted=True), 3)
    assert again[-1] == NodeStatusRetired(NODE)  # processed again: retired again


def test_a_refused_exporter_changes_the_status() -> None:
    proc = new()
    ok = AgentStatus(NODE, T0 + S_, (dcgm("ok", "", T0),))
    feed(proc, [*setup(), READY_POLICY, node_record(T0 + S_), operands(T0 + S_, HEALTHY), ok])
    out = feed(proc, [scrape(T0 + 10 * S_, G0, hostname="gpu-z")])
    [refused] = statuses(out)
    assert (refused.state, refused.first_broken) == ("broken", "dcgm-exporter")
    assert "not from this node" in refused.summary
    out = feed(proc, [scrape(T0 + 20 * S_, G0, G1, G2)])
    assert [s.state for s in statuses(out)] == ["ready"]


def test_node_status_outputs_survive_a_crash_at_any_point() -> None:
    """Every status emitted (and the tombstone of a node that leaves) is emitted again when its
    input is processed again after a crash, whatever prefix of its state writes reached the
    changelog (as tests/unit/test_spine's spine outputs)."""
    records: list[object] = [*setup(), SEED_POLICY, node_record(T0 + S_)]
    pods = [
        HEALTHY,
        with_pods(crashloop(EXPORTER, 1)),
        with_pods(crashloop(EXPORTER, 2)),
        HEALTHY,
        with_pods(in_init(DP), in_init(EXPORTER), in_init(GFD), validator("toolkit-validation")),
        HEALTHY,
    ]
    records += [operands(T0 + (2 + i) * S_, p) for i, p in enumerate(pods)]
    records += [
        replace(READY_POLICY, ts_ms=T0 + 10 * S_),
        node_record(T0 + 11 * S_, (OFF, "false")),
        AgentStatus(NODE, T0 + 12 * S_, (dcgm("disabled", "no-exporter-pod"),)),
        node_record(T0 + 13 * S_),
    ]
    records += [ClockTick(0, T0 + t * 15 * S_) for t in range(2, 50)]  # silent: it leaves
    reference, states = [], []
    proc = new()
    tables = proc.tables
    for r in records:
        reference.append(proc.handle(r))
        states.append({f: dict(getattr(tables, f)) for f in tables.sizes()})

    def keys(outs: Iterable[Output]) -> set[str]:
        return {
            codec.encode(o).decode() if isinstance(o, NodeStatus) else repr(o)
            for o in outs
            if isinstance(o, NodeStatus | NodeStatusRetired)
        }

    expected = set().union(*(keys(o) for o in reference))
    assert len(expected) >= 8
    assert repr(NodeStatusRetired(NODE)) in expected
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
                assert delivered == expected, (k, s, o, expected - delivered, delivered - expected)
                checked += 1
    assert checked > 200


def test_tables_round_trip_the_stack_state() -> None:
    proc, _ = run(CASES["seed: toolkit not ready, four operands wait"])
    for table in ("operand_pods", "node_stack", "cluster_policies"):
        for value in getattr(proc.tables, table).values():
            assert TABLE_CODEC.decode(TABLE_CODEC.encode(value)) == value
