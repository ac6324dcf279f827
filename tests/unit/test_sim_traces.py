"""The simulator's device traces (sim/traces.py, scenario ``efficiency``): what each DCGM field
reads at given scenario times, counters that only rise but for an exporter restart (which sets
them all back to 0), and the exporter text for the new fields as dcgm-exporter prints it."""

from __future__ import annotations

import math

import pytest

from agents.dcgm.rows import read_rows
from agents.dcgm.translate import parse_exposition
from sim import traces
from sim.cluster import Cluster
from sim.exporter_rows import FAMILIES, render
from sim.scenario import ExporterRestart, Scenario, TraceSpec, builtin_names, load, parse

EFF = load("efficiency")
COUNTERS = (
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
)
#: (TYPE, HELP) of the new fields as NVIDIA/dcgm-exporter's etc/default-counters.csv and
#: etc/dcp-metrics-included.csv give them (the violations "(in ns)" since dcgm-exporter #589)
UPSTREAM = {
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz)."),
    "DCGM_FI_DEV_MEMORY_TEMP": ("gauge", "Memory temperature (in C)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("counter", "Total number of PCIe retries."),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", "Memory utilization (in %)."),
    "DCGM_FI_DEV_POWER_VIOLATION": (
        "counter",
        "Throttling duration due to power constraints (in ns).",
    ),
    "DCGM_FI_DEV_THERMAL_VIOLATION": (
        "counter",
        "Throttling duration due to thermal constraints (in ns).",
    ),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("counter", "Total number of double-bit volatile ECC errors."),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": (
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": (
        "counter",
        "Number of remapped rows for correctable errors",
    ),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("gauge", "Whether remapping of rows has failed"),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
    "DCGM_FI_PROF_SM_ACTIVE": ("gauge", "The ratio of cycles an SM has at least 1 warp assigned."),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("gauge", "The ratio of number of warps resident on an SM."),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
    ),
    "DCGM_FI_PROF_DRAM_ACTIVE": (
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
}


def at(scenario: Scenario, t: float) -> Cluster:
    """The scenario's cluster frozen at scenario second ``t``."""
    return Cluster(scenario, lambda: t)


def values(node: str, gpu: int, t: float, scenario: str = "efficiency") -> dict[str, float]:
    """The fields of the (first) row of ``gpu`` on ``node`` at scenario second ``t``."""
    cluster = Cluster(load(scenario), lambda: t)
    return dict(next(r for r in cluster.exporter_rows(node, 0) if r.gpu == gpu).values)


