"""The ``low-efficiency`` alert: a held GPU that looks fully used and is not. Pure.

A held device busy (``activity.busy_pct``, GPU_UTIL: any kernel running) at or over
``low_eff_busy_pct`` while its effective activity (SM active, else graphics-engine active) stays
under ``low_eff_threshold_pct`` for ``low_eff_window_s`` fires, naming every holder (on a shared
device the figures are the device's: every tenant is named, nobody is singled out). The episode
ends when effective rises to threshold + hysteresis or busy falls under busy - hysteresis
(resolved if it had fired), when the holders change (the new holders start their own window:
never inherited), or when the device is gone. A cool-down (``cooldown_s``) after a resolution
holds the next firing back, as for idle.

An event whose effective activity is unknown (no profiling field exported, no reading) neither
starts an episode nor ends one by its effective figure: busy alone says nothing of efficiency.
Busy falling out of the band does end it, whatever effective says: that is the idle alert's
ground. An event that shows a gap without readings longer than ``reading_gap_s`` ends it
(:func:`streams.core.alerts.episodes.gap_ended`). The idle alert's band (busy under its threshold +
hysteresis) is below this one's (busy - hysteresis; the settings' validator and
:func:`streams.core.alerts.alerts.policy_for` keep it so), so on any reading at most one of the two
has an episode open: they never describe the same episode.
"""

from __future__ import annotations

from functools import partial

from contract.outputs import Alert, AlertFigures, AttributionEvent
from contract.records import Record
from infra.settings import AlertSettings
from streams.core.alerts.episodes import (
    Episode,
    episode_holders,
    gone_reason,
    holder_ids,
    make_alert,
    named,
    same_holders,
    who_of,
)


class LowEfficiency(Record, frozen=True):
    """One device's low-efficiency state: the episode under way, and when the last fired one
    resolved (the cool-down runs from there)."""

    episode: Episode | None = None
    resolved_ms: int | None = None


def _figures(
    busy: float | None, eff: float | None, ev: AttributionEvent, p: AlertSettings
) -> AlertFigures:
    return AlertFigures(
        util_pct=busy,
        busy_threshold_pct=p.low_eff_busy_pct,
        effective_pct=eff,
        effective_threshold_pct=p.low_eff_threshold_pct,
        effective_source=ev.activity.effective_source,
    )


def _ended(
    ep: Episode,
    ev: AttributionEvent,
    held: bool,
    busy: float | None,
    eff: float | None,
    p: AlertSettings,
    gap: str | None,
) -> str | None:
    """Why the episode ends at this event, or ``None``."""
    if ev.origin == "gone":
        return gone_reason(ev)
    if gap is not None:
        return gap
    if not held:
        return "holders left"
    if not same_holders(ep.holders, holder_ids(ev)):
        return "holders changed: the low-efficiency time was the previous holders'"
    if busy is not None and busy < p.low_eff_busy_pct - p.low_eff_hysteresis_pct:
        return f"busy fell to {busy:g}%"  # the idle alert's ground, whatever effective says
    if eff is not None and eff >= p.low_eff_threshold_pct + p.low_eff_hysteresis_pct:
        return f"effective activity recovered to {eff:g}%"
    return None  # effective unknown says nothing either way


def step(
    s: LowEfficiency, ev: AttributionEvent, p: AlertSettings, gap: str | None = None
) -> tuple[LowEfficiency, list[Alert]]:
    """Advance one device's low-efficiency state by one attribution event (``gap``: why a gap
    without readings ends the window here, :func:`streams.core.alerts.episodes.gap_ended`)."""
    if ev.state == "unknown" and ev.origin != "gone" and (s.episode is None or gap is None):
        return s, []  # holders unknown: neither start nor end an episode (but a gap ends it)
    measured = ev.telemetry.status == "measured"
    busy = ev.activity.busy_pct if measured else None
    eff = ev.activity.effective_pct if measured else None
    held = bool(ev.holders) and ev.state != "mig-parent"
    fig = partial(_figures, busy, eff, ev, p)  # built only for an alert
    out: list[Alert] = []
    ep = s.episode
    if ep is not None and (why := _ended(ep, ev, held, busy, eff, p, gap)) is not None:
        if ep.firing:
            summary = f"resolved: low efficiency: {who_of(ep, ev)}: {why}"
            out.append(
                make_alert(
                    ev,
                    "low-efficiency",
                    False,
                    ep.since_ms,
                    fig(),
                    p.low_eff_window_s,
                    summary,
                    holders=episode_holders(ep, ev),
                )
            )
        s = LowEfficiency(None, ev.ts_ms if ep.firing else s.resolved_ms)
        ep = None
    if (
        ev.origin == "gone"
        or not held
        or busy is None
        or eff is None
        or busy < p.low_eff_busy_pct
        or eff >= p.low_eff_threshold_pct
    ):
        return s, out  # no reading, effective, or inside a hysteresis band: nothing to start
    if ep is None:
        started = Episode(ev.ts_ms, holders=holder_ids(ev), named=ev.holders)
        return LowEfficiency(started, s.resolved_ms), out
    cooled = s.resolved_ms is None or ev.ts_ms - s.resolved_ms >= p.cooldown_s * 1000
    if not ep.firing and ev.ts_ms - ep.since_ms >= p.low_eff_window_s * 1000 and cooled:
        minutes = (ev.ts_ms - ep.since_ms) / 60000
        source = ev.activity.effective_source or "effective"
        summary = (
            f"low efficiency: {named(ev)} busy {busy:g}% (GPU_UTIL) but effective activity "
            f"{eff:g}% ({source}), under {p.low_eff_threshold_pct:g}% for {minutes:.1f} min"
        )
        fired = Episode(ep.since_ms, True, holder_ids(ev), named=ev.holders)
        return LowEfficiency(fired, s.resolved_ms), [
            *out,
            make_alert(ev, "low-efficiency", True, ep.since_ms, fig(), p.low_eff_window_s, summary),
        ]
    return s, out
