"""Health alerts, joined to the device's holders at the time: ``thermal``, ``memory-fault`` and
``pcie-replays``. Pure.

- ``thermal``: GPU temperature at or over ``thermal_gpu_temp_c``, memory temperature at or over
  ``thermal_memory_temp_c`` or thermal throttling at or over ``thermal_throttle_pct`` of the
  interval, sustained for ``thermal_window_s``, fires; it resolves when every figure is back
  under its threshold (temperatures by ``thermal_hysteresis_c``). Between the two it neither
  fires nor ends.
- ``memory-fault`` fires on a change while watched: uncorrectable remapped rows or double-bit
  ECC errors rising, or row remapping failure turning true (true at first sight is history,
  like an XID already there). A new rise keeps it open; it resolves after ``health_quiet_s``
  without one.
- ``pcie-replays``: replays at or over ``pcie_replays_per_min`` fire; it resolves after
  ``health_quiet_s`` under that rate.

Each belongs to the holders it fired under: when they change it is resolved, never inherited
(the new holders start their own window); a device gone resolves all three. A memory fault or
PCIe replays measured over a scrape interval that spans a hand-over names the holders before and
after it (:func:`streams.core.alerts.episodes.handed_over`). An event that shows a gap without
readings
longer than ``reading_gap_s`` ends the thermal window
(:func:`streams.core.alerts.episodes.gap_ended`,
decided by the caller). An increase that is not known — the agent's first scrape, a counter
that reset (``health.counter_resets``) — is never a rise: an exporter restart fires nothing.
Events without a reading, or whose holders are unknown, change nothing (but a gap's end). State
changes only on a transition, a rise, or a remap-failure flip: a healthy device in steady state
writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from contract.outputs import Alert, AlertFigures, AlertKind, AttributionEvent, Health, Holder
from contract.records import Record, replace
from infra.settings import AlertSettings
from streams.core.alerts.episodes import (
    Episode,
    episode_holders,
    fault_holders,
    fault_owners,
    gone_reason,
    holder_ids,
    make_alert,
    named,
    same_holders,
    who_of,
)


class HealthAlerts(Record, frozen=True):
    """One device's health episodes, and the row-remap-failure flag as last seen (the baseline
    a change is judged against)."""

    thermal: Episode | None = None
    memory_fault: Episode | None = None
    pcie: Episode | None = None
    remap_failed: bool | None = None


def _ends(ep: Episode, ev: AttributionEvent, what: str) -> str | None:
    """Why an episode ends whatever the figures: the device is gone, or its holders changed."""
    if ev.origin == "gone":
        return gone_reason(ev)
    if not same_holders(ep.holders, holder_ids(ev)):
        return f"holders changed: the {what} was the previous holders'"
    return None


def _resolved(
    ev: AttributionEvent,
    kind: AlertKind,
    ep: Episode,
    fig: Callable[[], AlertFigures],
    window_s: float | None,
    what: str,
    why: str,
) -> list[Alert]:
    """``fig`` builds the alert's figures: only an alert needs them."""
    if not ep.firing:
        return []
    summary = f"resolved: {what} on {ev.node} {ev.device_uuid} (owners: {who_of(ep, ev)}): {why}"
    return [
        make_alert(ev, kind, False, ep.since_ms, fig(), window_s, summary, episode_holders(ep, ev))
    ]


# --- thermal


def _thermal_figures(h: Health | None, p: AlertSettings) -> AlertFigures:
    h = h or Health()
    gpu_hot = h.gpu_temp_c is not None and h.gpu_temp_c >= p.thermal_gpu_temp_c
    mem_hot = h.memory_temp_c is not None and h.memory_temp_c >= p.thermal_memory_temp_c
    threshold = p.thermal_memory_temp_c if mem_hot and not gpu_hot else p.thermal_gpu_temp_c
    return AlertFigures(
        gpu_temp_c=h.gpu_temp_c,
        memory_temp_c=h.memory_temp_c,
        temp_threshold_c=threshold,
        thermal_throttle_pct=h.thermal_throttle_pct,
    )


