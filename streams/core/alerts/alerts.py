"""A device's alerts: pure step functions over attribution events. Idle, XID and orphaned
memory here; in their own modules, stepped from :func:`step` under the same replay rule:
low-efficiency (:mod:`streams.core.alerts.lowefficiency`), the health alerts — thermal,
memory-fault, pcie-replays (:mod:`streams.core.alerts.healthalerts`) —, a shared device's tenant
alerts — idle-tenant, memory-hog (:mod:`streams.core.alerts.tenants`) — and device-unhealthy
(:mod:`streams.core.alerts.unhealthy`).

``step(state, event, policy) -> (state, alerts)``. Event time only: windows run on ``ts_ms``.
The state is one small record per device, assigned back to a changelog-backed table only when
it changes, so a restarted worker neither forgets a pending window nor re-sends a fired alert.

Episodes belong to the holders they started under. An idle episode is one holder set's: when the
holders change, it ends (resolved if it had fired) and a new window starts for the new holders —
nobody is alerted for the time a GPU sat idle under its previous owner. An XID alert fires when
the exporter's last-XID value changes while the device is watched (a value already there at
first sight is history: reported in events, never fired), resolves after a quiet period without
a new XID, and is resolved — never inherited — when the holders change. An XID first seen at
a reading whose interval spans a hand-over (the holders of the previous reading, ``read_by``,
are not this one's) names both the holders before and after. A device that is gone
resolves whatever is open. Events without a reading (``telemetry.status: unknown``) neither
start nor end an idle window, unless they show a gap without readings longer than
``reading_gap_s`` (:func:`streams.core.alerts.episodes.gap_ended`): that ends it, and the next
reading
starts a new one — unknown is never idle.

No alert is lost at any crash point. A state change reaches its changelog and the alert it
caused reaches the alerts topic through different partitions: a worker can die after the first
and before the second. The input is then processed again (its offset was not committed), and
finds the state already changed. So the state remembers the event time of the last change it
applied (``seen_ms``) and the alerts its last few changes caused (``emitted``): an event at or
before ``seen_ms`` is one already applied; it changes nothing and re-emits exactly the alerts it
caused, with the same ids (receivers dedupe on ``<id>:<status>``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from contract.annotations import (
    IDLE_THRESHOLD_PCT,
    IDLE_WINDOW_S,
    LOW_EFF_THRESHOLD_PCT,
    LOW_EFF_WINDOW_S,
    override,
)
from contract.outputs import Alert, AlertFigures, AttributionEvent, Holder
from contract.records import Record, replace
from infra.settings import AlertSettings
from streams.core import replays
from streams.core.alerts.episodes import (
    Episode,
    HolderId,
    alert_id,
    episode_holders,
    fault_holders,
    fault_owners,
    gap_ended,
    handed_over,
    holder_ids,
    ids_of,
    make_alert,
    named,
    same_holders,
    who_of,
)
from streams.core.alerts.healthalerts import HealthAlerts
from streams.core.alerts.healthalerts import step as step_health
from streams.core.alerts.lowefficiency import LowEfficiency
from streams.core.alerts.lowefficiency import step as step_low_efficiency
from streams.core.alerts.tenants import NO_TENANT_ALERTS, TenantAlerts
from streams.core.alerts.tenants import step as step_tenants
from streams.core.alerts.unhealthy import step as step_unhealthy

ANNOTATION_THRESHOLD = IDLE_THRESHOLD_PCT
ANNOTATION_WINDOW = IDLE_WINDOW_S
__all__ = ["DeviceAlerts", "Episode", "HolderId", "alert_id", "holder_ids", "policy_for", "step"]


class Emission(Record, frozen=True):
    """The alerts one event caused, kept so that processing that event again re-emits them."""

    ts_ms: int
    alerts: tuple[Alert, ...]
    gone: bool = False  # caused by the device's last event


class DeviceAlerts(Record, frozen=True):
    idle: Episode | None = None
    idle_resolved_ms: int | None = None
    orphan: Episode | None = None
    orphan_resolved_ms: int | None = None
    last_xid: int | None = None  # the exporter's last-XID value as last seen (the baseline)
    seen_ms: int | None = None  # event time of the last event that changed this state
    emitted: tuple[Emission, ...] = ()  # newest first, at most replays.REMEMBERED
    xid: Episode | None = None  # an open XID alert (additive)
    #: additive: the low-efficiency episode (:mod:`streams.core.alerts.lowefficiency`)
    low_eff: LowEfficiency | None = None
    #: additive: thermal, memory-fault, pcie-replays (:mod:`streams.core.alerts.healthalerts`)
    health: HealthAlerts | None = None
    #: additive: the holders at the device's last reading (written when they change): a fault
    #: the next reading measures over a hand-over names them too (:func:`handed_over`)
    read_by: tuple[Holder, ...] | None = None
    #: additive: a shared device's idle-tenant and memory-hog episodes, per pod
    #: (:mod:`streams.core.alerts.tenants`)
    tenants: TenantAlerts | None = None
    #: additive: an open device-unhealthy episode (:mod:`streams.core.alerts.unhealthy`)
    unhealthy: Episode | None = None


def _step_idle(
    s: DeviceAlerts,
    ev: AttributionEvent,
    p: AlertSettings,
    who: tuple[HolderId, ...],
    gap: str | None,
) -> tuple[DeviceAlerts, list[Alert]]:
    """``who``: the event's :func:`holder_ids`; ``gap``: why a gap without readings ends the
    window at this event (:func:`gap_ended`), or ``None``."""
    util = ev.usage.util_pct if ev.telemetry.status == "measured" else None
    ep = s.idle
    gap = gap if ep is not None else None
    if gap is None and ev.state == "unknown" and ev.origin != "gone":
        return s, []  # holders unknown: neither start nor end an episode
    held = bool(ev.holders) and ev.state != "mig-parent"
    # built only for an alert: most events fire or resolve nothing
    fig = partial(AlertFigures, util_pct=util, util_threshold_pct=p.idle_threshold_pct)
    out: list[Alert] = []
    if ep is not None and (
        gap is not None
        or ev.origin == "gone"
        or not held
        or not same_holders(ep.holders, who)
        or (util is not None and util >= p.idle_threshold_pct + p.idle_hysteresis_pct)
    ):
        if ep.firing:
            if gap is not None:
                why = gap
            elif ev.origin == "gone":
                why = f"the device is gone ({ev.telemetry.reason})"
            elif not held:
                why = "holders left"
            elif not same_holders(ep.holders, who):
                why = "holders changed: the idle time was the previous holders'"
            else:
                why = f"utilization recovered to {util:g}%"
            out.append(
                make_alert(
                    ev,
                    "idle",
                    False,
                    ep.since_ms,
                    fig(),
                    p.idle_window_s,
                    f"resolved: {who_of(ep, ev)}: {why}",
                    holders=episode_holders(ep, ev),
                )
            )
        s = replace(s, idle=None, idle_resolved_ms=ev.ts_ms if ep.firing else s.idle_resolved_ms)
        ep = None
    if ev.origin == "gone" or not held or util is None or util >= p.idle_threshold_pct:
        return s, out  # no reading, busy, or inside the hysteresis band: nothing to start
    if ep is None:
        return replace(s, idle=Episode(ev.ts_ms, holders=who, named=ev.holders)), out
    cooled = s.idle_resolved_ms is None or ev.ts_ms - s.idle_resolved_ms >= p.cooldown_s * 1000
    if not ep.firing and ev.ts_ms - ep.since_ms >= p.idle_window_s * 1000 and cooled:
        minutes = (ev.ts_ms - ep.since_ms) / 60000
        summary = (
            f"idle: {named(ev)} below {p.idle_threshold_pct:g}% utilization for "
            f"{minutes:.1f} min (now {util:g}%)"
        )
        return replace(s, idle=replace(ep, firing=True, holders=who, named=ev.holders)), [
            *out,
            make_alert(ev, "idle", True, ep.since_ms, fig(), p.idle_window_s, summary),
        ]
    return s, out


def _step_orphan(
    s: DeviceAlerts, ev: AttributionEvent, p: AlertSettings
) -> tuple[DeviceAlerts, list[Alert]]:
    used = ev.usage.fb_used_mib if ev.telemetry.status == "measured" else None
    orphaned = ev.state == "unallocated" and used is not None and used >= p.orphan_fb_mib
    procs: tuple[str, ...] = ()
    if ev.per_pod is not None and used is not None and not orphaned:
        procs, procs_mib = _no_pod_processes(ev)
        if procs:
            used = procs_mib  # the figure is what the processes of no pod hold
            orphaned = procs_mib >= p.orphan_fb_mib
    ep = s.orphan
    fig = partial(AlertFigures, fb_used_mib=used, fb_threshold_mib=p.orphan_fb_mib)
    if not orphaned:
        gone = ev.origin == "gone"
        if ep is None or (used is None and not ev.holders and not gone):
            return s, []
        out = []
        if ep.firing:
            if gone:
                why = f"the device is gone ({ev.telemetry.reason})"
            elif ev.holders and ev.per_pod is None:
                why = "a pod holds the device now"
            else:
                why = f"memory freed ({used:g} MiB)"
            out.append(
                make_alert(
                    ev,
                    "orphaned-memory",
                    False,
                    ep.since_ms,
                    fig(),
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
        held_by = (
            f"by process(es) of no pod ({', '.join(procs)})" if procs else "with no pod holding it"
        )
        summary = (
            f"orphaned memory: {used:g} MiB in use on {ev.node} {ev.device_uuid} "
            f"{held_by} for {(ev.ts_ms - ep.since_ms) / 1000:.0f}s"
        )
        return replace(s, orphan=replace(ep, firing=True)), [
            make_alert(ev, "orphaned-memory", True, ep.since_ms, fig(), p.orphan_window_s, summary)
        ]
    return s, []


def _no_pod_processes(ev: AttributionEvent) -> tuple[tuple[str, ...], float]:
    """The device's processes of no pod (per-process readings credited to nobody: zombies,
    containers whose pod is gone), named by PID and container, and the memory they hold."""
    if ev.per_pod is None:
        return (), 0.0
    procs = [r for r in ev.per_pod.uncredited if r.reason == "no-pod" and r.fb_used_mib]
    names = tuple(
        f"pid {r.pid}" + (f" container {r.container_id[:12]}" if r.container_id else "")
        for r in procs
    )
    return names, sum(r.fb_used_mib or 0.0 for r in procs)


def _step_xid(
    s: DeviceAlerts,
    ev: AttributionEvent,
    p: AlertSettings,
    who: tuple[HolderId, ...],
    before: tuple[Holder, ...],
) -> tuple[DeviceAlerts, list[Alert]]:
    """``who``: the event's :func:`holder_ids`; ``before``: the holders before a hand-over since
    the previous reading (:func:`handed_over`), whose XID this may be."""
    out: list[Alert] = []
    ep = s.xid
    xid = ev.usage.xid if ev.telemetry.status == "measured" else None
    if ep is not None:
        why = None
        if ev.origin == "gone":
            why = f"the device is gone ({ev.telemetry.reason})"
        elif ev.state != "unknown" and not same_holders(ep.holders, who):
            why = "holders changed: the XID was the previous holders'"
        elif xid is not None and xid != s.last_xid and xid != 0:
            why = f"superseded by XID {xid}"
        elif ev.ts_ms - ep.since_ms >= p.xid_quiet_s * 1000:
            why = f"no new XID for {p.xid_quiet_s / 60:g} min"
        if why is not None:
            fig = AlertFigures(xid=ep.value)
            summary = (
                f"resolved: XID {ep.value} on {ev.node} {ev.device_uuid} "
                f"(owners: {who_of(ep, ev)}): {why}"
            )
            out.append(
                make_alert(
                    ev, "xid", False, ep.since_ms, fig, None, summary, episode_holders(ep, ev)
                )
            )
            s = replace(s, xid=None)
    if xid is None or xid == s.last_xid:
        return s, out
    first_sight = s.last_xid is None
    s = replace(s, last_xid=xid)
    if xid == 0 or first_sight or ev.origin == "gone":
        # 0: the exporter restarted (the last-XID value reset); at first sight: history, the
        # XID happened before we watched, under holders we cannot name
        return s, out
    summary = f"XID {xid} on {ev.node} {ev.device_uuid}; owners: {fault_owners(ev, before)}"
    fig = AlertFigures(xid=xid)
    alert = make_alert(ev, "xid", True, ev.ts_ms, fig, None, summary, fault_holders(ev, before))
    episode = Episode(ev.ts_ms, True, who, xid, named=ev.holders, before=before)
    return replace(s, xid=episode), [*out, alert]


#: a device's low-efficiency and health alert states before they hold anything (immutable)
_NO_LOW_EFFICIENCY = LowEfficiency()
_NO_HEALTH_ALERTS = HealthAlerts()


def step(
    state: DeviceAlerts | None,
    ev: AttributionEvent,
    policy: AlertSettings,
    previous_ms: int | None = None,
) -> tuple[DeviceAlerts, list[Alert]]:
    """Advance one device's alert state by one attribution event (``previous_ms``: for a
    sample's event, the time of the agent's previous scrape of the device, where known: a gap
    without readings since then longer than ``reading_gap_s`` restarts the windows).

    An event no later than the last change applied (a replay after a crash) changes nothing and
    returns the alerts it caused the first time, if any (see the module docstring)."""
    before = state or DeviceAlerts()
    gone = ev.origin == "gone"
    if before.seen_ms is not None and ev.ts_ms <= before.seen_ms:  # applied already
        replayed = [
            a for e in before.emitted if e.ts_ms == ev.ts_ms and e.gone == gone for a in e.alerts
        ]
        if not gone or replayed:
            # a gone event resolves what is open whatever its time (the partition's clock may
            # be behind the node's), unless it was applied already
            return before, replayed
    who = holder_ids(ev)
    measured = ev.telemetry.status == "measured" and ev.origin != "gone"
    handed = handed_over(before.read_by, ev) if measured else ()
    gap = gap_ended(ev, policy, previous_ms)  # decided once for the idle, low-eff, heat windows
    s, idle = _step_idle(before, ev, policy, who, gap)
    s, orphan = _step_orphan(s, ev, policy)
    s, xid = _step_xid(s, ev, policy, who, handed)
    low_eff_was = s.low_eff or _NO_LOW_EFFICIENCY
    low_eff, low = step_low_efficiency(low_eff_was, ev, policy, gap)
    if low_eff is not low_eff_was and low_eff != low_eff_was:
        s = replace(s, low_eff=low_eff)
    health_was = s.health or _NO_HEALTH_ALERTS
    health, sick = step_health(health_was, ev, policy, handed, gap)
    if health is not health_was and health != health_was:
        s = replace(s, health=health)
    sick_alerts: list[Alert] = []
    if s.unhealthy is not None or ev.health.verdict is not None:  # a source beside DCGM speaks
        unhealthy, sick_alerts = step_unhealthy(s.unhealthy, ev, who)
        if unhealthy is not s.unhealthy:
            s = replace(s, unhealthy=unhealthy)
    tenant_alerts: list[Alert] = []
    if s.tenants is not None or ev.per_pod is not None:  # per-process readings, or open ones
        tenants_were = s.tenants or NO_TENANT_ALERTS
        tenants, tenant_alerts = step_tenants(tenants_were, ev, policy, gap)
        if tenants is not tenants_were:
            s = replace(s, tenants=tenants if tenants != NO_TENANT_ALERTS else None)
    if measured and ev.state != "unknown" and _read_by_moved(s.read_by, who):
        s = replace(s, read_by=ev.holders)
    alerts = [*idle, *orphan, *xid, *low, *sick, *tenant_alerts, *sick_alerts]
    if s is before or s == before:
        return before, alerts  # nothing changed (and so nothing fired): no table write
    if alerts:
        emission = Emission(ev.ts_ms, tuple(alerts), gone)
        s = replace(s, emitted=replays.latest(emission, s.emitted))
    return replace(s, seen_ms=max(ev.ts_ms, before.seen_ms or ev.ts_ms)), alerts


def _read_by_moved(read_by: tuple[Holder, ...] | None, who: tuple[HolderId, ...]) -> bool:
    """The holders of this reading are not the ones remembered (a UID resolved counts)."""
    if read_by is None:
        return True
    return ids_of(read_by) != who


def annotation_value(annotations: dict[str, str], name: str) -> float | None:
    """An override annotation's value, or ``None`` when absent or refused by the contract's rule
    (:func:`contract.annotations.override`): a bad annotation never changes the policy. The
    agent drops such values where they enter (counted); this is the worker's own guard."""
    text = annotations.get(name)
    return None if text is None else override(name, text)


