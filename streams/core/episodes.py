"""What every device alert shares: an episode (pending or firing, under one holder set), who
holds the device, an alert's id and its record. Pure.

An episode belongs to the holders it started under (:func:`same_holders`): when they change, it
ends — resolved if it had fired — and is never inherited by the next holders.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from contract.outputs import Alert, AlertFigures, AlertKind, AttributionEvent, Holder
from contract.records import fast_init

#: a pod holding the device, as episodes remember it: (namespace, pod, uid or "")
HolderId = tuple[str, str, str]


@fast_init
@dataclass(frozen=True, slots=True)
class Episode:
    """One pending-or-firing condition: when it began, whether it has fired, and under whom."""

    since_ms: int
    firing: bool = False
    holders: tuple[HolderId, ...] = ()
    value: int | None = None  # XID: the code that fired
    #: memory-fault, pcie-replays: the event time of the last rise (additive)
    last_ms: int | None = None


def holder_ids(ev: AttributionEvent) -> tuple[HolderId, ...]:
    return tuple(sorted({(h.namespace, h.pod, h.uid or "") for h in ev.holders}))


def same_holders(a: tuple[HolderId, ...], b: tuple[HolderId, ...]) -> bool:
    """The same pods: same names, and the same UID wherever both sides know it (a UID that
    resolves after a pending one is the same pod; a name re-created with a new UID is not)."""
    if a == b:
        return True  # the common case: the same holders, UIDs and all
    if {(ns, pod) for ns, pod, _ in a} != {(ns, pod) for ns, pod, _ in b}:
        return False
    uids = {(ns, pod): uid for ns, pod, uid in a}
    return all(not uid or not uids[(ns, pod)] or uids[(ns, pod)] == uid for ns, pod, uid in b)


def alert_id(kind: AlertKind, node: str, device: str, since_ms: int) -> str:
    digest = hashlib.sha256(f"{kind}|{node}|{device}|{since_ms}".encode()).hexdigest()[:24]
    return f"{kind}-{digest}"


def make_alert(
    ev: AttributionEvent,
    kind: AlertKind,
    firing: bool,
    since_ms: int,
    figures: AlertFigures,
    window_s: float | None,
    summary: str,
    holders: tuple[Holder, ...] | None = None,
) -> Alert:
    return Alert(
        id=alert_id(kind, ev.node, ev.device_uuid, since_ms),
        kind=kind,
        status="firing" if firing else "resolved",
        node=ev.node,
        device_uuid=ev.device_uuid,
        gpu_uuid=ev.gpu_uuid,
        model=ev.model,
        mig=ev.mig,
        sharing=ev.sharing,
        holders=ev.holders if holders is None else holders,
        figures=figures,
        window_s=window_s,
        started_ms=since_ms,
        ts_ms=ev.ts_ms,
        device_wide=ev.tenant_count > 1,
        summary=summary,
    )


def named(ev: AttributionEvent) -> str:
    """The event's holders as an alert names them: every tenant of a shared device, whose
    figures are the device's as a whole."""
    pods = sorted({f"{h.namespace}/{h.pod}" for h in ev.holders})
    if len(pods) > 1:
        return (
            f"{len(pods)} tenants ({', '.join(pods)}) sharing {ev.device_uuid} (device-wide figure)"
        )
    return f"{pods[0] if pods else 'nobody'} on {ev.device_uuid}"


def episode_holders(ep: Episode, ev: AttributionEvent) -> tuple[Holder, ...]:
    """The holders an episode's alert names: the event's, when they are the episode's."""
    return ev.holders if same_holders(ep.holders, holder_ids(ev)) else ()


def who_of(ep: Episode, ev: AttributionEvent) -> str:
    """The episode's holders by name (the event's may be others by now)."""
    if same_holders(ep.holders, holder_ids(ev)):
        return named(ev)
    pods = sorted({f"{ns}/{pod}" for ns, pod, _ in ep.holders})
    if not pods:
        return f"nobody on {ev.device_uuid}"
    return f"{', '.join(pods)} on {ev.device_uuid}"


def gone_reason(ev: AttributionEvent) -> str:
    return f"the device is gone ({ev.telemetry.reason})"
