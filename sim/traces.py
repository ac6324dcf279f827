"""What a simulated GPU's DCGM fields read at scenario time ``t``. Pure: the same time, the same
values, so every scrape of a scenario is reproducible and the counters need no state.

Two scopes, as dcgm-exporter has them:

- :func:`activity` — one row's profiling ratios (``DCGM_FI_PROF_*``) and utilisation: per GPU,
  and per MIG instance on a MIG GPU (``GPU_UTIL`` is 0 there, as the exporter reports it);
- :func:`device` — the GPU's own gauges and counters (temperatures, clocks, power, clock-event
  reasons, PCIe replays, ECC, remapped rows, throttling time, the last XID), repeated on every
  MIG instance row of the GPU.

A healthy device reads what its load says: temperatures 35-65 °C (memory 4 °C warmer), SM active
85 % of the busy share, counters flat at what they had counted before the scenario. A trace
(:class:`sim.scenario.TraceSpec`) changes that from its start: ``busy-ineffective`` (GPU_UTIL
100 %, SM active 0.03, GR engine active 0.05), ``memory-bound`` (DRAM active 0.8, SM active 0.2,
tensor 0), ``thermal`` (GPU temperature climbing to 92 °C and memory to 99 °C; from 85 °C the
thermal clock-event reasons are set, the SM clock drops and DCGM_FI_DEV_THERMAL_VIOLATION rises
by 60 % of wall time), ``remapped-rows`` (one more uncorrectable remapped row and double-bit ECC
error every ``every_s``; DCGM_FI_DEV_ROW_REMAP_FAILURE from ``failure_s``), ``pcie-replays`` (one
more replay every ``every_s``) and ``xid`` (the last XID). Counters are cumulative since the
exporter started: an exporter restart (:class:`sim.scenario.ExporterRestart`) sets every one of
them, and the last XID, back to 0, and they count on from there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sim.scenario import COUNTER_FIELDS, ExporterRestart, TraceSpec

#: NVML clock-event reason bits (``nvmlClocksEventReason*``, DCGM_CLOCKS_EVENT_REASON_*)
GPU_IDLE = 0x1
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
THERMAL_REASONS = SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN

BOOST_CLOCK_MHZ = 1410.0
IDLE_CLOCK_MHZ = 210.0
THROTTLED_CLOCK_MHZ = 990.0
#: a thermal trace: its load's temperature, its peaks, where the GPU slows itself down, and the
#: share of wall time it then spends throttled
THERMAL_BASE_C = 70.0
THERMAL_PEAK_C = 92.0
THERMAL_MEMORY_PEAK_C = 99.0
SLOWDOWN_C = 85.0
THROTTLED_SHARE = 0.6
NS = 1e9


def exporter_down(restarts: Sequence[ExporterRestart], t: float) -> bool:
    """Whether the exporter is restarting at ``t`` (its port refuses connections)."""
    return any(r.at_s <= t < r.at_s + r.down_s for r in restarts)


def life_start(restarts: Sequence[ExporterRestart], t: float) -> float | None:
    """When the exporter answering at ``t`` started: its last restart, None for its first life
    (which began before the scenario, with the node's counters as they were)."""
    return max((r.at_s for r in restarts if r.at_s <= t), default=None)


def _overlap(a: float, b: float, c: float, d: float) -> float:
    return max(0.0, min(b, d) - max(a, c))


def _ticks(trace: TraceSpec, since: float | None, t: float) -> float:
    """How many ``every_s`` ticks of the trace fell in (``since``, ``t``]."""

    def upto(x: float) -> int:
        end = x if trace.stop_s is None else min(x, trace.stop_s)
        return max(0, math.floor((end - trace.start_s) / trace.every_s))

    return float(upto(t) - (upto(since) if since is not None else 0))


def _heat(trace: TraceSpec, t: float) -> float:
    """0 (:data:`THERMAL_BASE_C`, the hot load's own temperature) to 1 (the peak): up over
    ``ramp_s``, back down after stop."""
    up = min(1.0, max(0.0, (t - trace.start_s) / trace.ramp_s))
    if trace.stop_s is None or t < trace.stop_s:
        return up
    return max(0.0, up - (t - trace.stop_s) / trace.ramp_s)


def _hot_between(trace: TraceSpec) -> tuple[float, float]:
    """The span of scenario time a thermal trace holds the GPU at or over :data:`SLOWDOWN_C`."""
    share = (SLOWDOWN_C - THERMAL_BASE_C) / (THERMAL_PEAK_C - THERMAL_BASE_C)
    on = trace.start_s + share * trace.ramp_s
    if trace.stop_s is None:
        return on, math.inf
    # heat falls from its value at stop; it is under the slowdown share again after this long
    at_stop = min(1.0, max(0.0, (trace.stop_s - trace.start_s) / trace.ramp_s))
    return on, trace.stop_s + max(0.0, at_stop - share) * trace.ramp_s


def activity(util_pct: float, trace: TraceSpec | None, t: float, mig: bool) -> dict[str, float]:
    """One row's utilisation and profiling ratios; ``util_pct`` is its holders' summed load."""
    u = min(100.0, util_pct) / 100.0
    kind = trace.kind if trace is not None and trace.active(t) and u > 0 else None
    if kind == "busy-ineffective":  # a kernel always resident, doing almost nothing
        busy, gr, sm, occupancy, tensor, dram, copy = 1.0, 0.05, 0.03, 0.01, 0.0, 0.02, 1.0
    elif kind == "memory-bound":  # streaming memory: the SMs wait on DRAM
        busy, gr, sm, occupancy, tensor, dram, copy = u, u, 0.2, 0.08, 0.0, 0.8, 80.0
    else:
        busy, gr, sm, occupancy = u, u, 0.85 * u, 0.45 * u
        tensor, dram, copy = 0.35 * u, 0.3 * u, 25.0 * u
    return {
        "DCGM_FI_DEV_GPU_UTIL": 0.0 if mig else round(busy * 100.0),
        "DCGM_FI_DEV_MEM_COPY_UTIL": round(copy),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": gr,
        "DCGM_FI_PROF_SM_ACTIVE": sm,
        "DCGM_FI_PROF_SM_OCCUPANCY": occupancy,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": tensor,
        "DCGM_FI_PROF_DRAM_ACTIVE": dram,
    }


def device(
    util_pct: float,
    traces: Sequence[TraceSpec],
    restarts: Sequence[ExporterRestart],
    counters: Sequence[tuple[str, float]],
    t: float,
) -> dict[str, float]:
    """The GPU's own gauges and counters at ``t``; ``util_pct`` is its whole load (0-100)."""
    u = min(100.0, util_pct)
    since = life_start(restarts, t)
    out = {
        field: (value if since is None else 0.0)
        for field, value in (
            (COUNTER_FIELDS[name], dict(counters).get(name, 0.0)) for name in COUNTER_FIELDS
        )
    }
    temp = 35.0 + 0.3 * u
    memory_temp = temp + 4.0
    clock = BOOST_CLOCK_MHZ if u > 0 else IDLE_CLOCK_MHZ
    reasons = 0 if u > 0 else GPU_IDLE
    failure = 0.0
    xid = 0.0
    for trace in traces:
        if trace.kind == "thermal":
            heat = _heat(trace, t)
            temp = max(temp, THERMAL_BASE_C + heat * (THERMAL_PEAK_C - THERMAL_BASE_C))
            memory_base = THERMAL_BASE_C + 4.0
            memory_temp = max(
                memory_temp, memory_base + heat * (THERMAL_MEMORY_PEAK_C - memory_base)
            )
            on, off = _hot_between(trace)
            if on <= t < off:
                reasons = (reasons & ~GPU_IDLE) | THERMAL_REASONS
                clock = THROTTLED_CLOCK_MHZ
            start = -math.inf if since is None else since
            throttled_s = _overlap(on, off, start, t)
            out["DCGM_FI_DEV_THERMAL_VIOLATION"] += round(THROTTLED_SHARE * throttled_s * NS)
        elif trace.kind == "remapped-rows":
            rows = _ticks(trace, since, t)
            out["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] += rows
            out["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] += rows  # each remap follows a double-bit error
            if trace.failure_s is not None and t >= trace.failure_s:
                failure = 1.0
        elif trace.kind == "pcie-replays":
            out["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] += _ticks(trace, since, t)
        elif trace.kind == "xid" and trace.active(t) and (since is None or since < trace.start_s):
            xid = float(trace.xid)
    return {
        **out,
        "DCGM_FI_DEV_SM_CLOCK": clock,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": float(reasons),
        "DCGM_FI_DEV_MEMORY_TEMP": round(memory_temp),
        "DCGM_FI_DEV_GPU_TEMP": round(temp),
        "DCGM_FI_DEV_POWER_USAGE": 60.0 + u * 2.5,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": failure,
        "DCGM_FI_DEV_XID_ERRORS": xid,
    }
