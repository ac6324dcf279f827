"""Idle, XID and orphaned-memory alerts: pure step functions over attribution events.

``step(state, event, policy) -> (state, alerts)``. Event time only: windows run on ``ts_ms``.
The state is one small record per device, assigned back to a changelog-backed table only when
it changes, so a restarted worker neither forgets a pending window nor re-sends a fired alert.

No alert is lost at any crash point. A state change reaches its changelog and the alert it
caused reaches the alerts topic through different partitions: a worker can die after the first
and before the second. The input is then processed again (its offset was not committed), and
finds the state already changed. So the state remembers the event time of the last change it
applied (``seen_ms``) and the alerts its last few changes caused (``emitted``): an event at or
before ``seen_ms`` is one already applied; it changes nothing and re-emits exactly the alerts it
caused, with the same ids (receivers dedupe on ``<id>:<status>``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from contract.outputs import Alert, AlertFigures, AlertKind, AttributionEvent
from infra.settings import AlertSettings

ANNOTATION_THRESHOLD = "gpuattr.io/idle-threshold-pct"
ANNOTATION_WINDOW = "gpuattr.io/idle-window-s"


@dataclass(frozen=True, slots=True)
class Episode:
    """One pending-or-firing condition: when it began and whether it has fired."""

    since_ms: int
    firing: bool = False


#: emissions remembered per device: more than the alert transitions one device can have between
#: two commits of its partition (a commit every few seconds; windows and cool-downs are minutes)
EMITTED_MAX = 4


@dataclass(frozen=True, slots=True)
class Emission:
    """The alerts one event caused, kept so that processing that event again re-emits them."""

    ts_ms: int
    alerts: tuple[Alert, ...]


@dataclass(frozen=True, slots=True)
class DeviceAlerts:
    idle: Episode | None = None
    idle_resolved_ms: int | None = None
    orphan: Episode | None = None
    orphan_resolved_ms: int | None = None
    last_xid: int | None = None
    seen_ms: int | None = None  # event time of the last event that changed this state
    emitted: tuple[Emission, ...] = ()  # newest first, at most EMITTED_MAX


def alert_id(kind: AlertKind, node: str, device: str, since_ms: int) -> str:
    digest = hashlib.sha256(f"{kind}|{node}|{device}|{since_ms}".encode()).hexdigest()[:24]
    return f"{kind}-{digest}"


def _alert(
    ev: AttributionEvent,
    kind: AlertKind,
    firing: bool,
    since_ms: int,
    figures: AlertFigures,
    window_s: float | None,
    summary: str,
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
        holders=ev.holders,
        figures=figures,
        window_s=window_s,
        started_ms=since_ms,
        ts_ms=ev.ts_ms,
        device_wide=ev.tenant_count > 1,
        summary=summary,
    )


def _who(ev: AttributionEvent) -> str:
    pods = sorted({f"{h.namespace}/{h.pod}" for h in ev.holders})
    if len(pods) > 1:
        return (
            f"{len(pods)} tenants ({', '.join(pods)}) sharing {ev.device_uuid} (device-wide figure)"
        )
    return f"{pods[0] if pods else 'nobody'} on {ev.device_uuid}"


def _step_idle(
    s: DeviceAlerts, ev: AttributionEvent, p: AlertSettings
) -> tuple[DeviceAlerts, list[Alert]]:
    util = ev.usage.util_pct
    if ev.state == "unknown":
        return s, []  # no PodResources view yet: neither start nor end an episode
    held = bool(ev.holders) and ev.state != "mig-parent"
    ep = s.idle
    fig = AlertFigures(util_pct=util, util_threshold_pct=p.idle_threshold_pct)
    if not held or (util is not None and util >= p.idle_threshold_pct + p.idle_hysteresis_pct):
        if ep is None:
            return s, []
        out = []
        if ep.firing:
            why = "holders left" if not held else f"utilization recovered to {util:g}%"
            out.append(
                _alert(
                    ev,
                    "idle",
                    False,
                    ep.since_ms,
                    fig,
                    p.idle_window_s,
                    f"resolved: {_who(ev)}: {why}",
                )
            )
        return replace(
            s, idle=None, idle_resolved_ms=ev.ts_ms if ep.firing else s.idle_resolved_ms
        ), out
    if util is None or util >= p.idle_threshold_pct:
        return s, []  # no reading, or inside the hysteresis band: keep whatever we have
    if ep is None:
        return replace(s, idle=Episode(ev.ts_ms)), []
    cooled = s.idle_resolved_ms is None or ev.ts_ms - s.idle_resolved_ms >= p.cooldown_s * 1000
    if not ep.firing and ev.ts_ms - ep.since_ms >= p.idle_window_s * 1000 and cooled:
        minutes = (ev.ts_ms - ep.since_ms) / 60000
        summary = (
            f"idle: {_who(ev)} below {p.idle_threshold_pct:g}% utilization for "
            f"{minutes:.1f} min (now {util:g}%)"
        )
        return replace(s, idle=replace(ep, firing=True)), [
            _alert(ev, "idle", True, ep.since_ms, fig, p.idle_window_s, summary)
        ]
    return s, []


def _step_orphan(
    s: DeviceAlerts, ev: AttributionEvent, p: AlertSettings
) -> tuple[DeviceAlerts, list[Alert]]:
    used = ev.usage.fb_used_mib
    orphaned = ev.state == "unallocated" and used is not None and used >= p.orphan_fb_mib
    ep = s.orphan
    fig = AlertFigures(fb_used_mib=used, fb_threshold_mib=p.orphan_fb_mib)
    if not orphaned:
        if ep is None or (used is None and not ev.holders):
            return s, []
        out = []
        if ep.firing:
            why = "a pod holds the device now" if ev.holders else f"memory freed ({used:g} MiB)"
            out.append(
                _alert(
                    ev,
                    "orphaned-memory",
                    False,
                    ep.since_ms,
                    fig,
                    p.orphan_window_s,
                    f"resolved: {ev.device_uuid}: {why}",
                )
            )
        return replace(
            s, orphan=None, orphan_resolved_ms=ev.ts_ms if ep.firing else s.orphan_resolved_ms
        ), out
    if ep is None:
        return replace(s, orphan=Episode(ev.ts_ms)), []
    if not ep.firing and ev.ts_ms - ep.since_ms >= p.orphan_window_s * 1000:
        summary = (
            f"orphaned memory: {used:g} MiB in use on {ev.node} {ev.device_uuid} "
            f"with no pod holding it for {(ev.ts_ms - ep.since_ms) / 1000:.0f}s"
        )
        return replace(s, orphan=replace(ep, firing=True)), [
            _alert(ev, "orphaned-memory", True, ep.since_ms, fig, p.orphan_window_s, summary)
        ]
    return s, []


def _step_xid(s: DeviceAlerts, ev: AttributionEvent) -> tuple[DeviceAlerts, list[Alert]]:
    xid = ev.usage.xid
    if xid is None or xid == s.last_xid:
        return s, []
    new = replace(s, last_xid=xid)
    if xid == 0:
        return new, []  # the exporter restarted: the last-XID value reset
    summary = f"XID {xid} on {ev.node} {ev.device_uuid}; owners: {_who(ev)}"
    return new, [_alert(ev, "xid", True, ev.ts_ms, AlertFigures(xid=xid), None, summary)]


def step(
    state: DeviceAlerts | None, ev: AttributionEvent, policy: AlertSettings
) -> tuple[DeviceAlerts, list[Alert]]:
    """Advance one device's alert state by one attribution event.

    An event no later than the last change applied (a replay after a crash) changes nothing and
    returns the alerts it caused the first time, if any (see the module docstring)."""
    before = state or DeviceAlerts()
    if before.seen_ms is not None and ev.ts_ms <= before.seen_ms:
        return before, [a for e in before.emitted if e.ts_ms == ev.ts_ms for a in e.alerts]
    s, idle = _step_idle(before, ev, policy)
    s, orphan = _step_orphan(s, ev, policy)
    s, xid = _step_xid(s, ev)
    alerts = [*idle, *orphan, *xid]
    if s == before:
        return before, alerts  # nothing changed (and so nothing fired): no table write
    if alerts:
        s = replace(s, emitted=(Emission(ev.ts_ms, tuple(alerts)), *s.emitted)[:EMITTED_MAX])
    return replace(s, seen_ms=ev.ts_ms), alerts


def policy_for(base: AlertSettings, annotations: list[dict[str, str]]) -> AlertSettings:
    """Apply holders' idle overrides (pod annotations ``gpuattr.io/idle-threshold-pct`` and
    ``gpuattr.io/idle-window-s``). On a shared device the most lenient holder wins: nobody is
    alerted against the intent a tenant declared."""
    thresholds, windows = [], []
    for ann in annotations:
        try:
            if ANNOTATION_THRESHOLD in ann:
                thresholds.append(float(ann[ANNOTATION_THRESHOLD]))
            if ANNOTATION_WINDOW in ann:
                windows.append(float(ann[ANNOTATION_WINDOW]))
        except ValueError:
            continue  # a malformed annotation does not change the policy
    if not thresholds and not windows:
        return base
    return base.model_copy(
        update={
            "idle_threshold_pct": min(thresholds, default=base.idle_threshold_pct),
            "idle_window_s": max(windows, default=base.idle_window_s),
        }
    )