def _over(h: Health, p: AlertSettings) -> list[str]:
    """The figures at or over their thresholds, described."""
    out = []
    if h.gpu_temp_c is not None and h.gpu_temp_c >= p.thermal_gpu_temp_c:
        out.append(f"GPU {h.gpu_temp_c:g} °C (threshold {p.thermal_gpu_temp_c:g})")
    if h.memory_temp_c is not None and h.memory_temp_c >= p.thermal_memory_temp_c:
        out.append(f"memory {h.memory_temp_c:g} °C (threshold {p.thermal_memory_temp_c:g})")
    if h.thermal_throttle_pct is not None and h.thermal_throttle_pct >= p.thermal_throttle_pct:
        out.append(
            f"thermal throttling {h.thermal_throttle_pct:g}% of the time "
            f"(threshold {p.thermal_throttle_pct:g}%)"
        )
    return out


def _clear(h: Health, p: AlertSettings) -> bool:
    """Every figure known back under its threshold (temperatures by the hysteresis); at least
    one figure known."""
    figures = (h.gpu_temp_c, h.memory_temp_c, h.thermal_throttle_pct)
    if all(f is None for f in figures):
        return False
    return (
        (h.gpu_temp_c is None or h.gpu_temp_c < p.thermal_gpu_temp_c - p.thermal_hysteresis_c)
        and (
            h.memory_temp_c is None
            or h.memory_temp_c < p.thermal_memory_temp_c - p.thermal_hysteresis_c
        )
        and (h.thermal_throttle_pct is None or h.thermal_throttle_pct < p.thermal_throttle_pct)
    )


def _step_thermal(
    ep: Episode | None, ev: AttributionEvent, h: Health | None, p: AlertSettings, gap: str | None
) -> tuple[Episode | None, list[Alert]]:
    fig = partial(_thermal_figures, h, p)  # built only for an alert
    out: list[Alert] = []
    if ep is not None:
        why = _ends(ep, ev, "heat") or gap
        if why is None and h is not None and _clear(h, p):
            why = "every figure back under its threshold"
        if why is not None:
            out += _resolved(ev, "thermal", ep, fig, p.thermal_window_s, "thermal", why)
            ep = None
    over = _over(h, p) if h is not None and ev.origin != "gone" else []
    if not over:
        return ep, out  # no reading, cool, or inside the hysteresis band
    if ep is None:
        return Episode(ev.ts_ms, holders=holder_ids(ev), named=ev.holders), out
    if not ep.firing and ev.ts_ms - ep.since_ms >= p.thermal_window_s * 1000:
        minutes = (ev.ts_ms - ep.since_ms) / 60000
        summary = (
            f"thermal: {', '.join(over)} on {ev.node} {ev.device_uuid} for {minutes:.1f} min; "
            f"owners: {named(ev)}"
        )
        alert = make_alert(ev, "thermal", True, ep.since_ms, fig(), p.thermal_window_s, summary)
        return replace(ep, firing=True), [*out, alert]
    return ep, out


# --- memory faults and PCIe replays: fire on a rise, resolve after a quiet period


def _quiet_episode(
    ep: Episode | None,
    ev: AttributionEvent,
    rise: str | None,
    kind: AlertKind,
    fig: Callable[[], AlertFigures],
    p: AlertSettings,
    what: str,
    before: tuple[Holder, ...] = (),
) -> tuple[Episode | None, list[Alert]]:
    """One rise-driven episode: ``rise`` describes this event's rise (``None``: none);
    ``before``: the holders before a hand-over the rise's interval spans."""
    out: list[Alert] = []
    if ep is not None:
        why = _ends(ep, ev, what)
        if why is None and rise is not None:
            return replace(ep, last_ms=ev.ts_ms), []  # still rising: stays open
        last = ep.last_ms if ep.last_ms is not None else ep.since_ms
        if why is None and ev.ts_ms - last >= p.health_quiet_s * 1000:
            why = f"no new {what} for {p.health_quiet_s / 60:g} min"
        if why is None:
            return ep, []
        out += _resolved(ev, kind, ep, fig, None, what, why)
        ep = None
    if rise is None or ev.origin == "gone":
        return ep, out
    owners = fault_owners(ev, before)
    summary = f"{what}: {rise} on {ev.node} {ev.device_uuid}; owners: {owners}"
    alert = make_alert(ev, kind, True, ev.ts_ms, fig(), None, summary, fault_holders(ev, before))
    opened = Episode(ev.ts_ms, True, holder_ids(ev), last_ms=ev.ts_ms, named=ev.holders)
    return replace(opened, before=before) if before else opened, [*out, alert]