def policy_for(base: AlertSettings, annotations: Sequence[dict[str, str]]) -> AlertSettings:
    """Apply holders' overrides: ``gpuattr.io/idle-threshold-pct`` and
    ``gpuattr.io/idle-window-s`` (idle), ``gpuattr.io/low-efficiency-threshold-pct`` and
    ``gpuattr.io/low-efficiency-window-s`` (low-efficiency). On a shared device the most lenient
    holder wins (the lowest threshold, the longest window): nobody is alerted against the intent
    a tenant declared. An idle threshold raised past the low-efficiency busy band lifts that
    band with it (by the two hysteresis margins): the two alerts never share an episode."""
    if not annotations:
        return base  # no holder declared anything (most devices): nothing to apply
    update: dict[str, float] = {}
    for threshold_name, window_name, threshold_field, window_field in (
        (ANNOTATION_THRESHOLD, ANNOTATION_WINDOW, "idle_threshold_pct", "idle_window_s"),
        (LOW_EFF_THRESHOLD_PCT, LOW_EFF_WINDOW_S, "low_eff_threshold_pct", "low_eff_window_s"),
    ):
        thresholds = [
            v for ann in annotations if (v := annotation_value(ann, threshold_name)) is not None
        ]
        windows = [
            v for ann in annotations if (v := annotation_value(ann, window_name)) is not None
        ]
        if thresholds:
            update[threshold_field] = min(thresholds)
        if windows:
            update[window_field] = max(windows)
    if not update:
        return base
    policy = base.model_copy(update=update)
    floor = policy.idle_threshold_pct + policy.idle_hysteresis_pct + policy.low_eff_hysteresis_pct
    if policy.low_eff_busy_pct < floor:
        policy = policy.model_copy(update={"low_eff_busy_pct": floor})
    return policy
