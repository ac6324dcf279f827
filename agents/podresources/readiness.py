"""When a kubelet's PodResources answer may be published: readiness and confirmation. Pure.

A kubelet that has just started answers ``List`` with *nothing* — no error — until it has its
pods from the API server (about a second; the whole API-server outage and 15-20 s more if the
API server is down when it starts), and ``GetAllocatableResources`` with nothing until the
device plugins have registered again. Taking such an answer at its word would tell the worker
that every GPU of the node was released. So the collector asks :func:`step` about every answer,
and publishes only what it says; until then the worker keeps the holders last published.

**Ready** (:func:`not_ready`) means both:

* *the kubelet has its pods*: with the agent's own pod known (``GPUATTR_KUBELET_OWN_POD``, set
  by the DaemonSet from the downward API), ``List`` names it — a running agent is a pod of this
  node, so a kubelet that has its pods lists it; checked on every answer, so even a restart
  that gRPC reconnected through unseen is caught. Without it, after a reconnection (a kubelet
  that answered before), ``List`` must name at least one pod, any pod; an empty node is
  believed on a first connection and in steady state. If ``List`` names pods but never the
  own pod for ``ready_timeout_ms``, the setting is wrong: it is dropped (logged) for the
  at-least-one-pod rule;
* *the device plugins have registered*: ``GetAllocatableResources`` is not empty while ``List``
  shows a device-plugin device held (a kubelet that does not serve the method is not judged).

**Confirmed**: an answer that comes after a reconnection or a not-ready answer, or whose
allocatable list differs from the one last published, is published only when the next poll's
answer is the same (a kubelet adds its pods one by one, and plugins register one resource at a
time). It goes out as a snapshot. Otherwise a ready answer goes out as a diff (if anything
changed) or a periodic snapshot.

**Bounded**: a wait on anything but the own pod ends after ``ready_timeout_ms`` (a plugin that
never comes back, a node with no pod left): the answer is then taken at its word
(:attr:`Verdict.timed_out`, logged and counted by the collector).

Order never matters: answers are sets of rows, so a kubelet that lists pods or replicas in
another order produces no diff.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.inputs import DRA_PREFIX, AllocatableDevice, DeviceAssignment
from contract.records import replace

NO_POD = "no_pod_listed"
OWN_POD_MISSING = "own_pod_not_listed"
NO_ALLOCATABLE = "allocatable_empty"
UNCONFIRMED = "unconfirmed"


@dataclass(frozen=True, slots=True)
class Answer:
    """One poll of the kubelet: ``List`` (rows, every pod it names) and
    ``GetAllocatableResources`` (``None``: not served by this kubelet)."""

    rows: frozenset[DeviceAssignment]
    pods: frozenset[str]  # namespace/name
    allocatable: tuple[AllocatableDevice, ...] | None


@dataclass(frozen=True, slots=True)
class Readiness:
    """What the collector remembers between answers."""

    own_pod: str = ""  # namespace/name; "" unknown (or dropped as wrong)
    published: Answer | None = None  # the last answer published (snapshot or diff applied)
    last_snapshot_ms: int | None = None
    reconnected: bool = False  # a new connection after one that answered
    answered: bool = False  # some connection answered
    waiting_since_ms: int | None = None  # not ready or unconfirmed since
    candidate: Answer | None = None  # a ready answer awaiting its confirmation
    own_pod_missing_since_ms: int | None = None

    def connected(self) -> Readiness:
        """A new connection (or gRPC's own reconnection): a snapshot is owed."""
        return replace(self, reconnected=self.answered, candidate=None)


@dataclass(frozen=True, slots=True)
class Verdict:
    """``publish``: ``"snapshot"``, ``"diff"`` or ``None`` (hold: nothing goes out);
    ``reason``: why an answer was held; ``timed_out``: published after a bounded wait;
    ``own_pod_dropped``: the own-pod setting was found wrong on this answer."""

    publish: str | None
    reason: str | None = None
    timed_out: bool = False
    own_pod_dropped: bool = False


def _holds_plugin_devices(answer: Answer) -> bool:
    return any(not row.resource.startswith(DRA_PREFIX) for row in answer.rows)


def not_ready(state: Readiness, answer: Answer) -> str | None:
    """Why the kubelet that gave ``answer`` is not ready; ``None`` if it is."""
    if state.own_pod:
        if state.own_pod not in answer.pods:
            return OWN_POD_MISSING if answer.pods else NO_POD
    elif state.reconnected and not answer.pods:
        return NO_POD
    if answer.allocatable == () and _holds_plugin_devices(answer):
        return NO_ALLOCATABLE
    return None


def _own_pod_wrong(state: Readiness, answer: Answer, now_ms: int) -> Readiness:
    """Track how long ``List`` has named pods but not the own pod."""
    if not state.own_pod or state.own_pod in answer.pods or not answer.pods:
        return replace(state, own_pod_missing_since_ms=None)
    if state.own_pod_missing_since_ms is None:
        return replace(state, own_pod_missing_since_ms=now_ms)
    return state


def step(
    state: Readiness,
    answer: Answer,
    now_ms: int,
    *,
    snapshot_interval_ms: int,
    ready_timeout_ms: int,
) -> tuple[Readiness, Verdict]:
    """The state after ``answer`` if the verdict is carried out, and the verdict.

    A held answer's state applies at once; a published one's only once it went out (the
    collector keeps the old state when publishing fails, and the next poll tries again)."""
    state = _own_pod_wrong(replace(state, answered=True), answer, now_ms)
    dropped = False
    missing = state.own_pod_missing_since_ms
    if missing is not None and now_ms - missing >= ready_timeout_ms:
        state = replace(state, own_pod="", own_pod_missing_since_ms=None)
        dropped = True
    waiting = state.waiting_since_ms if state.waiting_since_ms is not None else now_ms
    timed_out = now_ms - waiting >= ready_timeout_ms
    reason = not_ready(state, answer)
    # the own pod is an exact sign: a kubelet that has its pods lists it (no bound on it)
    exact = bool(state.own_pod) and reason in (NO_POD, OWN_POD_MISSING)
    if reason is not None and (exact or not timed_out):
        held = replace(state, waiting_since_ms=waiting, candidate=None)
        return held, Verdict(None, reason, own_pod_dropped=dropped)
    published = state.published
    needs_confirmation = (
        published is None
        or state.reconnected
        or state.waiting_since_ms is not None
        or answer.allocatable != published.allocatable
    )
    confirmed = state.candidate == answer
    if needs_confirmation and not confirmed and not timed_out:
        held = replace(state, waiting_since_ms=waiting, candidate=answer)
        return held, Verdict(None, UNCONFIRMED, own_pod_dropped=dropped)
    done = replace(
        state,
        published=answer,
        reconnected=False,
        waiting_since_ms=None,
        candidate=None,
    )
    due = state.last_snapshot_ms is None or not (
        0 <= now_ms - state.last_snapshot_ms < snapshot_interval_ms
    )
    if needs_confirmation or due:
        late = reason is not None or (needs_confirmation and not confirmed)
        verdict = Verdict("snapshot", timed_out=late, own_pod_dropped=dropped)
        return replace(done, last_snapshot_ms=now_ms), verdict
    if published is not None and answer.rows == published.rows:
        return done, Verdict(None, own_pod_dropped=dropped)
    return done, Verdict("diff", own_pod_dropped=dropped)
