"""A shared device's tenants, each judged by what the hardware measured for its own processes:
``idle-tenant`` and ``memory-hog``. Pure step functions over attribution events, stepped from
:func:`streams.core.alerts.alerts.step` under its replay rule.

Only a measured figure judges a tenant (``PodShare.measured``: per-process readings credited by
our own join); an allocation share never does, and a tenant without a reading is never idle.

- ``idle-tenant``: a pod holds a slot of a shared device whose tenants work (the device-wide
  utilisation is at or above the idle threshold: below it the device-wide ``idle`` alert speaks
  for every tenant), while its own processes stay under the same idle threshold — or it has no
  process at all — for the idle window. The one idle rule: the device's and a tenant's idle
  compare with the same threshold, window and hysteresis. A MIG instance has no per-process
  utilisation: there a tenant is idle only when it holds no memory.
- ``memory-hog``: one tenant's processes hold at least ``memory_hog_share`` of the device's
  memory while other pods hold slots of it, for ``memory_hog_window_s``. Time-slicing has no
  memory isolation: that tenant's growth is what runs the others out of memory.

Each episode is one pod's (by UID) and ends when the pod stops holding the device, when its
reading goes, or when the condition clears; the state keeps only the pods that hold the device.
"""

from __future__ import annotations

from collections.abc import Callable

from contract.outputs import Alert, AlertFigures, AlertKind, AttributionEvent, Holder, PodShare
from contract.records import Record, replace
from infra.settings import AlertSettings
from streams.core.alerts.episodes import Episode, alert_id, make_alert


class TenantAlerts(Record, frozen=True):
    """The open tenant episodes of one device, by pod UID (sorted)."""

    idle: tuple[tuple[str, Episode], ...] = ()
    hog: tuple[tuple[str, Episode], ...] = ()


NO_TENANT_ALERTS = TenantAlerts()

#: a tenant's state on one event: its figure and whether the condition holds, or ``None``
Judged = tuple[float | None, bool] | None


def step(
    state: TenantAlerts, ev: AttributionEvent, p: AlertSettings, gap: str | None
) -> tuple[TenantAlerts, list[Alert]]:
    """Advance the device's tenant episodes by one event (``gap``: why a gap without readings
    ends every window here, or ``None``)."""
    if not state.idle and not state.hog and (ev.per_pod is None or ev.tenant_count < 2):
        return state, []  # nothing open, nothing to judge: most events
    tenants = {p.uid: p for p in ev.pods if p.uid} if ev.origin != "gone" else {}
    measured = ev.telemetry.status == "measured"
    idle, idle_alerts = _step_kind(
        state.idle,
        ev,
        tenants,
        gap,
        "idle-tenant",
        p.idle_window_s,
        lambda pod, firing: _idle(ev, pod, p, firing) if measured else None,
        p,
    )
    hog, hog_alerts = _step_kind(
        state.hog,
        ev,
        tenants,
        gap,
        "memory-hog",
        p.memory_hog_window_s,
        lambda pod, firing: _hog(ev, pod, p) if measured else None,
        p,
    )
    new = TenantAlerts(idle, hog)
    return (state if new == state else new), [*idle_alerts, *hog_alerts]


def _idle(ev: AttributionEvent, pod: PodShare, p: AlertSettings, firing: bool) -> Judged:
    """A tenant's own utilisation and whether it is idle while the device works (a firing
    episode clears only above the threshold plus the hysteresis, as the device's idle does)."""
    m, device = pod.measured, ev.usage.util_pct
    if m is None or device is None or ev.tenant_count < 2:
        return None
    if device < p.idle_threshold_pct:
        return None  # the device is idle as a whole: the device-wide idle alert speaks
    if m.sm_util_pct is None:  # a MIG instance: idle only without memory
        return (None, m.fb_used_mib == 0) if m.fb_used_mib is not None else None
    bound = p.idle_threshold_pct + (p.idle_hysteresis_pct if firing else 0.0)
    return m.sm_util_pct, m.sm_util_pct < bound


def _hog(ev: AttributionEvent, pod: PodShare, p: AlertSettings) -> Judged:
    """A tenant's memory and whether it holds the hog share of the device's while others hold
    slots."""
    m, used, free = pod.measured, ev.usage.fb_used_mib, ev.usage.fb_free_mib
    if m is None or m.fb_used_mib is None or used is None or free is None or used + free <= 0:
        return None
    return m.fb_used_mib, ev.tenant_count > 1 and m.fb_used_mib >= p.memory_hog_share * (
        used + free
    )


