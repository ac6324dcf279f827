"""When a kubelet's PodResources answers may be published (agents/podresources/readiness.py).

The answers here are what a real kubelet 1.35 gave on this machine (tests/realnode reproduces
them): after a restart ``List`` is empty with no error for about a second (for the whole
API-server outage and ~20 s more if the API server is down), ``GetAllocatableResources`` is
empty until the device plugins register again, and pods come back one by one.
"""

from __future__ import annotations

import pytest

from agents.podresources.readiness import (
    NO_ALLOCATABLE,
    NO_POD,
    OWN_POD_MISSING,
    UNCONFIRMED,
    Answer,
    Readiness,
    step,
)
from contract.inputs import AllocatableDevice, DeviceAssignment
from contract.records import replace

G0, G1 = "GPU-0f6c2d1e-8a9e-4f1b-a0d2-3c5e7f9a1b2c", "GPU-7a1b9c3d-52d4-4b8e-9a06-7d2e4c1b8f30"
TRAIN = DeviceAssignment("ml", "train", "main", "nvidia.com/gpu", G0)
NOTEBOOK = DeviceAssignment("dev", "notebook", "jupyter", "nvidia.com/gpu.shared", f"{G1}::2")
CLAIMED = DeviceAssignment("ml", "dra", "main", "dra:gpu.example.com", "node-a/gpu-0", "ml/c")
AGENT = "gpuattr/gpuattr-agent-x1"
ALLOC = (
    AllocatableDevice("nvidia.com/gpu", G0),
    AllocatableDevice("nvidia.com/gpu.shared", f"{G1}::2"),
)
SNAPSHOT_MS, TIMEOUT_MS, POLL_MS = 60_000, 120_000, 1_000


def answer(
    *rows: DeviceAssignment,
    pods: tuple[str, ...] | None = None,
    alloc: tuple[AllocatableDevice, ...] | None = ALLOC,
) -> Answer:
    named = {f"{r.namespace}/{r.pod}" for r in rows} if pods is None else set(pods)
    return Answer(frozenset(rows), frozenset(named), alloc)


EMPTY = Answer(frozenset(), frozenset(), ())  # a kubelet that has just started
BOTH = answer(TRAIN, NOTEBOOK)
BOTH_AND_AGENT = answer(TRAIN, NOTEBOOK, pods=("ml/train", "dev/notebook", AGENT))


def play(
    state: Readiness, answers: list[Answer], start_ms: int = 0
) -> tuple[Readiness, list[tuple[str | None, str | None]]]:
    """Every answer a poll apart, each verdict carried out (publishing never fails here)."""
    out = []
    for n, ans in enumerate(answers):
        state, verdict = step(
            state,
            ans,
            start_ms + n * POLL_MS,
            snapshot_interval_ms=SNAPSHOT_MS,
            ready_timeout_ms=TIMEOUT_MS,
        )
        out.append((verdict.publish, verdict.reason))
    return state, out


def steady(own_pod: str = "") -> Readiness:
    """A collector that published BOTH (with the agent, when own_pod) and stays connected."""
    first = BOTH_AND_AGENT if own_pod else BOTH
    state, verdicts = play(Readiness(own_pod=own_pod).connected(), [first, first])
    assert verdicts == [(None, UNCONFIRMED), ("snapshot", None)]
    return state


def test_a_first_answer_goes_out_once_the_next_poll_confirms_it() -> None:
    _, verdicts = play(Readiness().connected(), [BOTH, BOTH, BOTH])
    assert verdicts == [(None, UNCONFIRMED), ("snapshot", None), (None, None)]


def test_an_empty_node_is_believed_on_a_first_connection_without_the_own_pod() -> None:
    _, verdicts = play(Readiness().connected(), [answer(alloc=()), answer(alloc=())])
    assert verdicts == [(None, UNCONFIRMED), ("snapshot", None)]