# --- traces at given scenario times ----------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "util", "sm", "gr", "dram", "tensor"),
    [
        pytest.param(0, 100, 0.03, 0.05, 0.02, 0.0, id="busy-ineffective"),
        pytest.param(1, 88, 0.2, 0.88, 0.8, 0.0, id="memory-bound"),
        pytest.param(2, 94, 0.85 * 0.94, 0.94, 0.3 * 0.94, 0.35 * 0.94, id="healthy-training"),
        pytest.param(3, 0, 0.0, 0.0, 0.0, 0.0, id="idle-notebook"),
    ],
)
@pytest.mark.parametrize("t", [0.0, 50.0, 140.0])
def test_profiling_ratios_of_each_trace(
    gpu: int, util: float, sm: float, gr: float, dram: float, tensor: float, t: float
) -> None:
    v = values("eff-a", gpu, t)
    assert v["DCGM_FI_DEV_GPU_UTIL"] == util
    assert v["DCGM_FI_PROF_SM_ACTIVE"] == pytest.approx(sm)
    assert v["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(gr)
    assert v["DCGM_FI_PROF_DRAM_ACTIVE"] == pytest.approx(dram)
    assert v["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] == pytest.approx(tensor)
    assert 35 <= v["DCGM_FI_DEV_GPU_TEMP"] <= 70  # these GPUs run at sensible temperatures
    assert v["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] == (traces.GPU_IDLE if util == 0 else 0)


@pytest.mark.parametrize(
    ("t", "gpu_temp", "memory_temp", "throttled"),
    [
        pytest.param(5, 70, 74, False, id="before: the load's own heat"),
        pytest.param(25, 81, 86, False, id="climbing, under the slowdown"),
        pytest.param(35, 88, 95, True, id="over 85: thermal slowdown"),
        pytest.param(60, 92, 99, True, id="at the peak"),
    ],
)
def test_thermal_trace_climbs_and_throttles(
    t: float, gpu_temp: float, memory_temp: float, throttled: bool
) -> None:
    v = values("eff-b", 0, t)
    assert v["DCGM_FI_DEV_GPU_TEMP"] == gpu_temp
    assert v["DCGM_FI_DEV_MEMORY_TEMP"] == memory_temp
    reasons = int(v["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"])
    assert bool(reasons & traces.HW_THERMAL_SLOWDOWN) is throttled
    assert bool(reasons & traces.SW_THERMAL_SLOWDOWN) is throttled
    assert v["DCGM_FI_DEV_SM_CLOCK"] == (
        traces.THROTTLED_CLOCK_MHZ if throttled else traces.BOOST_CLOCK_MHZ
    )
    assert (v["DCGM_FI_DEV_THERMAL_VIOLATION"] > 0) is throttled


def test_thermal_violation_rises_by_a_large_share_of_wall_time() -> None:
    for t in (40.0, 80.0, 130.0):
        before = values("eff-b", 0, t)["DCGM_FI_DEV_THERMAL_VIOLATION"]
        after = values("eff-b", 0, t + 2)["DCGM_FI_DEV_THERMAL_VIOLATION"]
        assert (after - before) / 2e9 == pytest.approx(traces.THROTTLED_SHARE, abs=1e-3)


@pytest.mark.parametrize(
    ("t", "rows", "failure"),
    [(10, 0, 0), (22.9, 0, 0), (23, 1, 0), (50, 4, 0), (70, 6, 1), (99, 10, 1), (140, 10, 1)],
)
def test_remapped_rows_rise_then_row_remapping_fails(t: float, rows: int, failure: int) -> None:
    v = values("eff-b", 1, t)
    assert v["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] == rows
    assert v["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == rows
    assert v["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == failure
    assert v["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"] == 0


def test_healthy_counters_stay_flat_until_the_exporter_restarts() -> None:
    before = [values("eff-c", 0, t) for t in (0, 30, 59.9)]
    for v in before:
        assert v["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == 14
        assert v["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"] == 3
        assert v["DCGM_FI_DEV_POWER_VIOLATION"] == 418e9
    for t in (60, 61, 120):  # restarted at 60 s: every counter from 0
        after = values("eff-c", 0, t)
        assert all(after[c] == 0 for c in COUNTERS)
        assert after["DCGM_FI_DEV_GPU_UTIL"] == 70  # the gauges go on as before


def test_counters_rise_monotonically_except_at_a_restart() -> None:
    """Every device of the scenario, every half second of 150 s: a counter never falls but at
    the restart, where all of them read 0."""
    restarts = {n.name: [r.at_s for r in n.exporter_restarts] for n in EFF.nodes}
    for node in EFF.nodes:
        previous: dict[int, dict[str, float]] = {}
        for step in range(301):
            t = step / 2
            cluster = at(EFF, t)
            for row in cluster.exporter_rows(node.name, step):
                v = dict(row.values)
                last = previous.get(row.gpu)
                restarted = any(t - 0.5 < at <= t for at in restarts[node.name])
                if restarted:
                    assert all(v[c] == 0 for c in COUNTERS), (node.name, t)
                elif last is not None:
                    assert all(v[c] >= last[c] for c in COUNTERS), (node.name, row.gpu, t)
                previous[row.gpu] = v


def test_a_restart_resets_rising_counters_and_the_last_xid() -> None:
    thermal = TraceSpec("0", "thermal", start_s=0, ramp_s=10)
    rows = TraceSpec("0", "remapped-rows", start_s=0, every_s=5)
    replays = TraceSpec("0", "pcie-replays", start_s=0, every_s=1)
    xid = TraceSpec("0", "xid", start_s=3, xid=79)
    restart = (ExporterRestart(50, down_s=2),)
    every = [thermal, rows, replays, xid]

    def reading(t: float) -> dict[str, float]:
        return traces.device(90, every, restart, (), t)

    assert reading(49)["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] == 9
    assert reading(49)["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == 49
    assert reading(49)["DCGM_FI_DEV_XID_ERRORS"] == 79
    assert reading(49)["DCGM_FI_DEV_THERMAL_VIOLATION"] > 0
    assert all(reading(50)[c] == 0 for c in COUNTERS)
    assert reading(50)["DCGM_FI_DEV_XID_ERRORS"] == 0  # the new exporter has seen no XID
    # and they count on from the restart
    assert reading(60)["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] == 2
    assert reading(60)["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == 10
    assert reading(60)["DCGM_FI_DEV_THERMAL_VIOLATION"] == pytest.approx(10 * 0.6e9)
    assert reading(60)["DCGM_FI_DEV_XID_ERRORS"] == 0
    assert [traces.exporter_down(restart, t) for t in (49.9, 50, 51.9, 52)] == [
        False,
        True,
        True,
        False,
    ]
    assert traces.life_start(restart, 49) is None
    assert traces.life_start(restart, 50) == 50


def test_a_thermal_trace_that_stops_cools_down() -> None:
    trace = TraceSpec("0", "thermal", start_s=0, stop_s=40, ramp_s=20)
    hot = traces.device(50, [trace], (), (), 30)
    cooled = traces.device(50, [trace], (), (), 61)
    assert hot["DCGM_FI_DEV_GPU_TEMP"] == 92
    assert cooled["DCGM_FI_DEV_GPU_TEMP"] == traces.THERMAL_BASE_C  # its hot load's, no slowdown
    assert cooled["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] == 0
    frozen = traces.device(50, [trace], (), (), 200)["DCGM_FI_DEV_THERMAL_VIOLATION"]
    assert frozen == cooled["DCGM_FI_DEV_THERMAL_VIOLATION"]  # throttling time stops rising


# --- every scenario: healthy devices read sensibly -----------------------------------------


@pytest.mark.parametrize("name", builtin_names())
def test_healthy_devices_are_sensible_and_never_look_ineffective(name: str) -> None:
    """Without a trace: temperatures 35-70 °C, SM active proportional to the work (so no
    healthy busy GPU looks ineffective), counters flat."""
    scenario = load(name)
    for node in scenario.nodes:
        if node.traces or node.exporter_restarts:
            continue
        first: dict[tuple[int, str], dict[str, float]] = {}
        for t in (0.0, 40.0, 90.0, 200.0):
            for row in at(scenario, t).exporter_rows(node.name, 0):
                v = dict(row.values)
                assert 35 <= v["DCGM_FI_DEV_GPU_TEMP"] <= 70
                assert 35 <= v["DCGM_FI_DEV_MEMORY_TEMP"] <= 75
                busy = v["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
                assert v["DCGM_FI_PROF_SM_ACTIVE"] == pytest.approx(0.85 * busy)
                counters = {c: v[c] for c in COUNTERS}
                key = (row.gpu, row.uuid if row.mig_instance_id is None else row.device)
                assert first.setdefault(key, counters) == counters


# --- the exporter text ---------------------------------------------------------------------


def test_new_families_carry_upstreams_names_types_and_help() -> None:
    served = {f.name: (f.type, f.help) for f in FAMILIES}
    assert {name: served[name] for name in UPSTREAM} == UPSTREAM
    assert served["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"][0] == "gauge"


def test_new_fields_in_the_exporter_text() -> None:
    text = render(Cluster(EFF, lambda: 80).exporter_rows("eff-b", 0))
    for name, (kind, help_text) in UPSTREAM.items():
        assert f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n" in text
    rows, rejected = read_rows(text)
    assert rejected == []
    by = {(r.name, r.labels["gpu"]): r for r in rows}
    assert by["DCGM_FI_PROF_SM_ACTIVE", "0"].line.rstrip().endswith("} 0.824500")  # a double: %f
    hot_since = 10 + 30 * (85 - 70) / (92 - 70)  # the trace reaches 85 °C here
    throttled_ns = round(traces.THROTTLED_SHARE * (80 - hot_since) * 1e9)
    assert by["DCGM_FI_DEV_THERMAL_VIOLATION", "0"].line.rstrip().endswith(f"}} {throttled_ns}")
    assert by["DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "0"].value == traces.THERMAL_REASONS
    assert by["DCGM_FI_DEV_ROW_REMAP_FAILURE", "1"].value == 1
    assert by["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "1"].value == 8
    assert by["DCGM_FI_DEV_MEMORY_TEMP", "0"].value == 99
    assert by["DCGM_FI_DEV_THERMAL_VIOLATION", "0"].labels["pod"] == "sim-ensemble-7f9c8d6b4-t7x2v"
    # families in DCGM field-id order, as the exporter prints them
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    order = [f.name for f in FAMILIES]
    assert names == sorted(names, key=order.index)


@pytest.mark.parametrize("name", builtin_names())
def test_agents_parser_still_reads_every_scenario(name: str) -> None:
    scenario = load(name)
    for t in (0.0, 61.0, 120.0):
        cluster = at(scenario, t)
        for node in scenario.nodes:
            rows = cluster.exporter_rows(node.name, 0)
            result = parse_exposition(render(rows), node=node.name, ts_ms=1)
            assert result.rejected == ()
            assert len(result.samples) == len({(r.uuid, r.mig_instance_id) for r in rows})


def test_mig_rows_carry_profiling_per_instance_and_device_fields_per_gpu() -> None:
    """Mixed's gpu-a GPU 3 is in MIG mode: DCGM_FI_PROF_* per GPU instance, the GPU's own fields
    (temperatures, clocks, counters) repeated on each instance's row, GPU_UTIL 0 there."""
    mixed = load("mixed")
    rows = [r for r in Cluster(mixed, lambda: 30).exporter_rows("gpu-a", 0) if r.gpu == 3]
    assert {r.mig_instance_id for r in rows} == set(mixed.node("gpu-a").mig.instances)  # type: ignore[union-attr]
    text = render(rows)
    parsed, rejected = read_rows(text)
    assert rejected == []
    sm = {r.labels["GPU_I_ID"]: r.value for r in parsed if r.name == "DCGM_FI_PROF_SM_ACTIVE"}
    gr = {
        r.labels["GPU_I_ID"]: r.value for r in parsed if r.name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    }
    assert set(sm) == {str(gi) for gi in mixed.node("gpu-a").mig.instances}  # type: ignore[union-attr]
    assert len(set(gr.values())) > 1  # instances busy differently
    assert all(sm[gi] == pytest.approx(0.85 * gr[gi]) for gi in sm)
    for field in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", *COUNTERS):
        assert len({r.value for r in parsed if r.name == field}) == 1, field
    assert {r.value for r in parsed if r.name == "DCGM_FI_DEV_GPU_UTIL"} == {0}


# --- scenario files ------------------------------------------------------------------------


def test_trace_and_counter_names_are_checked() -> None:
    node = {"name": "n", "model": "L4", "gpus": 1}
    with pytest.raises(ValueError, match="unknown trace kind 'melting'"):
        parse({"name": "x", "nodes": [{**node, "traces": [{"slot": "0", "kind": "melting"}]}]})
    with pytest.raises(ValueError, match="unknown counters"):
        parse({"name": "x", "nodes": [{**node, "counters": {"sbe": 3}}]})


def test_efficiency_scenario_spells_out_each_trace() -> None:
    kinds = {(n.name, t.slot): t.kind for n in EFF.nodes for t in n.traces}
    assert kinds == {
        ("eff-a", "0"): "busy-ineffective",
        ("eff-a", "1"): "memory-bound",
        ("eff-b", "0"): "thermal",
        ("eff-b", "1"): "remapped-rows",
    }
    assert EFF.node("eff-c").exporter_restarts == (ExporterRestart(60, 3),)
    assert not math.isnan(EFF.node("eff-c").counters[0][1])
