"""The pod annotations gpu-attribution reads, and what each may say (the wire contract).

``gpuattr.io/idle-threshold-pct`` (0 to 100) and ``gpuattr.io/idle-window-s`` (1 s to 7 d) override
the idle alert per pod; ``gpuattr.io/low-efficiency-threshold-pct`` and
``gpuattr.io/low-efficiency-window-s`` (same ranges) the low-efficiency alert. A value that is
not a finite number in its range (``nan``, ``inf``, ``-3``, ``1e400``, ``soon``) is refused: the
agent drops it where it enters (counted, logged), and the worker's alert policy ignores it should
one arrive anyway.
"""

from __future__ import annotations

import math

PREFIX = "gpuattr.io/"
IDLE_THRESHOLD_PCT = "gpuattr.io/idle-threshold-pct"
IDLE_WINDOW_S = "gpuattr.io/idle-window-s"
LOW_EFF_THRESHOLD_PCT = "gpuattr.io/low-efficiency-threshold-pct"
LOW_EFF_WINDOW_S = "gpuattr.io/low-efficiency-window-s"

#: inclusive ranges of the numeric overrides
RANGES: dict[str, tuple[float, float]] = {
    IDLE_THRESHOLD_PCT: (0.0, 100.0),
    IDLE_WINDOW_S: (1.0, 7 * 86400.0),
    LOW_EFF_THRESHOLD_PCT: (0.0, 100.0),
    LOW_EFF_WINDOW_S: (1.0, 7 * 86400.0),
}


def override(name: str, text: str) -> float | None:
    """An override annotation's value, or ``None`` when it is not a finite number in range."""
    try:
        value = float(text)
    except ValueError:
        return None
    low, high = RANGES[name]
    return value if math.isfinite(value) and low <= value <= high else None


def refused(name: str, text: str) -> bool:
    """An annotation of ours whose value must not cross the wire."""
    return name in RANGES and override(name, text) is None
