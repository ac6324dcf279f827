"""Busy versus effective and health, where people look: device rows, ``gpuattr top`` and the
allocation report, from hand-built events (the worker fills ``activity`` and ``health``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from rich.console import Console

from contract.outputs import (
    Activity,
    AttributionEvent,
    EffectiveSource,
    Health,
    MigInstance,
    Telemetry,
)
from contract.records import replace
from gpuattr.report import accumulate, csv_rows, effective_coverage
from gpuattr.report_cli import print_table
from gpuattr.top import render
from streams.present.views import (
    ROWS,
    Filter,
    device_row,
    effective_text,
    health_text,
    select,
)
from tests.unit.test_views_report import ALICE, BOB, TRAIN, ev

SM: EffectiveSource = "DCGM_FI_PROF_SM_ACTIVE"
NO_PROF = "no profiling field exported by dcgm-exporter (DCGM_FI_PROF_SM_ACTIVE, GR_ENGINE_ACTIVE)"


def with_activity(
    event: AttributionEvent,
    effective: float | None,
    *,
    work: str = "compute",
    marks: tuple[str, ...] = (),
    watched: tuple[str, ...] = ("hot", "throttled", "memory-fault", "pcie-replays"),
) -> AttributionEvent:
    activity = Activity(
        busy_pct=event.usage.util_pct,
        effective_pct=effective,
        effective_source=SM if effective is not None else None,
        effective_reason=None if effective is not None else NO_PROF,
        work=work if effective is not None else "unknown",  # type: ignore[arg-type]
    )
    health = Health(marks=marks, watched=watched)  # type: ignore[arg-type]
    return replace(event, activity=activity, health=health)


BLIND = Telemetry("unknown", "exporter-unreachable", "dcgm-exporter at … failing", 0)


def test_row_carries_busy_effective_work_and_marks() -> None:
    row = device_row(
        with_activity(ev("GPU-A", 10, 100, (TRAIN,)), 3.0, work="light", marks=("hot",)), None
    )
    assert (row.busy_pct, row.effective_pct, row.effective_source) == (100, 3.0, SM)
    assert (row.effective_reason, row.work, row.health_marks) == (None, "light", ("hot",))
    assert (effective_text(row), health_text(row)) == ("3%", "HOT")
    bound = device_row(
        with_activity(ev("GPU-A", 10, 90, (TRAIN,)), 20.0, work="memory-bound"), None
    )
    assert effective_text(bound) == "20% memory-bound"


def test_effective_unknown_is_unknown_with_its_reason_never_busy_or_zero() -> None:
    """No profiling field: effective is unknown with the activity's reason, never 0 and never
    GPU_UTIL's figure; no reading at all: the telemetry's cause is the reason."""
    row = device_row(with_activity(ev("GPU-A", 10, 97, (TRAIN,)), None), None)
    assert (row.busy_pct, row.effective_pct, row.work) == (97, None, "unknown")
    assert row.effective_reason == NO_PROF
    assert effective_text(row) == "?"
    blind = device_row(replace(ev("GPU-A", 10, None, (TRAIN,)), telemetry=BLIND), None)
    assert (blind.effective_pct, blind.effective_reason) == (
        None,
        "usage unknown (exporter-unreachable)",
    )
    assert effective_text(blind) == "?"
    silent = device_row(ev("GPU-A", 10, 97, (TRAIN,)), None)  # a worker that fills no activity
    assert (silent.effective_pct, silent.effective_reason) == (
        None,
        "effective activity not reported",
    )


def test_shared_device_effective_is_one_device_wide_figure() -> None:
    event = with_activity(ev("GPU-S", 10, 60, (ALICE, BOB), sharing="time-slicing"), 12.0)
    data = orjson.loads(orjson.dumps(device_row(event, None)))
    assert data["effective_pct"] == 12.0
    assert "effective" not in str(data["holders"]) + str(data["pods"])  # no per-pod split


def test_old_rows_without_the_fields_still_read() -> None:
    """Another worker of an older version answers without the new fields: defaults, unknown."""
    data = orjson.loads(orjson.dumps(device_row(ev("GPU-A", 10, 50, (TRAIN,)), None)))
    for key in ("busy_pct", "effective_pct", "effective_source", "effective_reason", "work"):
        del data[key]
    del data["health_marks"]
    (row,) = ROWS.validate_python([data])
    assert (row.effective_pct, row.work, row.health_marks) == (None, "unknown", ())


def test_health_filter() -> None:
    rows = [
        device_row(with_activity(ev("GPU-A", 10, 50, (TRAIN,)), 40.0), None),
        device_row(
            with_activity(ev("GPU-B", 10, 50, (TRAIN,)), 40.0, marks=("memory-fault",)), None
        ),
    ]
    assert [r.device_uuid for r in select(rows, Filter(health=True))] == ["GPU-B"]
    assert Filter.from_query({"health": "1"}).health


def shown(rows: list[Any], width: int = 200) -> str:
    console = Console(width=width, record=True)
    console.print(render({"nodes": []}, rows, "test"))
    return console.export_text()


def test_top_shows_eff_and_health_columns() -> None:
    rows = [
        device_row(
            with_activity(
                ev("GPU-A", 10, 100, (TRAIN,)), 3.0, work="light", marks=("hot", "throttled")
            ),
            None,
        ),
        device_row(with_activity(ev("GPU-N", 10, 97, (TRAIN,), node="n2"), None), None),
        device_row(replace(ev("GPU-U", 10, None, (TRAIN,), node="n3"), telemetry=BLIND), None),
    ]
    text = shown(rows)
    header = next(line for line in text.splitlines() if "USAGE" in line)
    assert header.index("USAGE") < header.index("EFF") < header.index("HEALTH")
    line_a = next(line for line in text.splitlines() if line.startswith("│ n1"))
    assert "100%" in line_a
    assert " 3% " in line_a
    assert "HOT THR" in line_a
    line_n = next(line for line in text.splitlines() if line.startswith("│ n2"))
    assert "97%" in line_n
    assert " ? " in line_n
    assert " 0%" not in line_n
    assert "no profiling field" in text  # and why
    line_u = next(line for line in text.splitlines() if line.startswith("│ n3"))
    assert " ? " in line_u


# --- report -----------------------------------------------------------------------------------


def test_report_effective_hours_only_where_measured() -> None:
    """train holds GPU-A for 60 s: effective measured (10 %) for the first 40 s, then the
    exporter stops exporting the profiling field; busy is measured throughout. Effective hours
    count only the 40 s, and the line says over how much of the held time."""
    events = [
        with_activity(ev("GPU-A", t, 100, (TRAIN,)), 10.0 if t < 40 else None)
        for t in range(0, 65, 5)
    ]
    (line,) = accumulate(events, max_gap_s=30, idle_threshold_pct=5)
    assert line.held_gpu_hours == pytest.approx(60 / 3600)
    assert line.busy_gpu_hours == pytest.approx(60 / 3600)
    assert line.effective_gpu_hours == pytest.approx(40 * 0.10 / 3600)
    assert line.effective_measured_held_gpu_hours == pytest.approx(40 / 3600)
    assert csv_rows([line])[0][-4:-2] == ["0.0011", "0.0111"]
    assert effective_coverage([line]).startswith(
        "effective measured over 0.011 of 0.017 held GPU-hours"
    )


def test_report_effective_uses_the_accounting_share_and_never_splits_a_shared_device() -> None:
    """The same share as held and busy: a holder with half a device (replicas, held alone)
    counts half; tenants of a shared device get no effective figure, like busy."""
    half = replace(TRAIN, allocation_share=0.5)
    events = [with_activity(ev("GPU-A", t, 80, (half,)), 50.0) for t in (0, 36)]
    events += [
        with_activity(ev("GPU-S", t, 80, (ALICE, BOB), sharing="time-slicing"), 50.0)
        for t in (0, 36)
    ]
    lines = {x.workload: x for x in accumulate(events, max_gap_s=60, idle_threshold_pct=5)}
    train = lines["Job/train"]
    assert train.held_gpu_hours == pytest.approx(0.005)
    assert train.effective_gpu_hours == pytest.approx(0.005 * 0.5)
    assert train.effective_measured_held_gpu_hours == pytest.approx(train.held_gpu_hours)
    alice = lines["StatefulSet/alice"]
    assert (alice.busy_gpu_hours, alice.effective_gpu_hours) == (None, None)
    assert alice.effective_measured_held_gpu_hours == 0


def test_report_no_profiling_field_no_effective_hours() -> None:
    """Busy measured, effective never: effective is unknown (None), never 0, never busy's."""
    events = [with_activity(ev("GPU-A", t, 100, (TRAIN,)), None) for t in (0, 30, 60)]
    events += [replace(ev("GPU-B", t, None, (TRAIN,)), telemetry=BLIND) for t in (0, 30, 60)]
    (line,) = accumulate(events, max_gap_s=60, idle_threshold_pct=5)
    assert line.busy_gpu_hours == pytest.approx(60 / 3600)
    assert line.effective_gpu_hours is None
    assert line.effective_measured_held_gpu_hours == 0
    assert csv_rows([line])[0][-4:-2] == ["", "0.0000"]


