"""A node's ``stack-broken`` alert: a plane of its GPU stack that the operator was meant to run
there is broken while pods hold the node's GPUs. Pure.

``step(episode, status, held, node, ts_ms, grace_ms) -> (episode, alerts)``, on event time, like
the device alerts (:mod:`streams.core.alerts.alerts`), but one per node: the verdict is the node's
(:func:`streams.core.stack.operatorstack.node_status`, its ``first_broken`` plane), and the GPUs it
costs are every GPU a pod holds there.

- An episode opens when the node's status is ``broken`` and a pod holds one of its GPUs. It
  fires once the same first broken plane has stayed broken, with a GPU held, for the grace
  window (``GPUATTR_ALERTS_STACK_GRACE_S``, default 60 s; 0 fires at once) in event time: the
  record's or the partition clock's (``clock.tick``) ``ts_ms``, never the wall clock. Until then
  the episode is pending (:attr:`StackEpisode.fired` is ``None``) and sends nothing; a break
  that heals, whose plane changes or whose GPUs stop being held within the window ends it
  silently (a routine operand restart — a dcgm-exporter rolling update not ready for 10 to 30 s —
  pages nobody). Another plane becoming the first broken one starts a new window for it.
- The firing alert names the first broken plane, its reason, the planes that wait on it, the
  held GPUs left without a trusted reading and their holders (with UIDs from our join, as every
  alert names holders) as of when it fires; its ``started_ms`` is when the break began (the
  episode's start), its ``ts_ms`` when the grace ran out.
- A plane disabled by intent never fires it: the verdict does not call it broken (its state is
  ``disabled``), and a plane whose intent is ``disabled`` is refused here all the same.
- An episode belongs to its plane: when another plane becomes the first broken one, the open
  alert resolves ("superseded") and the new plane's episode opens (and fires after its own
  grace). Holders that change while it is open do not re-fire it: the node is no less broken.
- It resolves when the status is no longer ``broken``, when no pod has held a GPU there for
  the hold-down (``GPUATTR_ALERTS_STACK_HOLDDOWN_S``, default 600 s: one break across
  back-to-back batch Jobs is one episode, not one per Job), and when the node is gone
  (:func:`gone`); a pending episode ends then, or as soon as no GPU is held, with nothing sent.

The alert id is :func:`streams.core.alerts.alerts.alert_id` of (kind, node, plane, episode start):
the
firing and resolved records of one episode share it, whenever within the episode it fires. No
cool-down: a node that breaks again after it healed is a new episode with its own id and its
own grace.

Replay safety is the processor's (:mod:`streams.core.stack.nodestack`): each emission is remembered
with the record that caused it, and that record processed again emits it again. A pending
episode is kept in the same table value, so the window survives a restart; the processor steps
it on the partition's ``clock.tick`` too, so it can run out without a new record of the node.
"""

from __future__ import annotations

from collections.abc import Sequence

from contract.outputs import (
    Alert,
    AlertFigures,
    AlertKind,
    Holder,
    NodeStatus,
    Plane,
    PlaneName,
    StackBreak,
)
from contract.records import Record, replace
from streams.core.alerts.alerts import alert_id
from streams.core.node.telemetry import when
from streams.core.stack.operatorstack import TITLES

KIND: AlertKind = "stack-broken"


class HeldDevice(Record, frozen=True):
    """A device a pod holds on the node, its holders, and whether a fresh trusted reading
    speaks for it now."""

    device_uuid: str
    holders: tuple[Holder, ...]
    measured: bool


class StackEpisode(Record, frozen=True):
    """A ``stack-broken`` episode: since when the plane has been broken with a GPU held, which
    plane, and the alert as it fired (its resolution names the same devices and holders);
    ``fired`` is ``None`` while the episode is within its grace window (pending)."""

    since_ms: int
    plane: PlaneName
    fired: Alert | None = None  # additive (v1): None only since the grace window
    unheld_ms: int | None = None  # additive (v1): since when no pod holds a GPU there (fired)


def broken_plane(status: NodeStatus | None) -> Plane | None:
    """The plane a ``stack-broken`` alert is about: the first broken one of a ``broken`` node,
    provided it was intended there (never one disabled on purpose)."""
    if status is None or status.state != "broken" or status.first_broken is None:
        return None
    plane = next((p for p in status.planes if p.name == status.first_broken), None)
    if plane is None or plane.intent.kind == "disabled" or plane.state == "disabled":
        return None
    return plane


def _pod(h: Holder) -> str:
    return f"{h.namespace}/{h.pod} (uid {h.uid[:8] if h.uid else 'pending'})"


def _holders(devices: Sequence[HeldDevice]) -> tuple[Holder, ...]:
    seen: dict[tuple[str, str, str, str], Holder] = {}
    for d in devices:
        for h in d.holders:
            seen.setdefault((h.namespace, h.pod, h.container, h.claim or ""), h)
    return tuple(seen[k] for k in sorted(seen))