def test_in_steady_state_a_change_is_a_diff_at_once_and_order_is_no_change() -> None:
    state = steady()
    reordered = Answer(frozenset([NOTEBOOK, TRAIN]), frozenset(["dev/notebook", "ml/train"]), ALLOC)
    state, verdicts = play(state, [reordered, answer(TRAIN), answer(TRAIN)], start_ms=5_000)
    assert verdicts == [(None, None), ("diff", None), (None, None)]
    assert state.published == answer(TRAIN)


def test_the_last_pod_leaving_a_node_is_believed_in_steady_state() -> None:
    _, verdicts = play(steady(), [answer(), answer()], start_ms=5_000)
    assert verdicts == [("diff", None), (None, None)]


def test_a_restarted_kubelet_is_held_until_it_lists_pods_and_confirms() -> None:
    state = steady().connected()  # the kubelet restarted: a new connection
    answers = [EMPTY, EMPTY, answer(alloc=ALLOC), BOTH, BOTH]
    state, verdicts = play(state, answers, start_ms=5_000)
    assert verdicts == [
        (None, NO_POD),
        (None, NO_POD),
        (None, NO_POD),  # the plugins registered before the pods arrived
        (None, UNCONFIRMED),
        ("snapshot", None),
    ]
    assert state.published == BOTH


def test_pods_arriving_one_by_one_never_publish_the_partial_list() -> None:
    state = steady().connected()
    answers = [EMPTY, answer(TRAIN), BOTH, BOTH]
    _, verdicts = play(state, answers, start_ms=5_000)
    assert verdicts == [
        (None, NO_POD),
        (None, UNCONFIRMED),
        (None, UNCONFIRMED),
        ("snapshot", None),
    ]


def test_an_api_server_outage_holds_for_as_long_as_it_lasts() -> None:
    """List stayed empty 21 s after a kubelet restart with the API server down 18 s."""
    state = steady().connected()
    answers = [EMPTY] + [answer(alloc=ALLOC)] * 40 + [BOTH, BOTH]
    _, verdicts = play(state, answers, start_ms=5_000)
    assert verdicts[:41] == [(None, NO_POD)] * 41
    assert verdicts[41:] == [(None, UNCONFIRMED), ("snapshot", None)]


def test_devices_held_while_no_plugin_registered_are_not_ready() -> None:
    state = steady().connected()
    no_plugins = answer(TRAIN, NOTEBOOK, alloc=())
    _, verdicts = play(state, [no_plugins, no_plugins, BOTH, BOTH], start_ms=5_000)
    assert verdicts == [
        (None, NO_ALLOCATABLE),
        (None, NO_ALLOCATABLE),
        (None, UNCONFIRMED),
        ("snapshot", None),
    ]


def test_a_plugin_restart_in_steady_state_holds_until_it_registered_again() -> None:
    """No reconnection: the device plugin restarted, its devices left the allocatable list."""
    answers = [answer(TRAIN, NOTEBOOK, alloc=()), BOTH, BOTH]
    _, verdicts = play(steady(), answers, start_ms=5_000)
    assert verdicts == [(None, NO_ALLOCATABLE), (None, UNCONFIRMED), ("snapshot", None)]


def test_dra_devices_need_no_allocatable_list() -> None:
    _, verdicts = play(Readiness().connected(), [answer(CLAIMED, alloc=())] * 2)
    assert verdicts == [(None, UNCONFIRMED), ("snapshot", None)]


def test_a_kubelet_without_get_allocatable_is_not_judged_by_it() -> None:
    _, verdicts = play(Readiness().connected(), [answer(TRAIN, alloc=None)] * 2)
    assert verdicts == [(None, UNCONFIRMED), ("snapshot", None)]


def test_a_new_allocatable_list_is_a_confirmed_snapshot() -> None:
    """The plugin re-registered with replicas: the new list goes out once two polls agree."""
    replicas = tuple(AllocatableDevice("nvidia.com/gpu", f"{G0}::{n}") for n in range(4))
    new = answer(TRAIN, NOTEBOOK, alloc=replicas)
    _, verdicts = play(steady(), [new, new], start_ms=5_000)
    assert verdicts == [(None, UNCONFIRMED), ("snapshot", None)]