def _memory_rise(h: Health, was_failed: bool | None) -> str | None:
    rises = []
    if (
        h.uncorrectable_remapped_rows_increase is not None
        and h.uncorrectable_remapped_rows_increase > 0
    ):
        total = h.uncorrectable_remapped_rows
        rises.append(
            f"uncorrectable remapped rows +{h.uncorrectable_remapped_rows_increase:g}"
            + (f" (now {total:g})" if total is not None else "")
        )
    if h.ecc_dbe_increase is not None and h.ecc_dbe_increase > 0:
        rises.append(f"double-bit ECC errors +{h.ecc_dbe_increase:g}")
    if h.row_remap_failure and was_failed is False:
        rises.append("row remapping failed")
    return ", ".join(rises) or None


def _pcie_rise(h: Health, p: AlertSettings) -> str | None:
    rate = h.pcie_replays_per_min
    if rate is None or rate < p.pcie_replays_per_min:
        return None
    return f"PCIe replays at {rate:g}/min (threshold {p.pcie_replays_per_min:g}/min)"


def _calm(h: Health | None, s: HealthAlerts, p: AlertSettings) -> bool:
    """The reading opens no episode and moves no remembered figure: no heat over a threshold,
    no memory fault or PCIe replays rising, the row-remap failure flag as remembered (or no
    reading at all)."""
    if h is None:
        return True
    failed = h.row_remap_failure
    return (
        (failed is None or failed == s.remap_failed)
        and not _over(h, p)
        and _memory_rise(h, s.remap_failed) is None
        and _pcie_rise(h, p) is None
    )


def step(
    s: HealthAlerts,
    ev: AttributionEvent,
    p: AlertSettings,
    before: tuple[Holder, ...] = (),
    gap: str | None = None,
) -> tuple[HealthAlerts, list[Alert]]:
    """Advance one device's health alerts by one attribution event (``before``: the holders
    before a hand-over since the previous reading, :func:`streams.core.alerts.episodes.handed_over`;
    ``gap``: why a gap without readings ends the heat window here,
    :func:`streams.core.alerts.episodes.gap_ended`)."""
    if ev.state == "unknown" and ev.origin != "gone":
        hot = s.thermal
        why = gap if hot is not None else None
        if hot is None or why is None:
            return s, []  # holders unknown: nobody to join a change to
        fig = partial(_thermal_figures, None, p)
        ended = _resolved(ev, "thermal", hot, fig, p.thermal_window_s, "thermal", why)
        return replace(s, thermal=None), ended  # a gap ends the heat window, whoever holds it
    h = ev.health if ev.telemetry.status == "measured" and ev.origin != "gone" else None
    if s.thermal is None and s.memory_fault is None and s.pcie is None and _calm(h, s, p):
        return s, []  # nothing open and nothing to open (the usual sample): the same state
    thermal, out = _step_thermal(s.thermal, ev, h, p, gap)
    memory_fig = partial(  # the figures, built only for an alert
        AlertFigures,
        uncorrectable_remapped_rows=h.uncorrectable_remapped_rows if h else None,
        row_remap_failure=h.row_remap_failure if h else None,
        ecc_dbe_increase=h.ecc_dbe_increase if h else None,
    )
    rise = _memory_rise(h, s.remap_failed) if h is not None else None
    memory, memory_out = _quiet_episode(
        s.memory_fault, ev, rise, "memory-fault", memory_fig, p, "memory fault", before
    )
    pcie_fig = partial(
        AlertFigures,
        pcie_replays_per_min=h.pcie_replays_per_min if h else None,
        pcie_threshold_per_min=p.pcie_replays_per_min,
    )
    pcie_rise = _pcie_rise(h, p) if h is not None else None
    pcie, pcie_out = _quiet_episode(
        s.pcie, ev, pcie_rise, "pcie-replays", pcie_fig, p, "PCIe replays", before
    )
    failed = s.remap_failed
    if h is not None and h.row_remap_failure is not None:
        failed = h.row_remap_failure
    out = [*out, *memory_out, *pcie_out]
    moved = not (thermal is s.thermal and memory is s.memory_fault and pcie is s.pcie)
    if not moved and failed == s.remap_failed:
        return s, out  # nothing moved (the usual sample): the same state, no compare
    new = HealthAlerts(thermal, memory, pcie, failed)
    return (s if new == s else new), out
