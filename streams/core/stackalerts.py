"""A node's ``stack-broken`` alert: a plane of its GPU stack that the operator was meant to run
there is broken while pods hold the node's GPUs. Pure.

``step(episode, status, held, node, ts_ms) -> (episode, alerts)``, on event time, like the
device alerts (:mod:`streams.core.alerts`), but one per node: the verdict is the node's
(:func:`streams.core.operatorstack.node_status`, its ``first_broken`` plane), and the GPUs it
costs are every GPU a pod holds there.

- It fires when the node's status is ``broken`` and a pod holds one of its GPUs. It names the
  first broken plane, its reason, the planes that wait on it, the held GPUs left without a
  trusted reading and their holders (with UIDs from our join, as every alert names holders).
- A plane disabled by intent never fires it: the verdict does not call it broken (its state is
  ``disabled``), and a plane whose intent is ``disabled`` is refused here all the same.
- An episode belongs to its plane: when another plane becomes the first broken one, the open
  alert resolves ("superseded") and the new plane's fires. Holders that change while it is open
  do not re-fire it: the node is no less broken.
- It resolves when the status is no longer ``broken``, when no pod holds a GPU there any more,
  and when the node is gone (:func:`gone`).

The alert id is :func:`streams.core.alerts.alert_id` of (kind, node, plane, episode start): the
firing and resolved records of one episode share it. No grace window and no cool-down: the
verdict is already a standing (a pod not ready, an init container crash looping), and a node
that breaks again after it healed is a new episode with its own id.

Replay safety is the processor's (:mod:`streams.core.nodestack`): each emission is remembered
with the record that caused it, and that record processed again emits it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

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
from streams.core.alerts import alert_id
from streams.core.operatorstack import TITLES

KIND: AlertKind = "stack-broken"


@dataclass(frozen=True, slots=True)
class HeldDevice:
    """A device a pod holds on the node, its holders, and whether a fresh trusted reading
    speaks for it now."""

    device_uuid: str
    holders: tuple[Holder, ...]
    measured: bool


@dataclass(frozen=True, slots=True)
class StackEpisode:
    """An open ``stack-broken`` alert: since when, for which plane, and the alert as it fired
    (its resolution names the same devices and holders)."""

    since_ms: int
    plane: PlaneName
    fired: Alert


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
    node: str, ts_ms: int, status: NodeStatus, plane: Plane, held: Sequence[HeldDevice]
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
        id=alert_id(KIND, node, plane.name, ts_ms),
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
        started_ms=ts_ms,
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


def _resolved(episode: StackEpisode, ts_ms: int, why: str) -> Alert:
    title = TITLES.get(episode.plane, episode.plane)
    return replace(
        episode.fired,
        status="resolved",
        ts_ms=ts_ms,
        summary=f"resolved: {title} on {episode.fired.node}: {why}",
    )


def step(
    episode: StackEpisode | None,
    status: NodeStatus | None,
    held: Sequence[HeldDevice],
    node: str,
    ts_ms: int,
) -> tuple[StackEpisode | None, list[Alert]]:
    """The node's open episode after its status and held devices as of ``ts_ms``, and the
    alerts that moved (a resolution first, then a firing)."""
    plane = broken_plane(status)
    out: list[Alert] = []
    if episode is not None:
        why = None
        if status is None:
            why = "the node's GPU stack is no longer reported"
        elif plane is None:
            why = f"no longer broken: {status.summary}"
        elif not held:
            why = "no pod holds a GPU on the node any more"
        elif plane.name != episode.plane:
            why = f"superseded: {TITLES.get(plane.name, plane.name)} is the first broken plane now"
        if why is None:
            return episode, []
        out.append(_resolved(episode, ts_ms, why))
        episode = None
    if status is None or plane is None or not held:
        return None, out
    alert = _fire(node, ts_ms, status, plane, held)
    return StackEpisode(ts_ms, plane.name, alert), [*out, alert]


def gone(episode: StackEpisode | None, ts_ms: int, why: str) -> list[Alert]:
    """The node left: its open alert resolves (nothing is kept: the node's keys go)."""
    return [] if episode is None else [_resolved(episode, ts_ms, f"the node is gone ({why})")]