def test_a_snapshot_goes_out_every_interval() -> None:
    state = steady()
    state, verdicts = play(state, [BOTH], start_ms=SNAPSHOT_MS + POLL_MS)
    assert verdicts == [("snapshot", None)]


# --- with the agent's own pod known -------------------------------------------------------------


def test_the_own_pod_listed_is_the_sign_of_a_kubelet_that_has_its_pods() -> None:
    state = steady(AGENT)
    # no reconnection seen (gRPC reconnected between two polls): the own pod's absence tells
    _, verdicts = play(state, [EMPTY, BOTH, BOTH_AND_AGENT, BOTH_AND_AGENT], start_ms=5_000)
    assert verdicts == [
        (None, NO_POD),
        (None, OWN_POD_MISSING),
        (None, UNCONFIRMED),
        ("snapshot", None),
    ]


def test_an_empty_list_is_never_taken_while_the_own_pod_is_missing() -> None:
    state = steady(AGENT).connected()
    hours = [EMPTY] * 5
    state, verdicts = play(state, hours, start_ms=5_000)
    state, late = play(state, [EMPTY], start_ms=10 * TIMEOUT_MS)
    assert verdicts + late == [(None, NO_POD)] * 6
    assert state.published == BOTH_AND_AGENT


def test_a_wrong_own_pod_setting_is_dropped_after_the_bounded_wait() -> None:
    state = Readiness(own_pod="gpuattr/no-such-pod").connected()
    state, verdicts = play(state, [BOTH] * 3)
    assert verdicts == [(None, OWN_POD_MISSING)] * 3
    later, dropped = step(
        state,
        BOTH,
        TIMEOUT_MS + POLL_MS,
        snapshot_interval_ms=SNAPSHOT_MS,
        ready_timeout_ms=TIMEOUT_MS,
    )
    assert dropped.own_pod_dropped
    assert later.own_pod == ""
    assert dropped.publish == "snapshot"
    assert dropped.timed_out


# --- bounded waits ------------------------------------------------------------------------------


def test_a_node_left_without_pods_is_believed_after_the_bounded_wait() -> None:
    """Without the own pod: every pod was deleted while the kubelet was down."""
    state = steady().connected()
    state, held = play(state, [EMPTY, EMPTY], start_ms=5_000)
    assert held == [(None, NO_POD)] * 2
    state, verdict = step(
        state,
        EMPTY,
        5_000 + TIMEOUT_MS,
        snapshot_interval_ms=SNAPSHOT_MS,
        ready_timeout_ms=TIMEOUT_MS,
    )
    assert (verdict.publish, verdict.timed_out) == ("snapshot", True)
    assert state.published == EMPTY


def test_a_plugin_that_never_comes_back_is_believed_after_the_bounded_wait() -> None:
    state = steady()
    no_plugins = answer(TRAIN, NOTEBOOK, alloc=())
    state, held = play(state, [no_plugins], start_ms=5_000)
    assert held == [(None, NO_ALLOCATABLE)]
    _, verdict = step(
        state,
        no_plugins,
        5_000 + TIMEOUT_MS,
        snapshot_interval_ms=SNAPSHOT_MS,
        ready_timeout_ms=TIMEOUT_MS,
    )
    assert (verdict.publish, verdict.timed_out) == ("snapshot", True)


@pytest.mark.parametrize("failing_polls", [1, 3])
def test_a_failed_publish_keeps_the_state_so_the_next_poll_sends_it_again(
    failing_polls: int,
) -> None:
    state = steady()
    now = 5_000
    for _ in range(failing_polls):
        _, verdict = step(
            state,
            answer(TRAIN),
            now,
            snapshot_interval_ms=SNAPSHOT_MS,
            ready_timeout_ms=TIMEOUT_MS,
        )
        assert verdict.publish == "diff"  # not carried out: the state stays
        now += POLL_MS
    state, verdict = step(
        state, answer(TRAIN), now, snapshot_interval_ms=SNAPSHOT_MS, ready_timeout_ms=TIMEOUT_MS
    )
    assert verdict.publish == "diff"
    assert replace(state).published == answer(TRAIN)
