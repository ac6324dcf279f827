"""Busy versus effective: what a device's profiling fields say it did. Pure.

``busy_pct`` is the event's busy figure (:class:`contract.outputs.Usage` ``util_pct``:
``DCGM_FI_DEV_GPU_UTIL``, or the graphics engine's active ratio on a MIG instance): the share of
time *any* kernel ran. ``effective_pct`` is the share of SM cycles with work resident:
``DCGM_FI_PROF_SM_ACTIVE`` where exported, else ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``. Where neither
is exported it is unknown, with the reason — never derived from GPU_UTIL, which says nothing of
how much of the GPU the kernels used. Every figure is the device's (or MIG instance's) as a
whole: on a shared device it is never split per pod.

The kind of work (``work``) is read from the profiling ratios, in this order:

- ``unknown``: no SM active and no graphics-engine active exported (compute not measured);
- ``tensor``: tensor pipes active at or over :data:`TENSOR_HIGH_PCT`;
- ``memory-bound``: DRAM active at or over :data:`DRAM_HIGH_PCT` while compute (effective)
  stays under :data:`COMPUTE_LOW_PCT`;
- ``compute``: effective at or over :data:`LIGHT_PCT`;
- ``light``: effective under :data:`LIGHT_PCT`, the memory interface not busy either.
"""

from __future__ import annotations

from contract.inputs import DcgmSample
from contract.outputs import Activity, EffectiveSource, Usage, WorkKind

#: tensor pipes active this share of cycles or more: tensor work (NVIDIA's profiling guide
#: treats sustained tensor activity of a few tens of percent as a tensor-core workload)
TENSOR_HIGH_PCT = 20.0
#: DRAM (memory interface) active this share of cycles or more: the memory is busy
DRAM_HIGH_PCT = 50.0
#: compute (effective) under this while DRAM is busy: the kernels wait on memory
COMPUTE_LOW_PCT = 30.0
#: effective under this (and DRAM not busy): little work of any kind
LIGHT_PCT = 10.0

NO_PROFILING = (
    "no profiling field exported: DCGM_FI_PROF_SM_ACTIVE and DCGM_FI_PROF_GR_ENGINE_ACTIVE "
    "absent; effective activity unknown"
)


def pct(ratio: float | None) -> float | None:
    """A DCGM profiling ratio (0-1) in percent, as every output carries it."""
    return None if ratio is None else round(ratio * 100.0, 2)


def effective(sample: DcgmSample) -> tuple[float | None, EffectiveSource | None]:
    """The device's effective activity in percent and the field it came from."""
    if sample.sm_active is not None:
        return pct(sample.sm_active), "DCGM_FI_PROF_SM_ACTIVE"
    if sample.gr_engine_active is not None:
        return pct(sample.gr_engine_active), "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    return None, None


def work_kind(
    effective_pct: float | None, tensor_pct: float | None, dram_pct: float | None
) -> WorkKind:
    """What kind of work the ratios describe (the module docstring's table)."""
    if effective_pct is None:
        return "unknown"
    if tensor_pct is not None and tensor_pct >= TENSOR_HIGH_PCT:
        return "tensor"
    dram_busy = dram_pct is not None and dram_pct >= DRAM_HIGH_PCT
    if dram_busy and effective_pct < COMPUTE_LOW_PCT:
        return "memory-bound"
    if effective_pct >= LIGHT_PCT:
        return "compute"
    return "light"


def activity(sample: DcgmSample, usage: Usage) -> Activity:
    """Busy versus effective for one sample's device (``usage``: the event's usage, whose
    ``util_pct`` is the busy figure)."""
    eff, source = effective(sample)
    tensor, dram = pct(sample.tensor_active), pct(sample.dram_active)
    return Activity(
        busy_pct=usage.util_pct,
        effective_pct=eff,
        effective_source=source,
        effective_reason=NO_PROFILING if source is None else None,
        tensor_active_pct=tensor,
        dram_active_pct=dram,
        sm_occupancy_pct=pct(sample.sm_occupancy),
        mem_copy_util_pct=sample.mem_copy_util_pct,
        work=work_kind(eff, tensor, dram),
    )
