"""What every device alert shares: an episode (pending or firing, under one holder set), who
holds the device, an alert's id and its record. Pure.

An episode belongs to the holders it started under (:func:`same_holders`): when they change, it
ends — resolved if it had fired — and is never inherited by the next holders. It remembers them
in full (``named``), so an alert resolved by the device's last event (a node deleted: the event
names nobody) still names them, with their UIDs.

A fault measured over a scrape interval (an XID, a memory fault, PCIe replays: what changed
from the previous reading to this one) belongs to whoever held the device in that interval: when
the holders changed since the previous reading (:func:`handed_over`), its alert names both the
holders before and after, and is never opened on the successor alone.

A window measures only what was measured (:func:`gap_ended`): an idle, low-efficiency or thermal
episode never spans a gap without readings longer than ``reading_gap_s``; the event that shows
such a gap ends it (resolved if it had fired), and the next reading starts a new one.
"""

from __future__ import annotations

import hashlib

from contract.outputs import Alert, AlertFigures, AlertKind, AttributionEvent, Holder
from contract.records import Record
from infra.settings import AlertSettings

#: a pod holding the device, as episodes remember it: (namespace, pod, uid or "")
HolderId = tuple[str, str, str]


class Episode(Record, frozen=True):
    """One pending-or-firing condition: when it began, whether it has fired, and under whom."""

    since_ms: int
    firing: bool = False
    holders: tuple[HolderId, ...] = ()
    value: int | None = None  # XID: the code that fired
    #: memory-fault, pcie-replays: the event time of the last rise (additive)
    last_ms: int | None = None
    #: the holders in full as the episode last saw them (additive): what an alert resolved by
    #: an event that names nobody (the device's last) names
    named: tuple[Holder, ...] = ()
    #: a fault measured over a hand-over: the holders before it, named beside the episode's own
    #: (additive)
    before: tuple[Holder, ...] = ()


#: holder tuples whose ids were asked for, by identity, with their ids: a device's holders are one
#: tuple object while its join is kept, and one alert step asks for the ids of its event's holders
#: and of the last reading's several times (a pure function's memo; emptied at the bound)
_IDS: dict[int, tuple[tuple[Holder, ...], tuple[HolderId, ...]]] = {}
IDS_MAXSIZE = 4096


def ids_of(holders: tuple[Holder, ...]) -> tuple[HolderId, ...]:
    """The pods among ``holders`` (a pod's containers folded), sorted."""
    hit = _IDS.get(id(holders))
    if hit is not None and hit[0] is holders:
        return hit[1]
    ids = fresh_ids(holders)
    if len(_IDS) >= IDS_MAXSIZE:
        _IDS.clear()
    _IDS[id(holders)] = (holders, ids)
    return ids


def fresh_ids(holders: tuple[Holder, ...]) -> tuple[HolderId, ...]:
    return tuple(sorted({(h.namespace, h.pod, h.uid or "") for h in holders}))


def holder_ids(ev: AttributionEvent) -> tuple[HolderId, ...]:
    return ids_of(ev.holders)


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
    listed = ev.holders if holders is None else holders
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
        holders=listed,
        figures=figures,
        window_s=window_s,
        started_ms=since_ms,
        ts_ms=ev.ts_ms,
        # of the pods the alert names: a resolution may name the holders that have just left
        device_wide=len({(h.namespace, h.pod) for h in listed}) > 1,
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
    """The holders an episode's alert names: the event's, when they are the episode's; at the
    device's last event (``gone``: a node deleted names nobody), the episode's own. A fault
    measured over a hand-over names the holders before it too (:func:`fault_holders`)."""
    if ev.origin == "gone" and not ev.holders:
        return (*ep.before, *ep.named)
    if not same_holders(ep.holders, holder_ids(ev)):
        return ()
    return (*ep.before, *ev.holders) if ep.before else ev.holders


def handed_over(previous: tuple[Holder, ...] | None, ev: AttributionEvent) -> tuple[Holder, ...]:
    """The holders of the device's previous reading (``previous``) when they are not this
    event's: the interval the event's counters and last-XID value measure spans a hand-over,
    and a fault in it may be theirs. ``()`` when the holders are the same, or not known."""
    if not previous or ev.state == "unknown":
        return ()
    return () if same_holders(ids_of(previous), holder_ids(ev)) else previous


def fault_holders(ev: AttributionEvent, before: tuple[Holder, ...]) -> tuple[Holder, ...]:
    """Whom a fault measured over the interval up to this event names: the holders before a
    hand-over the interval spans (``before``, :func:`handed_over`) and the event's."""
    return (*before, *ev.holders) if before else ev.holders


def fault_owners(ev: AttributionEvent, before: tuple[Holder, ...]) -> str:
    """The owners a fault's summary names (:func:`fault_holders`)."""
    if not before:
        return named(ev)
    pods = ", ".join(sorted({f"{h.namespace}/{h.pod}" for h in before}))
    return f"{pods} until a hand-over within the interval, then {named(ev)}"


def who_of(ep: Episode, ev: AttributionEvent) -> str:
    """The episode's holders by name (the event's may be others by now)."""
    if same_holders(ep.holders, holder_ids(ev)):
        return fault_owners(ev, ep.before)
    pods = sorted(
        {f"{ns}/{pod}" for ns, pod, _ in ep.holders} | {f"{h.namespace}/{h.pod}" for h in ep.before}
    )
    if not pods:
        return f"nobody on {ev.device_uuid}"
    return f"{', '.join(pods)} on {ev.device_uuid}"


def gone_reason(ev: AttributionEvent) -> str:
    return f"the device is gone ({ev.telemetry.reason})"


def unread_ms(ev: AttributionEvent, previous_ms: int | None = None) -> int | None:
    """How long the device went without a reading up to this event. An event without one: since
    its last trusted sample, else since the cause of the silence began. A reading: since the
    device's previous one (``previous_ms``, the agent's previous scrape of it, where known).
    ``None`` for the device's last event, and where nothing says when the readings stopped."""
    t = ev.telemetry
    if ev.origin == "gone":
        return None
    if t.status == "measured":
        return None if previous_ms is None else ev.ts_ms - previous_ms
    since = t.last_sample_ms if t.last_sample_ms is not None else t.since_ms
    return None if since is None else ev.ts_ms - since


def gap_ended(ev: AttributionEvent, p: AlertSettings, previous_ms: int | None = None) -> str | None:
    """Why a measured window ends at this event: it shows a gap without readings longer than
    ``reading_gap_s`` (``None``: it does not; ``previous_ms``: :func:`unread_ms`). A reading
    after such a gap starts a new window. Unknown is never idle, inefficient or hot."""
    gap = unread_ms(ev, previous_ms)
    # at the bound already: a node reported silent (stale) after exactly that long ends it
    if gap is None or gap < p.reading_gap_s * 1000:
        return None
    cause = f", {ev.telemetry.cause}" if ev.telemetry.cause else ""
    return f"no reading for {gap / 1000:.0f}s{cause} (a window spans at most {p.reading_gap_s:g}s)"