def _step_kind(
    open_: tuple[tuple[str, Episode], ...],
    ev: AttributionEvent,
    tenants: dict[str, PodShare],
    gap: str | None,
    kind: AlertKind,
    window_s: float,
    judge: Callable[[PodShare, bool], Judged],
    p: AlertSettings,
) -> tuple[tuple[tuple[str, Episode], ...], list[Alert]]:
    episodes = dict(open_)
    out: list[Alert] = []
    for uid in sorted(episodes.keys() | tenants.keys()):
        ep, pod = episodes.get(uid), tenants.get(uid)
        judged = judge(pod, ep is not None and ep.firing) if pod is not None else None
        holds = judged is not None and judged[1] and gap is None
        if ep is not None and not holds:
            if ep.firing:
                why = _why_ended(ev, kind, pod, judged, gap)
                out.append(_alert(ev, kind, False, ep, uid, pod, judged, window_s, p, why))
            del episodes[uid]
            ep = None
        if not holds or pod is None:
            continue
        if ep is None:
            episodes[uid] = Episode(ev.ts_ms, named=_holders(ev, uid))
        elif not ep.firing and ev.ts_ms - ep.since_ms >= window_s * 1000:
            episodes[uid] = replace(ep, firing=True)
            out.append(_alert(ev, kind, True, ep, uid, pod, judged, window_s, p, ""))
    return tuple(sorted(episodes.items())), out


def _why_ended(
    ev: AttributionEvent, kind: AlertKind, pod: PodShare | None, judged: Judged, gap: str | None
) -> str:
    if gap is not None:
        return gap
    if ev.origin == "gone":
        return f"the device is gone ({ev.telemetry.reason})"
    if pod is None:
        return "the pod no longer holds the device"
    if judged is None:
        return "no per-process reading of it now"
    if judged[0] is None:
        return "recovered"
    return f"now {judged[0]:g}" + (" MiB" if kind == "memory-hog" else "% SM")


def _holders(ev: AttributionEvent, uid: str) -> tuple[Holder, ...]:
    return tuple(h for h in ev.holders if h.uid == uid)


def _alert(
    ev: AttributionEvent,
    kind: AlertKind,
    firing: bool,
    ep: Episode,
    uid: str,
    pod: PodShare | None,
    judged: Judged,
    window_s: float,
    p: AlertSettings,
    why: str,
) -> Alert:
    """The tenant's alert: its own holders, its own figures (``device_wide`` false), an id of
    its own on the device. A resolution may come with nothing measured (the pod or the device
    gone): it then names the pod as the episode last saw it, with no figure."""
    figure = judged[0] if judged is not None else None
    holders = _holders(ev, uid) or ep.named
    named = holders[0] if holders else None
    who = (
        f"{pod.namespace}/{pod.pod}"
        if pod is not None
        else f"{named.namespace}/{named.pod}"
        if named is not None
        else f"pod uid {uid}"
    )
    total = (ev.usage.fb_used_mib or 0) + (ev.usage.fb_free_mib or 0)
    if kind == "idle-tenant":
        figures = AlertFigures(
            util_pct=figure,
            util_threshold_pct=p.idle_threshold_pct,
            fb_used_mib=pod.measured.fb_used_mib if pod and pod.measured else None,
        )
    else:
        threshold = round(p.memory_hog_share * total, 1) if total > 0 else None
        figures = AlertFigures(fb_used_mib=figure, fb_threshold_mib=threshold)
    if firing:
        summary = _firing_summary(ev, kind, ep, who, figure, total, p)
    else:
        summary = f"resolved: {who} on {ev.device_uuid}: {why}"
    alert = make_alert(ev, kind, firing, ep.since_ms, figures, window_s, summary, holders)
    return replace(
        alert,
        id=alert_id(kind, ev.node, f"{ev.device_uuid}|{uid}", ep.since_ms),
        device_wide=False,
    )


def _firing_summary(
    ev: AttributionEvent,
    kind: AlertKind,
    ep: Episode,
    who: str,
    figure: float | None,
    total: float,
    p: AlertSettings,
) -> str:
    """What a firing alert says: only ever made from a measured event (the judge gave figures)."""
    if kind == "idle-tenant":
        device = "n/a" if ev.usage.util_pct is None else f"{ev.usage.util_pct:g}%"
        return (
            f"idle tenant: {who} holds a slot of shared {ev.device_uuid} while its tenants "
            f"work (device-wide {device}), its own processes under "
            f"{p.idle_threshold_pct:g}% SM for {(ev.ts_ms - ep.since_ms) / 60000:.1f} min"
        )
    held = "n/a" if figure is None else f"{figure:g}"
    return (
        f"memory hog: {who} holds {held} MiB of shared {ev.device_uuid}'s {total:g} MiB "
        f"(at least {p.memory_hog_share:.0%}) while {ev.tenant_count - 1} other pod(s) hold "
        "slots: time-slicing has no memory isolation"
    )
