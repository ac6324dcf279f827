"""Busy versus effective, and the kind of work: decision tables over one sample's fields."""

from __future__ import annotations

import pytest

from contract.inputs import DcgmSample
from contract.outputs import Usage
from streams.core.devices.attribution import DeviceContext, attribute
from streams.core.devices.efficiency import NO_PROFILING, activity, work_kind


def sample(**fields: object) -> DcgmSample:
    return DcgmSample("n", 1000, "GPU-1", 0, "H100", "n", **fields)  # type: ignore[arg-type]


def usage(util: float | None) -> Usage:
    return Usage("device", util, "DCGM_FI_DEV_GPU_UTIL", None, None, None, None, None)


@pytest.mark.parametrize(
    ("fields", "busy", "effective", "source"),
    [
        pytest.param(
            {"util_pct": 100.0, "sm_active": 0.03, "gr_engine_active": 0.9},
            100.0,
            3.0,
            "DCGM_FI_PROF_SM_ACTIVE",
            id="sm-active-wins-over-gr-engine",
        ),
        pytest.param(
            {"util_pct": 100.0, "gr_engine_active": 0.25},
            100.0,
            25.0,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            id="gr-engine-when-no-sm-active",
        ),
        pytest.param(
            {"util_pct": 100.0}, 100.0, None, None, id="no-profiling-field-never-from-gpu-util"
        ),
        pytest.param({"sm_active": 0.0}, None, 0.0, "DCGM_FI_PROF_SM_ACTIVE", id="zero-is-known"),
    ],
)
def test_effective(
    fields: dict[str, object], busy: float | None, effective: float | None, source: str | None
) -> None:
    s = sample(**fields)
    a = activity(s, usage(s.util_pct))
    assert (a.busy_pct, a.effective_pct, a.effective_source) == (busy, effective, source)
    assert a.effective_reason == (NO_PROFILING if source is None else None)


@pytest.mark.parametrize(
    ("effective", "tensor", "dram", "kind"),
    [
        pytest.param(None, None, None, "unknown", id="no-compute-figure"),
        pytest.param(None, 80.0, 90.0, "unknown", id="no-compute-figure-whatever-else"),
        pytest.param(70.0, 45.0, None, "tensor", id="tensor-pipes-busy"),
        pytest.param(25.0, 20.0, 80.0, "tensor", id="tensor-before-memory"),
        pytest.param(12.0, 1.0, 75.0, "memory-bound", id="dram-high-compute-low"),
        pytest.param(3.0, None, 50.0, "memory-bound", id="dram-at-threshold"),
        pytest.param(30.0, None, 90.0, "compute", id="dram-high-compute-not-low"),
        pytest.param(60.0, 5.0, 20.0, "compute", id="sms-busy"),
        pytest.param(10.0, None, None, "compute", id="at-light-threshold"),
        pytest.param(3.0, 0.0, 10.0, "light", id="busy-but-ineffective"),
        pytest.param(0.0, None, 49.9, "light", id="dram-just-under"),
    ],
)
def test_work_kind(
    effective: float | None, tensor: float | None, dram: float | None, kind: str
) -> None:
    assert work_kind(effective, tensor, dram) == kind


def test_ratios_in_percent_and_mem_copy_as_exported() -> None:
    s = sample(
        util_pct=90.0,
        sm_active=0.5,
        sm_occupancy=0.256,
        tensor_active=0.123456,
        dram_active=0.4,
        mem_copy_util_pct=37.0,
    )
    a = activity(s, usage(90.0))
    assert (a.sm_occupancy_pct, a.tensor_active_pct, a.dram_active_pct) == (25.6, 12.35, 40.0)
    assert a.mem_copy_util_pct == 37.0


def test_mig_instance_busy_is_gr_engine_effective_is_sm_active() -> None:
    s = sample(mig_instance_id=1, mig_profile="1g.10gb", gr_engine_active=0.8, sm_active=0.1)
    ev, _ = attribute(s, [], DeviceContext())
    assert ev.usage.util_pct == 80.0
    assert (ev.activity.busy_pct, ev.activity.effective_pct) == (80.0, 10.0)
    assert ev.activity.effective_source == "DCGM_FI_PROF_SM_ACTIVE"


def test_shared_device_activity_is_device_wide_on_the_event() -> None:
    """One Activity per event: no per-pod figure exists anywhere."""
    ev, _ = attribute(sample(util_pct=100.0, sm_active=0.03), [], DeviceContext())
    assert ev.activity.effective_pct == 3.0
    assert all(not hasattr(p, "effective_pct") for p in ev.pods)
