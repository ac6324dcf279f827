"""Which DCGM field is which :class:`~contract.inputs.DcgmSample` attribute, and in what unit.

A helper of :mod:`agents.dcgm.translate` (nothing else should import it). Two namings are read:
the ``DCGM_FI_*`` names of dcgm-exporter's counters files (``etc/default-counters.csv``,
``etc/dcp-metrics-included.csv``; ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` also under its older name
``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS``), and the names of the 1.x counters file
(``etc/1.x-compatibility-metrics.csv``, go-dcgm's legacy field names: ``dcgm_gpu_utilization``,
…). The 1.x naming has no name for the remapped-row fields nor for the clock-event reasons, so
none is read for them.

Values keep the exporter's unit (%, MiB, W, °C, MHz, ratios 0-1, counts) except:

- the throttling counters ``DCGM_FI_DEV_POWER_VIOLATION``/``DCGM_FI_DEV_THERMAL_VIOLATION``
  are nanoseconds (NVML's ``violationTime``; dcgm-exporter's files say so since its PR #589)
  and become the sample's microseconds (``power_violation_us``, ``thermal_violation_us``);
- ``DCGM_FI_DEV_ROW_REMAP_FAILURE`` is a flag: 0 → ``False``, anything else → ``True``;
- the clock-event reasons and the XID are integers; a value that is not one is no reading.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["FIELDS", "NS_PER_US", "as_bitmask", "as_flag", "as_us", "as_xid"]

#: DCGM field → DcgmSample attribute.
FIELDS: Mapping[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gr_engine_active",  # ratio 0-1, works per MIG instance
    "DCGM_FI_PROF_SM_ACTIVE": "sm_active",  # ratios 0-1, per MIG instance too
    "DCGM_FI_PROF_SM_OCCUPANCY": "sm_occupancy",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor_active",
    "DCGM_FI_PROF_DRAM_ACTIVE": "dram_active",
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_FB_FREE": "fb_free_mib",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "mem_copy_util_pct",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_GPU_TEMP": "temp_c",
    "DCGM_FI_DEV_MEMORY_TEMP": "memory_temp_c",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
    "DCGM_FI_DEV_XID_ERRORS": "xid",  # the last XID seen, kept until the exporter restarts
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "row_remap_failure",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "clock_event_reasons",  # NVML bitmask
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "clock_event_reasons",  # its older name
    # cumulative counters (totals since the driver or exporter started)
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "pcie_replays",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_dbe_volatile",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "uncorrectable_remapped_rows",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "correctable_remapped_rows",
    "DCGM_FI_DEV_POWER_VIOLATION": "power_violation_us",  # sent in ns
    "DCGM_FI_DEV_THERMAL_VIOLATION": "thermal_violation_us",  # sent in ns
    # the 1.x counters file: same DCGM fields
    "dcgm_gpu_utilization": "util_pct",
    "dcgm_fi_prof_gr_engine_active": "gr_engine_active",
    "dcgm_fi_prof_sm_active": "sm_active",
    "dcgm_fi_prof_sm_occupancy": "sm_occupancy",
    "dcgm_fi_prof_pipe_tensor_active": "tensor_active",
    "dcgm_fi_prof_dram_active": "dram_active",
    "dcgm_fb_used": "fb_used_mib",
    "dcgm_fb_free": "fb_free_mib",
    "dcgm_mem_copy_utilization": "mem_copy_util_pct",
    "dcgm_power_usage": "power_w",
    "dcgm_gpu_temp": "temp_c",
    "dcgm_memory_temp": "memory_temp_c",
    "dcgm_sm_clock": "sm_clock_mhz",
    "dcgm_xid_errors": "xid",
    "dcgm_pcie_replay_counter": "pcie_replays",
    "dcgm_ecc_dbe_volatile_total": "ecc_dbe_volatile",
    "dcgm_power_violation": "power_violation_us",  # sent in ns
    "dcgm_thermal_violation": "thermal_violation_us",  # sent in ns
}
NS_PER_US = 1000


def as_us(ns: float | None) -> float | None:
    """A throttling time the exporter sends in nanoseconds, in microseconds."""
    return None if ns is None else ns / NS_PER_US


def as_flag(value: float | None) -> bool | None:
    """A 0/1 field: 0 is ``False``, anything else ``True``."""
    return None if value is None else value != 0


def as_bitmask(value: float | None) -> int | None:
    """A bitmask is a non-negative integer below 2^63 (what the wire carries); else no reading."""
    if value is None or not 0 <= value < 2**63 or not value.is_integer():
        return None
    return int(value)


def as_xid(value: float | None) -> int | None:
    """XID codes are small integers; a value outside 0..2^31 is not an XID and is dropped."""
    if value is None or not 0 <= value < 2**31:
        return None
    return int(value)
