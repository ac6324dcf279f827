"""The ``stack-broken`` alert: an intended plane of a node's GPU stack broken while pods hold its
GPUs. The pure decision as a table (with and without a grace window), then through the processor
(holders with UIDs, the GPUs left without telemetry, resolution, a node gone, a record processed
twice, a grace window run out on the partition's clock), the Slack message, the node rows and
series, and every crash point between a state write and an output write, with and without a
grace window."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from contract import codec
from contract.inputs import (
    ClockTick,
    NodeRecord,
    OperandPods,
    PodResourcesDiff,
    PodResourcesSnapshot,
)
from contract.outputs import Alert, Holder, NodeStatus, PlaneIntent
from contract.records import replace
from contract.topics import TABLES
from infra.settings import AlertSettings
from sinks.payloads import slack_message
from streams.core.alerts.alerts import alert_id
from streams.core.flow.processor import Output, Processor, Tables
from streams.core.flow.state import TABLE_CODEC
from streams.core.stack.operatorstack import node_status
from streams.core.stack.stackalerts import (
    KIND,
    HeldDevice,
    StackEpisode,
    broken_plane,
    gone,
    step,
)
from streams.present.noderows import node_line, node_row, ordered
from streams.present.promseries import node_families
from tests.crashpoints import every_crash_point
from tests.unit.test_node_stack import OFF, agent, node_record, operands
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
from tests.unit.test_operatorstack import agent as stack_agent
from tests.unit.test_spine import (
    ALLOCATABLE,
    G0,
    G1,
    LIFE,
    MIN,
    NODE,
    S_,
    T0,
    TENANTS,
    TRAINER,
    UNBOUNDED,
    feed,
    setup,
    uid,
)

# --- the decision, as a table


def status_of(
    pods: tuple[object, ...], labels: dict[str, str] | None = None, **kw: object
) -> NodeStatus:
    policy = kw.pop("policy", READY_POLICY)
    dcgm = str(kw.pop("dcgm", "failing"))
    return node_status(
        NODE,
        5,
        labels if labels is not None else LABELS,
        policy,  # type: ignore[arg-type]
        OperandPods(NODE, 1, NS, pods),  # type: ignore[arg-type]
        stack_agent(dcgm),
    )


EXPORTER_CRASHING = status_of(with_pods(crashloop(EXPORTER, 12)))
READY = status_of(HEALTHY, dcgm="ok")
SEED = status_of(
    with_pods(in_init(DP), in_init(EXPORTER), in_init(GFD), validator("toolkit-validation", 7)),
    policy=SEED_POLICY,
)
DISABLED_EXPORTER = status_of(with_pods(drop=(EXPORTER,)), LABELS | {OFF: "false"}, dcgm="disabled")
#: never made by the verdict; refused all the same: a plane disabled on purpose is not broken
DISABLED_NAMED_BROKEN = replace(
    EXPORTER_CRASHING,
    planes=tuple(
        replace(p, intent=PlaneIntent("disabled", "node-label", f"{OFF}=false"))
        if p.name == "dcgm-exporter"
        else p
        for p in EXPORTER_CRASHING.planes
    ),
)


def holder(pod: str, ns: str = "ml") -> Holder:
    return Holder(ns, pod, "main", "nvidia.com/gpu", (G0,), 1, uid=uid(pod), uid_status="resolved")


BLIND = (
    HeldDevice(G0, (holder("mps-0", "inf"), holder("mps-1", "inf")), measured=False),
    HeldDevice(G1, (holder("trainer-0"),), measured=False),
)
MEASURED = (HeldDevice(G1, (holder("trainer-0"),), measured=True),)
NEW_HOLDERS = (HeldDevice(G1, (holder("trainer-1"),), measured=False),)


def opened(status: NodeStatus, held: Sequence[HeldDevice] = BLIND) -> StackEpisode:
    episode, _ = step(None, status, held, NODE, T0, grace_ms=0)
    assert episode is not None
    return episode


@dataclass(frozen=True)
class Case:
    episode: StackEpisode | None
    status: NodeStatus | None
    held: Sequence[HeldDevice]
    sent: tuple[tuple[str, str], ...]  # (status, plane) of each alert, in order
    open_after: str | None  # the plane of the episode open after


CASES = {
    "exporter crash looping, GPUs held: fires": Case(
        None, EXPORTER_CRASHING, BLIND, (("firing", "dcgm-exporter"),), "dcgm-exporter"
    ),
    "the seed: toolkit broken, GPUs held: fires for the toolkit, not four operands": Case(
        None, SEED, BLIND, (("firing", "container-toolkit"),), "container-toolkit"
    ),
    "broken, readings still arriving: fires, naming the held GPUs": Case(
        None, EXPORTER_CRASHING, MEASURED, (("firing", "dcgm-exporter"),), "dcgm-exporter"
    ),
    "broken, nothing held: quiet": Case(None, EXPORTER_CRASHING, (), (), None),
    "ready: quiet": Case(None, READY, BLIND, (), None),
    "exporter disabled by intent, GPUs held: quiet": Case(None, DISABLED_EXPORTER, BLIND, (), None),
    "a plane disabled by intent named first broken: quiet": Case(
        None, DISABLED_NAMED_BROKEN, BLIND, (), None
    ),
    "no status: quiet": Case(None, None, BLIND, (), None),
    "open, still broken, holders changed: stays open, nothing sent": Case(
        opened(EXPORTER_CRASHING), EXPORTER_CRASHING, NEW_HOLDERS, (), "dcgm-exporter"
    ),
    "open, healed: resolved": Case(
        opened(EXPORTER_CRASHING), READY, BLIND, (("resolved", "dcgm-exporter"),), None
    ),
    "open, exporter then disabled by intent: resolved": Case(
        opened(EXPORTER_CRASHING),
        DISABLED_EXPORTER,
        BLIND,
        (("resolved", "dcgm-exporter"),),
        None,
    ),
    "open, nothing held any more: resolved": Case(
        opened(EXPORTER_CRASHING), EXPORTER_CRASHING, (), (("resolved", "dcgm-exporter"),), None
    ),
    "open, a lower plane breaks: resolved, and the new first broken plane fires": Case(
        opened(EXPORTER_CRASHING),
        SEED,
        BLIND,
        (("resolved", "dcgm-exporter"), ("firing", "container-toolkit")),
        "container-toolkit",
    ),
    "open, no status any more: resolved": Case(
        opened(EXPORTER_CRASHING), None, BLIND, (("resolved", "dcgm-exporter"),), None
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_stack_broken_decision(case: Case) -> None:
    episode, alerts = step(case.episode, case.status, case.held, NODE, T0 + 60 * S_, grace_ms=0)
    assert [(a.status, a.stack.plane if a.stack else "") for a in alerts] == list(case.sent)
    assert (episode.plane if episode is not None else None) == case.open_after
    for a in alerts:
        assert a.kind == KIND
        assert a.node == NODE
        assert a.device_uuid == ""
        if a.status == "resolved":  # the episode's id, holders and devices, resolved
            assert case.episode is not None
            assert a.id == case.episode.fired.id
            assert a.holders == case.episode.fired.holders
        assert codec.decode(codec.encode(a)) == a  # an alert record, through the codec


HOLDDOWN = 120 * S_


@dataclass(frozen=True)
class HoldCase:
    fired: bool  # the episode fired (else it is pending)
    unheld_since: int | None  # since when nobody has held a GPU, as the episode remembers
    held: Sequence[HeldDevice]
    at: int
    sent: tuple[str, ...]  # the status of each alert sent
    unheld_after: int | str | None  # "closed": no episode after


HOLD_CASES = {
    "fired, its GPUs released: open within the hold-down, nothing sent": HoldCase(
        True, None, (), T0 + S_, (), T0 + S_
    ),
    "fired, unheld, still within the hold-down: open, its start kept": HoldCase(
        True, T0, (), T0 + HOLDDOWN - 1, (), T0
    ),
    "fired, unheld, held again within the hold-down: the same episode, nothing sent": HoldCase(
        True, T0, BLIND, T0 + HOLDDOWN - 1, (), None
    ),
    "fired, unheld for the whole hold-down: resolved": HoldCase(
        True, T0, (), T0 + HOLDDOWN, ("resolved",), "closed"
    ),
    "pending, its GPUs released: ends at once, nothing sent (nothing to hold down)": HoldCase(
        False, None, (), T0 + S_, (), "closed"
    ),
}


@pytest.mark.parametrize("case", HOLD_CASES.values(), ids=HOLD_CASES.keys())
def test_stack_broken_hold_down_without_holders(case: HoldCase) -> None:
    before = opened(EXPORTER_CRASHING) if case.fired else StackEpisode(T0, "dcgm-exporter")
    if case.unheld_since is not None:
        before = replace(before, unheld_ms=case.unheld_since)
    episode, alerts = step(
        before,
        EXPORTER_CRASHING,
        case.held,
        NODE,
        case.at,
        grace_ms=GRACE,
        holddown_ms=HOLDDOWN,
    )
    assert [a.status for a in alerts] == list(case.sent)
    if case.unheld_after == "closed":
        assert episode is None
    else:
        assert episode is not None
        assert (episode.since_ms, episode.plane, episode.fired) == (
            before.since_ms,
            before.plane,
            before.fired,
        )
        assert episode.unheld_ms == case.unheld_after
    for a in alerts:
        assert before.fired is not None
        assert a.id == before.fired.id
        assert "no pod holds a GPU on the node any more (none since" in a.summary


def test_the_firing_alert_names_the_plane_its_reason_what_waits_and_the_blind_gpus_holders() -> (
    None
):
    [seed] = step(None, SEED, BLIND, NODE, T0, grace_ms=0)[1]
    assert seed.stack is not None
    assert seed.stack.plane == "container-toolkit"
    assert seed.stack.reason.startswith("container toolkit not ready")
    assert {"device-plugin", "dcgm-exporter", "gpu-feature-discovery"} <= set(seed.stack.blocked)
    assert (seed.stack.held, seed.stack.unmeasured) == ((G0, G1), (G0, G1))
    assert [(h.pod, h.uid) for h in seed.holders] == [
        ("mps-0", uid("mps-0")),
        ("mps-1", uid("mps-1")),
        ("trainer-0", uid("trainer-0")),
    ]
    assert seed.summary.startswith("GPU stack broken: container toolkit not ready on gpu-a")
    assert "2 held GPUs without telemetry, held by inf/mps-0 (uid uid-mps-), " in seed.summary
    # the id is the episode's: (kind, node, plane, start)
    again = step(None, SEED, NEW_HOLDERS, NODE, T0, grace_ms=0)[1][0]
    assert again.id == seed.id
    assert step(None, SEED, BLIND, NODE, T0 + 1, grace_ms=0)[1][0].id != seed.id


def test_a_plane_disabled_on_purpose_is_never_the_broken_plane() -> None:
    assert broken_plane(DISABLED_EXPORTER) is None
    assert broken_plane(DISABLED_NAMED_BROKEN) is None
    plane = broken_plane(EXPORTER_CRASHING)
    assert plane is not None
    assert plane.name == "dcgm-exporter"


# --- the grace window: a break fires only once it has lasted, in event time

GRACE = 60 * S_
EXPORTER_ID = alert_id(KIND, NODE, "dcgm-exporter", T0)


def pending(status: NodeStatus = EXPORTER_CRASHING, since: int = T0) -> StackEpisode:
    episode, alerts = step(None, status, BLIND, NODE, since, grace_ms=GRACE)
    assert episode is not None
    assert (episode.since_ms, episode.fired, alerts) == (since, None, [])
    return episode


@dataclass(frozen=True)
class GraceCase:
    episode: StackEpisode | None
    status: NodeStatus | None
    held: Sequence[HeldDevice]
    at: int  # the step's event time
    sent: tuple[tuple[str, str, int], ...]  # (status, plane, started_ms) of each alert
    after: tuple[str, int, bool] | None  # the episode after: (plane, since, fired)


GRACE_CASES = {
    "broken, GPUs held: pending, nothing sent": GraceCase(
        None, EXPORTER_CRASHING, BLIND, T0, (), ("dcgm-exporter", T0, False)
    ),
    "broken, nothing held: no episode": GraceCase(None, EXPORTER_CRASHING, (), T0, (), None),
    "pending, healed within the grace: over, nothing ever sent": GraceCase(
        pending(), READY, BLIND, T0 + 30 * S_, (), None
    ),
    "pending, nothing held any more within the grace: over, nothing sent": GraceCase(
        pending(), EXPORTER_CRASHING, (), T0 + 30 * S_, (), None
    ),
    "pending, no status any more: over, nothing sent": GraceCase(
        pending(), None, BLIND, T0 + 30 * S_, (), None
    ),
    "pending, disabled by intent within the grace: over, nothing sent": GraceCase(
        pending(), DISABLED_EXPORTER, BLIND, T0 + 30 * S_, (), None
    ),
    "pending, still broken a millisecond short of the grace: pending": GraceCase(
        pending(), EXPORTER_CRASHING, BLIND, T0 + GRACE - 1, (), ("dcgm-exporter", T0, False)
    ),
    "pending, still broken at the grace: fires, started when the break began": GraceCase(
        pending(),
        EXPORTER_CRASHING,
        NEW_HOLDERS,
        T0 + GRACE,
        (("firing", "dcgm-exporter", T0),),
        ("dcgm-exporter", T0, True),
    ),
    "pending, a lower plane breaks within the grace: its own window starts": GraceCase(
        pending(), SEED, BLIND, T0 + 30 * S_, (), ("container-toolkit", T0 + 30 * S_, False)
    ),
    "pending for the toolkit, short of its own grace: pending": GraceCase(
        pending(SEED, T0 + 30 * S_),
        SEED,
        BLIND,
        T0 + 30 * S_ + GRACE - 1,
        (),
        ("container-toolkit", T0 + 30 * S_, False),
    ),
    "pending for the toolkit, at its own grace: fires from its own start": GraceCase(
        pending(SEED, T0 + 30 * S_),
        SEED,
        BLIND,
        T0 + 30 * S_ + GRACE,
        (("firing", "container-toolkit", T0 + 30 * S_),),
        ("container-toolkit", T0 + 30 * S_, True),
    ),
    "pending, the clock behind its start: pending": GraceCase(
        pending(), EXPORTER_CRASHING, BLIND, T0 - S_, (), ("dcgm-exporter", T0, False)
    ),
    "fired, healed: resolved as without a grace": GraceCase(
        step(pending(), EXPORTER_CRASHING, BLIND, NODE, T0 + GRACE, grace_ms=GRACE)[0],
        READY,
        BLIND,
        T0 + 2 * GRACE,
        (("resolved", "dcgm-exporter", T0),),
        None,
    ),
    "fired, a lower plane breaks: resolved, the new plane pending": GraceCase(
        step(pending(), EXPORTER_CRASHING, BLIND, NODE, T0 + GRACE, grace_ms=GRACE)[0],
        SEED,
        BLIND,
        T0 + 2 * GRACE,
        (("resolved", "dcgm-exporter", T0),),
        ("container-toolkit", T0 + 2 * GRACE, False),
    ),
}


@pytest.mark.parametrize("case", GRACE_CASES.values(), ids=GRACE_CASES.keys())
def test_stack_broken_grace_window(case: GraceCase) -> None:
    episode, alerts = step(case.episode, case.status, case.held, NODE, case.at, grace_ms=GRACE)
    sent = [(a.status, a.stack.plane if a.stack else "", a.started_ms) for a in alerts]
    assert sent == list(case.sent)
    after = (episode.plane, episode.since_ms, episode.fired is not None) if episode else None
    assert after == case.after
    for a in alerts:
        assert a.id == alert_id(KIND, NODE, a.stack.plane if a.stack else "", a.started_ms)
        assert a.ts_ms == case.at
    # the same step again (a record processed again) decides the same
    assert step(case.episode, case.status, case.held, NODE, case.at, grace_ms=GRACE) == (
        episode,
        alerts,
    )


def test_a_graced_alert_is_the_one_that_would_have_fired_at_once_but_for_its_time() -> None:
    [at_once] = step(None, EXPORTER_CRASHING, BLIND, NODE, T0, grace_ms=0)[1]
    [late] = step(pending(), EXPORTER_CRASHING, BLIND, NODE, T0 + GRACE, grace_ms=GRACE)[1]
    assert late.id == at_once.id == EXPORTER_ID
    assert late.started_ms == at_once.started_ms == T0
    assert replace(late, ts_ms=T0) == at_once
    fired = replace(pending(), fired=late)
    [resolved] = step(fired, READY, BLIND, NODE, T0 + 2 * GRACE, grace_ms=GRACE)[1]
    assert (resolved.id, resolved.status, resolved.started_ms) == (late.id, "resolved", T0)


def test_a_pending_episode_ends_silently_when_the_node_goes() -> None:
    assert gone(pending(), T0 + S_, "deleted") == []
    fired = step(pending(), EXPORTER_CRASHING, BLIND, NODE, T0 + GRACE, grace_ms=GRACE)[0]
    [resolved] = gone(fired, T0 + 2 * GRACE, "deleted")
    assert (resolved.id, resolved.status) == (EXPORTER_ID, "resolved")


# --- through the processor


def new(grace_s: float = 0.0, holddown_s: float = 0.0) -> Processor:
    """A processor; grace 0 (the alert fires at once) and no hold-down (it ends as soon as no GPU
    is held) unless a test is about them."""
    policy = AlertSettings.model_construct(
        idle_window_s=120.0, cooldown_s=0.0, stack_grace_s=grace_s, stack_holddown_s=holddown_s
    )
    return Processor(Tables.in_memory(), policy, UNBOUNDED)


def crashing(ts: int, restarts: int = 12) -> OperandPods:
    return operands(ts, with_pods(crashloop(EXPORTER, restarts)))


def start(
    pods: OperandPods, *labels: tuple[str, str], grace_s: float = 0.0, holddown_s: float = 0.0
) -> tuple[Processor, list[Output]]:
    proc = new(grace_s, holddown_s)
    out = feed(proc, setup())
    out += proc.handle(READY_POLICY, 0)
    out += feed(proc, [node_record(T0 + S_, *labels), pods, agent(T0 + 2 * S_, "failing", "x")])
    return proc, out


def stack_alerts(out: Sequence[Output]) -> list[Alert]:
    return [o for o in out if isinstance(o, Alert) and o.kind == KIND]


def test_crash_looping_exporter_fires_naming_every_holder_then_resolves_when_ready() -> None:
    proc, out = start(crashing(T0 + S_))
    [fired] = stack_alerts(out)
    assert fired.status == "firing"
    assert fired.node == NODE
    assert fired.stack is not None
    assert (fired.stack.plane, fired.stack.reason) == (
        "dcgm-exporter",
        "dcgm-exporter not ready: CrashLoopBackOff, 12 restarts",
    )
    assert fired.stack.unmeasured == (G0, G1)  # the held GPUs; G2 is free
    pods = {(h.namespace, h.pod): h.uid for h in fired.holders}
    assert pods == {(a.namespace, a.pod): uid(a.pod) for a in (*TENANTS, TRAINER)}
    assert proc.tables.node_stack[NODE].broken is not None
    # more restarts: a new status, the same episode, nothing sent
    more = feed(proc, [crashing(T0 + 3 * S_, 13)])
    assert [s.summary for s in more if isinstance(s, NodeStatus)] == [
        "dcgm-exporter not ready on gpu-a (CrashLoopBackOff, 13 restarts)"
    ]
    assert stack_alerts(more) == []
    healed = feed(proc, [operands(T0 + 4 * S_, HEALTHY), agent(T0 + 5 * S_, "ok")])
    [resolved] = stack_alerts(healed)
    assert (resolved.id, resolved.status, resolved.holders) == (
        fired.id,
        "resolved",
        fired.holders,
    )
    assert resolved.summary.startswith("resolved: dcgm-exporter on gpu-a: no longer broken")
    assert proc.tables.node_stack[NODE].broken is None
    # a table value, through the table codec, with its episode
    stack = proc.tables.node_stack[NODE]
    assert TABLE_CODEC.decode(TABLE_CODEC.encode(stack)) == stack


def test_exporter_disabled_by_intent_never_fires() -> None:
    _, out = start(operands(T0 + S_, with_pods(drop=(EXPORTER,))), (OFF, "false"))
    statuses = [o for o in out if isinstance(o, NodeStatus)]
    assert statuses[-1].telemetry_disabled
    assert stack_alerts(out) == []


def test_broken_with_nothing_held_is_quiet_until_a_pod_holds_a_gpu() -> None:
    proc = new()
    base = [r for r in setup() if not isinstance(r, PodResourcesSnapshot)]
    feed(proc, base)
    proc.handle(READY_POLICY, 0)
    quiet = feed(
        proc,
        [
            PodResourcesSnapshot(NODE, T0, (), ALLOCATABLE),
            node_record(T0 + S_),
            crashing(T0 + S_),
            agent(T0 + 2 * S_, "failing", "x"),
        ],
    )
    assert stack_alerts(quiet) == []
    held = feed(proc, [PodResourcesDiff(NODE, T0 + 3 * S_, (TRAINER,), ())])
    [fired] = stack_alerts(held)
    assert [h.pod for h in fired.holders] == ["trainer-0"]
    assert fired.stack is not None
    assert fired.stack.held == (G1,)
    left = feed(proc, [PodResourcesDiff(NODE, T0 + 4 * S_, (), (TRAINER,))])
    [resolved] = stack_alerts(left)
    assert resolved.id == fired.id
    assert resolved.status == "resolved"
    assert "no pod holds a GPU on the node any more" in resolved.summary


def test_one_break_across_back_to_back_batch_jobs_pages_once_and_resolves_on_the_clock() -> None:
    proc, out = start(crashing(T0 + S_), holddown_s=HOLDDOWN / S_)
    [fired] = stack_alerts(out)
    every = [*TENANTS, TRAINER]
    out = feed(proc, [PodResourcesDiff(NODE, T0 + 3 * S_, (), tuple(every))])
    at = T0 + 3 * S_
    for _ in range(5):  # five 3-minute Jobs, 10 s apart, the exporter crash looping all along
        start_ms, end_ms = at + 10 * S_, at + 190 * S_
        job = [PodResourcesDiff(NODE, start_ms, (TRAINER,), ())]
        job += [agent(start_ms + m * MIN, "failing", "x") for m in (1, 2)]  # the node is heard
        job += [PodResourcesDiff(NODE, end_ms, (), (TRAINER,))]
        out += feed(proc, job)
        at = end_ms
    assert stack_alerts(out) == []  # one episode: it fired once, before the first Job
    assert proc.tables.node_stack[NODE].broken is not None
    assert stack_alerts(proc.handle(ClockTick(0, at + HOLDDOWN - 1), 0)) == []
    [resolved] = stack_alerts(proc.handle(ClockTick(0, at + HOLDDOWN), 0))
    assert (resolved.id, resolved.status) == (fired.id, "resolved")
    assert proc.tables.node_stack[NODE].broken is None


def test_before_a_cluster_policy_or_with_only_an_ignored_one_the_operators_labels_page_nobody() -> (
    None
):
    """Every deploy label ``true`` (the operator sets them on every GPU node), no DCGM pod (the
    policy turns standalone DCGM off), GPUs held: until a ClusterPolicy in charge says what it
    intends, nothing is broken; then its ``dcgm.enabled: false`` decides."""
    proc = new()
    out = feed(proc, setup())
    out += feed(proc, [node_record(T0 + S_), operands(T0 + S_, HEALTHY), agent(T0 + 2 * S_, "ok")])
    stack = proc.tables.node_stack[NODE].last
    assert stack is not None
    assert (stack.state, stack.first_broken) == ("unknown", None)
    ignored = replace(
        READY_POLICY, name="other-policy", ts_ms=T0 + 3 * S_, state="ignored", conditions=()
    )
    out += proc.handle(ignored, 0)
    out += feed(proc, [node_record(T0 + 3 * S_, (OFF, "false"))])  # the exporter off by label
    stack = proc.tables.node_stack[NODE].last
    assert stack is not None
    assert (stack.state, stack.first_broken) == ("unknown", None)
    out += proc.handle(replace(READY_POLICY, ts_ms=T0 + 4 * S_), 0)
    stack = proc.tables.node_stack[NODE].last
    assert stack is not None
    assert stack.state == "ready", stack.summary
    assert stack_alerts(out) == []


def test_a_node_gone_resolves_its_alert_and_a_record_processed_twice_sends_the_same() -> None:
    proc, out = start(crashing(T0 + S_))
    [fired] = stack_alerts(out)
    twice = proc.handle(crashing(T0 + S_), 0)  # the record that fired it, processed again
    assert stack_alerts(twice) == [fired]
    deleted = NodeRecord(NODE, T0 + 10 * S_, (), deleted=True)
    [gone] = stack_alerts(proc.handle(deleted, 0))
    assert (gone.id, gone.status) == (fired.id, "resolved")
    assert "the node is gone (the node was deleted from the API)" in gone.summary
    assert NODE not in proc.tables.node_stack
    assert stack_alerts(proc.handle(deleted, 0)) == [gone]  # the deletion processed again


def test_with_a_grace_a_crash_loop_fires_on_the_clock_tick_that_ends_it_from_its_start() -> None:
    _, at_once = start(crashing(T0 + S_))
    [expected] = stack_alerts(at_once)
    proc, out = start(crashing(T0 + S_), grace_s=60.0)
    assert stack_alerts(out) == []
    episode = proc.tables.node_stack[NODE].broken
    assert episode is not None
    assert (episode.since_ms, episode.fired) == (expected.started_ms, None)
    assert node_row(proc.tables.node_stack[NODE]).alert is None  # type: ignore[union-attr]
    # still crash looping: a new status, nothing sent; the record again sends nothing either
    more = crashing(T0 + 3 * S_, 13)
    assert stack_alerts(feed(proc, [more, more])) == []
    short = ClockTick(0, expected.started_ms + GRACE - 1)
    assert stack_alerts(proc.handle(short, 0)) == []
    tick = ClockTick(0, expected.started_ms + GRACE)
    [fired] = stack_alerts(proc.handle(tick, 0))
    assert (fired.id, fired.status, fired.started_ms, fired.ts_ms) == (
        expected.id,
        "firing",
        expected.started_ms,
        tick.ts_ms,
    )
    assert fired.holders == expected.holders
    assert stack_alerts(proc.handle(tick, 0)) == [fired]  # the tick processed again
    assert stack_alerts(proc.handle(ClockTick(0, tick.ts_ms + S_), 0)) == []  # fired once
    assert node_row(proc.tables.node_stack[NODE]).alert == fired.id  # type: ignore[union-attr]
    healed = feed(proc, [operands(tick.ts_ms + 2 * S_, HEALTHY), agent(tick.ts_ms + 3 * S_, "ok")])
    [resolved] = stack_alerts(healed)
    assert (resolved.id, resolved.status) == (fired.id, "resolved")
    stack = proc.tables.node_stack[NODE]
    assert TABLE_CODEC.decode(TABLE_CODEC.encode(stack)) == stack


def test_with_a_grace_a_restart_that_heals_within_it_sends_nothing() -> None:
    proc, out = start(crashing(T0 + S_), grace_s=60.0)
    pending_stack = proc.tables.node_stack[NODE]
    assert pending_stack.broken is not None
    assert pending_stack.broken.fired is None
    # a pending episode is a table value like any: through the table codec
    assert TABLE_CODEC.decode(TABLE_CODEC.encode(pending_stack)) == pending_stack
    healed = feed(proc, [operands(T0 + 20 * S_, HEALTHY), agent(T0 + 21 * S_, "ok")])
    assert proc.tables.node_stack[NODE].broken is None
    later = proc.handle(ClockTick(0, T0 + 5 * GRACE), 0)
    assert stack_alerts([*out, *healed, *later]) == []


def test_with_a_grace_gpus_released_within_it_send_nothing() -> None:
    proc, _ = start(crashing(T0 + S_), grace_s=60.0)
    left = feed(proc, [PodResourcesDiff(NODE, T0 + 10 * S_, (), (*TENANTS, TRAINER))])
    assert proc.tables.node_stack[NODE].broken is None
    assert stack_alerts([*left, *proc.handle(ClockTick(0, T0 + 5 * GRACE), 0)]) == []


def test_with_a_grace_a_node_deleted_while_pending_sends_nothing() -> None:
    proc, _ = start(crashing(T0 + S_), grace_s=60.0)
    deleted = NodeRecord(NODE, T0 + 10 * S_, (), deleted=True)
    assert stack_alerts(proc.handle(deleted, 0)) == []
    assert stack_alerts(proc.handle(ClockTick(0, T0 + 5 * GRACE), 0)) == []


# --- where people look


def test_slack_names_the_broken_plane_what_waits_and_the_blind_gpus() -> None:
    [seed] = step(None, SEED, BLIND, NODE, T0, grace_ms=0)[1]
    message = slack_message(seed)
    text = str(message)
    assert message["blocks"][0]["text"]["text"] == ":construction: stack-broken: gpu-a"
    assert "*Broken plane*" in text
    assert "container-toolkit" in text
    assert "waiting on it: " in text
    assert "dcgm-exporter" in text
    assert f"without telemetry: `{G0}`, `{G1}`" in text
    assert "`inf/mps-0`" in text
    assert "uid `uid-mps-`" in text


def test_node_rows_put_the_broken_boundary_first_and_series_keep_their_label_sets() -> None:
    proc, _ = start(crashing(T0 + S_))
    broken = node_row(proc.tables.node_stack[NODE])
    assert broken is not None
    assert node_line(broken).startswith(
        "gpu-a  BROKEN  dcgm-exporter not ready on gpu-a (CrashLoopBackOff, 12 restarts)"
    )
    assert broken.alert == proc.tables.node_stack[NODE].broken.fired.id  # type: ignore[union-attr]
    off, _ = start(operands(T0 + S_, with_pods(drop=(EXPORTER,))), (OFF, "false"))
    ready = node_row(off.tables.node_stack[NODE])
    assert ready is not None
    other = replace(ready, node="gpu-0")
    assert [r.node for r in ordered([other, broken])] == ["gpu-a", "gpu-0"]  # broken first
    assert "disabled by intent" in node_line(ready)
    ready = replace(ready, node="gpu-0")
    state, plane, alert = node_families([broken, ready])
    per_node: dict[str, dict[str, float]] = {}
    for lb, v in state.samples:
        per_node.setdefault(dict(lb)["node"], {})[dict(lb)["state"]] = v
    every = ("broken", "conflict", "unknown", "reconciling", "disabled", "ready")
    assert per_node == {
        NODE: {s: float(s == "broken") for s in every},
        "gpu-0": {s: float(s == "ready") for s in every},
    }
    planes = {(dict(lb)["node"], dict(lb)["plane"]): v for lb, v in plane.samples if v}
    assert planes == {(NODE, "dcgm-exporter"): 1.0}
    assert {dict(lb)["node"]: v for lb, v in alert.samples} == {NODE: 1.0, "gpu-0": 0.0}
    # the same label sets whatever the state: only the values move
    healed = node_families([replace(ready, node=NODE), ready])
    assert {lb for lb, _ in healed[0].samples} == {lb for lb, _ in state.samples}


# --- no alert lost at any crash point (as tests/unit/test_alert_crash_points.py)


def stream() -> list[object]:
    return [
        *setup(),
        READY_POLICY,
        node_record(T0 + S_),
        crashing(T0 + S_),  # fires
        agent(T0 + 2 * S_, "failing", "x"),
        crashing(T0 + 3 * S_, 13),  # the same episode
        operands(T0 + 4 * S_, HEALTHY),  # resolves
        agent(T0 + 5 * S_, "ok"),
        crashing(T0 + 6 * S_, 14),  # a new episode fires
        PodResourcesDiff(NODE, T0 + 7 * S_, (), (*TENANTS, TRAINER)),  # nothing held: resolves
        PodResourcesDiff(NODE, T0 + 8 * S_, (TRAINER,), ()),  # held again: fires
        operands(
            T0 + 9 * S_,
            with_pods(
                in_init(DP), in_init(EXPORTER), in_init(GFD), validator("toolkit-validation", 7)
            ),
        ),  # superseded by the toolkit: resolves and fires
        # the clock moves on before the node is deleted: a record of the node processed again
        # after its deletion reached the changelog is late (dead-lettered, the spine's rule, for
        # every output it caused), so the deletion stays outside the replay window of the
        # records before it
        ClockTick(0, T0 + 9 * S_ + 500),
        ClockTick(0, T0 + 9 * S_ + 750),
        NodeRecord(NODE, T0 + 10 * S_, (), deleted=True),  # gone: resolves
    ]


State = dict[str, dict[str, object]]


def keys(outputs: Sequence[Output]) -> set[str]:
    return {f"{o.id}:{o.status}" for o in outputs if isinstance(o, Alert)}


def run(
    records: Sequence[object], state: State, grace_s: float = 0.0, holddown_s: float = 0.0
) -> tuple[list[list[Output]], list[State]]:
    tables = {name: dict(table) for name, table in state.items()}
    policy = AlertSettings.model_construct(stack_grace_s=grace_s, stack_holddown_s=holddown_s)
    proc = Processor(Tables(**tables), policy, LIFE)  # type: ignore[arg-type]
    outputs, states = [], []
    for record in records:
        outputs.append(proc.handle(record, 0))
        states.append({name: dict(table) for name, table in tables.items()})
    return outputs, states


def test_every_crash_point_delivers_every_stack_alert_exactly_by_key() -> None:
    records = stream()
    empty: State = {name: {} for name in TABLES}
    reference, after = run(records, empty)
    expected = set().union(*(keys(outs) for outs in reference))
    assert all(k.startswith(f"{KIND}-") for k in expected)
    # three episodes of the exporter (each fired and resolved), one of the toolkit
    assert sorted(k.rsplit(":", 1)[1] for k in expected) == ["firing"] * 4 + ["resolved"] * 4
    persisted = [empty, *after]
    crash_points = every_crash_point(
        records, reference, persisted, expected, lambda rs, st: run(rs, st)[0], keys
    )
    assert crash_points > 300


def graced_stream() -> list[object]:
    return [
        *setup(),
        READY_POLICY,
        node_record(T0 + S_),
        crashing(T0 + S_),  # pending
        agent(T0 + 2 * S_, "failing", "x"),
        ClockTick(0, T0 + 30 * S_),  # within the grace: nothing
        operands(T0 + 31 * S_, HEALTHY),  # healed within the grace: never sent
        agent(T0 + 32 * S_, "ok"),
        crashing(T0 + 33 * S_, 14),  # a new episode, pending
        ClockTick(0, T0 + 60 * S_),  # within its grace: nothing
        ClockTick(0, T0 + 93 * S_),  # its grace has run out: fires
        crashing(T0 + 94 * S_, 15),  # the same episode
        operands(T0 + 95 * S_, HEALTHY),  # resolves
        ClockTick(0, T0 + 95 * S_ + 500),
        ClockTick(0, T0 + 95 * S_ + 750),
        NodeRecord(NODE, T0 + 96 * S_, (), deleted=True),
    ]


def test_every_crash_point_delivers_every_graced_stack_alert_exactly_by_key() -> None:
    records = graced_stream()
    empty: State = {name: {} for name in TABLES}
    reference, after = run(records, empty, grace_s=60.0)
    episode = alert_id(KIND, NODE, "dcgm-exporter", T0 + 33 * S_)
    expected = set().union(*(keys(outs) for outs in reference))
    assert expected == {f"{episode}:firing", f"{episode}:resolved"}
    fired = next(a for outs in reference for a in stack_alerts(outs) if a.status == "firing")
    assert (fired.started_ms, fired.ts_ms) == (T0 + 33 * S_, T0 + 93 * S_)
    persisted = [empty, *after]
    crash_points = every_crash_point(
        records, reference, persisted, expected, lambda rs, st: run(rs, st, grace_s=60.0)[0], keys
    )
    assert crash_points > 300


def held_down_stream() -> list[object]:
    every = (*TENANTS, TRAINER)
    return [
        *setup(),
        READY_POLICY,
        node_record(T0 + S_),
        crashing(T0 + S_),  # fires
        agent(T0 + 2 * S_, "failing", "x"),
        PodResourcesDiff(NODE, T0 + 3 * S_, (), every),  # nothing held: the hold-down starts
        ClockTick(0, T0 + 60 * S_),  # within it: nothing
        PodResourcesDiff(NODE, T0 + 70 * S_, (TRAINER,), ()),  # the next Job: the same episode
        ClockTick(0, T0 + 160 * S_),  # the partition's clock, within the jump bound
        PodResourcesDiff(NODE, T0 + 250 * S_, (), (TRAINER,)),  # its end: the hold-down again
        agent(T0 + 300 * S_, "failing", "x"),
        ClockTick(0, T0 + 250 * S_ + HOLDDOWN),  # the hold-down has run out: resolves
        ClockTick(0, T0 + 250 * S_ + HOLDDOWN + 250),
        ClockTick(0, T0 + 250 * S_ + HOLDDOWN + 500),
        NodeRecord(NODE, T0 + 250 * S_ + HOLDDOWN + S_, (), deleted=True),
    ]


def test_every_crash_point_delivers_every_held_down_stack_alert_exactly_by_key() -> None:
    records = held_down_stream()
    empty: State = {name: {} for name in TABLES}
    holddown_s = HOLDDOWN / S_
    reference, after = run(records, empty, holddown_s=holddown_s)
    episode = alert_id(KIND, NODE, "dcgm-exporter", T0 + S_)
    expected = set().union(*(keys(outs) for outs in reference))
    assert expected == {f"{episode}:firing", f"{episode}:resolved"}
    resolved = next(a for outs in reference for a in stack_alerts(outs) if a.status == "resolved")
    assert resolved.ts_ms == T0 + 250 * S_ + HOLDDOWN
    persisted = [empty, *after]
    crash_points = every_crash_point(
        records,
        reference,
        persisted,
        expected,
        lambda rs, st: run(rs, st, holddown_s=holddown_s)[0],
        keys,
    )
    assert crash_points > 100
