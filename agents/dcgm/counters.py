"""What each cumulative DCGM counter of a device did since the agent's previous scrape of it.

The one owner of the counter rule (pure; :mod:`agents.dcgm.collect` keeps the previous sample
per device and calls :func:`with_since_last`). dcgm-exporter sends totals — PCIe replays,
double-bit ECC errors, remapped rows, throttling time — that start again from zero when the
exporter or the driver restarts. So:

- the increase is ``current - previous`` when both scrapes exported the counter and it did
  not go down;
- a counter that went down was reset: its increase is unknown (``None``) and it is named in
  ``SinceLast.resets`` — never a negative increase, never a false rise;
- a counter missing from either scrape has no increase (``None``), and is no reset;
- a device seen for the first time, or a scrape not later than the previous one (the clock went
  back, or the same timestamp twice), has no ``since_last`` at all.
"""

from __future__ import annotations

from typing import get_args

from contract.inputs import CounterName, DcgmSample, SinceLast
from contract.records import replace

__all__ = ["COUNTERS", "since_last", "with_since_last"]

#: every cumulative counter of a sample, by its attribute name (on DcgmSample and SinceLast)
COUNTERS: tuple[CounterName, ...] = get_args(CounterName)


def since_last(previous: DcgmSample | None, current: DcgmSample) -> SinceLast | None:
    """The counters' increases from ``previous`` to ``current`` (the same device, earlier)."""
    if previous is None:
        return None
    interval_ms = current.ts_ms - previous.ts_ms
    if interval_ms <= 0:
        return None
    increases: dict[str, float | None] = {}
    resets: list[CounterName] = []
    for name in COUNTERS:
        before, now = getattr(previous, name), getattr(current, name)
        if before is None or now is None:
            increases[name] = None
        elif now < before:
            increases[name] = None
            resets.append(name)
        else:
            increases[name] = now - before
    return SinceLast(
        interval_ms,
        pcie_replays=increases["pcie_replays"],
        ecc_dbe_volatile=increases["ecc_dbe_volatile"],
        uncorrectable_remapped_rows=increases["uncorrectable_remapped_rows"],
        correctable_remapped_rows=increases["correctable_remapped_rows"],
        power_violation_us=increases["power_violation_us"],
        thermal_violation_us=increases["thermal_violation_us"],
        resets=tuple(resets),
    )


def with_since_last(previous: DcgmSample | None, current: DcgmSample) -> DcgmSample:
    """``current`` with ``since_last`` filled from ``previous`` (``None``: first sight)."""
    return replace(current, since_last=since_last(previous, current))