def _fire(
    node: str,
    since_ms: int,
    ts_ms: int,
    status: NodeStatus,
    plane: Plane,
    held: Sequence[HeldDevice],
) -> Alert:
    blind = [d for d in held if not d.measured]
    named = blind or list(held)  # the GPUs it leaves without telemetry; else every held one
    holders = _holders(named)
    pods = ", ".join(sorted({_pod(h) for h in holders}))
    gpus = "GPU" if len(named) == 1 else "GPUs"
    if blind:
        cost = f"{len(blind)} held {gpus} without telemetry, held by {pods}"
    else:
        cost = f"{len(named)} held {gpus} (their readings still arrive), held by {pods}"
    return Alert(
        id=alert_id(KIND, node, plane.name, since_ms),
        kind=KIND,
        status="firing",
        node=node,
        device_uuid="",
        gpu_uuid="",
        model="",
        mig=None,
        sharing="unknown",
        holders=holders,
        figures=AlertFigures(),
        window_s=None,
        started_ms=since_ms,
        ts_ms=ts_ms,
        device_wide=False,
        summary=f"GPU stack broken: {status.summary}; {cost}",
        stack=StackBreak(
            plane=plane.name,
            reason=plane.reason,
            blocked=status.blocked,
            held=tuple(sorted(d.device_uuid for d in held)),
            unmeasured=tuple(sorted(d.device_uuid for d in blind)),
        ),
    )


def _resolved(fired: Alert, plane: PlaneName, ts_ms: int, why: str) -> Alert:
    title = TITLES.get(plane, plane)
    return replace(
        fired,
        status="resolved",
        ts_ms=ts_ms,
        summary=f"resolved: {title} on {fired.node}: {why}",
    )


def _ended(
    episode: StackEpisode,
    status: NodeStatus | None,
    plane: Plane | None,
    held: bool,
    ts_ms: int,
    holddown_ms: int,
) -> str | None:
    """Why the episode is over (``None``: it goes on). A fired one outlasts a gap between
    holders shorter than ``holddown_ms`` (:attr:`StackEpisode.unheld_ms`)."""
    if status is None:
        return "the node's GPU stack is no longer reported"
    if plane is None:
        return f"no longer broken: {status.summary}"
    if plane.name != episode.plane:
        return f"superseded: {TITLES.get(plane.name, plane.name)} is the first broken plane now"
    if not held and episode.fired is None:
        return "no pod holds a GPU on the node any more"
    unheld = episode.unheld_ms if episode.unheld_ms is not None else ts_ms
    if not held and ts_ms - unheld >= holddown_ms:
        return f"no pod holds a GPU on the node any more (none since {when(unheld)})"
    return None


def _holding(episode: StackEpisode, held: bool, ts_ms: int) -> StackEpisode:
    """The episode with since when nobody holds a GPU on the node (a fired one only)."""
    if held or episode.fired is None:
        unheld = None
    else:
        unheld = episode.unheld_ms if episode.unheld_ms is not None else ts_ms
    return episode if unheld == episode.unheld_ms else replace(episode, unheld_ms=unheld)


def step(
    episode: StackEpisode | None,
    status: NodeStatus | None,
    held: Sequence[HeldDevice],
    node: str,
    ts_ms: int,
    *,
    grace_ms: int,
    holddown_ms: int = 0,
) -> tuple[StackEpisode | None, list[Alert]]:
    """The node's episode after its status and held devices as of ``ts_ms``, and the alerts
    that moved (a resolution first, then a firing). An episode fires once ``grace_ms`` have
    passed since it began with the same plane broken and a GPU held all along; a fired one
    ends for lack of holders once none has held a GPU there for ``holddown_ms``."""
    plane = broken_plane(status)
    out: list[Alert] = []
    if episode is not None:
        why = _ended(episode, status, plane, bool(held), ts_ms, holddown_ms)
        if why is None and episode.fired is None:
            return _due(episode, status, plane, held, node, ts_ms, grace_ms)
        if why is None:
            return _holding(episode, bool(held), ts_ms), []
        if episode.fired is not None:
            out.append(_resolved(episode.fired, episode.plane, ts_ms, why))
        episode = None
    if status is None or plane is None or not held:
        return None, out
    opened = StackEpisode(ts_ms, plane.name)
    episode, fired = _due(opened, status, plane, held, node, ts_ms, grace_ms)
    return episode, [*out, *fired]


def _due(
    episode: StackEpisode,
    status: NodeStatus | None,
    plane: Plane | None,
    held: Sequence[HeldDevice],
    node: str,
    ts_ms: int,
    grace_ms: int,
) -> tuple[StackEpisode, list[Alert]]:
    """A pending episode that goes on: it fires when its grace has run out."""
    if status is None or plane is None or ts_ms - episode.since_ms < grace_ms:
        return episode, []
    alert = _fire(node, episode.since_ms, ts_ms, status, plane, held)
    return replace(episode, fired=alert), [alert]


def gone(episode: StackEpisode | None, ts_ms: int, why: str) -> list[Alert]:
    """The node left: its open alert resolves (nothing is kept: the node's keys go); a pending
    episode ends with nothing sent."""
    if episode is None or episode.fired is None:
        return []
    return [_resolved(episode.fired, episode.plane, ts_ms, f"the node is gone ({why})")]