def test_report_mig_hours_apart_in_the_coverage_line() -> None:
    mig = MigInstance(7, "1g.10gb")
    holder = replace(TRAIN, allocation_share=None)
    events = [
        with_activity(ev("MIG-7", t, 50, (holder,), sharing="mig", mig=mig), 30.0) for t in (0, 36)
    ]
    events += [with_activity(ev("GPU-A", t, 50, (TRAIN,)), None) for t in (0, 36)]
    lines = accumulate(events, max_gap_s=60, idle_threshold_pct=5)
    assert effective_coverage(lines) == (
        "effective measured over 0.000 of 0.010 held GPU-hours; effective measured over 0.010 "
        "of 0.010 held MIG instance-hours (devices held alone whose dcgm-exporter exports a "
        "profiling field; never derived from busy)"
    )


def test_report_table_prints_effective_and_coverage(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    events = [with_activity(ev("GPU-A", t, 100, (TRAIN,)), None) for t in (0, 36)]
    events += [
        with_activity(ev("GPU-S", t, 80, (ALICE, BOB), sharing="time-slicing"), 5.0)
        for t in (0, 36)
    ]
    print_table(accumulate(events, max_gap_s=60, idle_threshold_pct=5), "t")
    out = capsys.readouterr().out
    assert "effective measured over 0.000 of 0.020 held GPU-hours" in out
    assert "unknown (no effective figure)" in out  # train: busy measured, effective not
    assert "n/a (shared)" in out
