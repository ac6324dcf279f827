"""``device-unhealthy``: a held device that a source says is unhealthy, sent to its owners. Pure
step function over attribution events, stepped from :func:`streams.core.alerts.alerts.step`
under its replay rule.

It reads the event's health verdict (:mod:`streams.core.devices.healthsources`): the kubelet's
word in a holder's pod status, a taint on its DRA device, DCGM's memory faults. One episode per
device and holder set, whichever sources say it — two sources seeing one failure fire once —
and it fires at once: a sick GPU needs no window. It names every holder with its UID and
workload, each source that says unhealthy with its own message, and what a ``NoExecute`` taint
does (the holders will be evicted). It resolves when no source says unhealthy any more and one
says healthy (or none speaks for the device now), when the device is released or handed to
other holders (never inherited), or when it is gone. Events whose holders are unknown neither
open nor close it.
"""

from __future__ import annotations

from contract.outputs import Alert, AlertFigures, AttributionEvent, HealthSaid
from streams.core.alerts.episodes import (
    Episode,
    HolderId,
    episode_holders,
    make_alert,
    same_holders,
    who_of,
)


def step(
    ep: Episode | None, ev: AttributionEvent, who: tuple[HolderId, ...]
) -> tuple[Episode | None, list[Alert]]:
    """Advance the device's episode by one event (``who``: the event's holder ids)."""
    health = ev.health
    if ep is None and health.verdict != "unhealthy":
        return None, []  # nothing open, nothing to open: most events
    if ev.state == "unknown" and ev.origin != "gone":
        return ep, []  # holders unknown: neither open nor close
    sick = tuple(w for w in health.sources if w.state == "unhealthy")
    held = bool(ev.holders) and ev.state != "mig-parent"
    out: list[Alert] = []
    if ep is not None:
        why = _ended(ev, ep, who, sick, held)
        if why is None:
            return ep, []
        figures = AlertFigures(health=health.sources)
        summary = f"resolved: {ev.device_uuid} on {ev.node} ({who_of(ep, ev)}): {why}"
        holders = episode_holders(ep, ev) or ep.named
        out.append(
            make_alert(ev, "device-unhealthy", False, ep.since_ms, figures, None, summary, holders)
        )
        ep = None
    if not sick or not held or ev.origin == "gone":
        return ep, out
    opened = Episode(ev.ts_ms, True, who, named=ev.holders)
    figures = AlertFigures(health=health.sources)
    alert = make_alert(ev, "device-unhealthy", True, ev.ts_ms, figures, None, _says(ev, sick))
    return opened, [*out, alert]


def _ended(
    ev: AttributionEvent,
    ep: Episode,
    who: tuple[HolderId, ...],
    sick: tuple[HealthSaid, ...],
    held: bool,
) -> str | None:
    """Why the open episode ends at this event, or ``None``."""
    if ev.origin == "gone":
        return f"the device is gone ({ev.telemetry.reason})"
    if not held:
        return "the device was released"
    if not same_holders(ep.holders, who):
        return "holders changed: the failure was the previous holders'"
    if sick:
        return None
    if ev.health.verdict in ("healthy", None):
        said = [w for w in ev.health.sources if w.state == "healthy" and w.source != "dcgm"]
        return "healthy again" + (f" ({_sources(said)})" if said else "")
    return None  # nothing says healthy yet: still open


def _says(ev: AttributionEvent, sick: tuple[HealthSaid, ...]) -> str:
    holders = sorted(
        {
            f"{h.namespace}/{h.pod} (uid {h.uid or h.uid_status}"
            + (f", {h.workload.kind}/{h.workload.name}" if h.workload else "")
            + ")"
            for h in ev.holders
        }
    )
    evicts = any(w.effect == "NoExecute" for w in sick)
    effect = "; a NoExecute taint: the holders will be evicted" if evicts else ""
    return (
        f"device unhealthy: {ev.device_uuid} on {ev.node}, held by {', '.join(holders)}: "
        f"{_sources(sick)}{effect}"
    )


def _sources(words: list[HealthSaid] | tuple[HealthSaid, ...]) -> str:
    return "; ".join(
        f"{w.source}" + (f" in {w.holder}'s status" if w.holder else "") + f": {w.detail}"
        for w in words
    )
