"""Thermal, memory-fault and pcie-replays alerts over event time: decision tables (start, fire,
hysteresis, resolve, holders change, gone, counter reset), replay, and no state write in steady
state."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from contract.outputs import (
    Alert,
    AttributionEvent,
    ExporterView,
    Health,
    Holder,
    Telemetry,
    Usage,
)
from contract.records import replace
from infra.settings import AlertSettings
from streams.core.alerts.alerts import DeviceAlerts, step

POLICY = AlertSettings(
    thermal_gpu_temp_c=85,
    thermal_memory_temp_c=95,
    thermal_throttle_pct=10,
    thermal_hysteresis_c=3,
    thermal_window_s=60,
    pcie_replays_per_min=8,
    health_quiet_s=120,
)
H1 = Holder("ml", "a", "c", "nvidia.com/gpu", ("GPU-1",), 1, 1.0, "uid-a", "resolved")
H2 = replace(H1, pod="b", uid="uid-b")
COOL = Health(gpu_temp_c=60.0, memory_temp_c=70.0, thermal_throttle_pct=0.0)


def ev(ts_s: float, health: Health = COOL, holders: Sequence[Holder] = (H1,)) -> AttributionEvent:
    return AttributionEvent(
        node="n",
        ts_ms=int(ts_s * 1000),
        device_uuid="GPU-1",
        gpu_uuid="GPU-1",
        gpu_index=0,
        model="H100",
        mig=None,
        state="exclusive" if len(holders) == 1 else ("shared" if holders else "unallocated"),
        sharing="none" if len(holders) < 2 else "mps",
        replicas=None,
        tenant_count=len({h.pod for h in holders}),
        holders=tuple(holders),
        usage=Usage("device", 80.0, "DCGM_FI_DEV_GPU_UTIL", 500, 1000, 300, 60, 0),
        credit="holder",
        exporter=ExporterView((), True, ""),
        notes=(),
        summary="",
        health=health,
    )


def run(events: Sequence[AttributionEvent], policy: AlertSettings = POLICY) -> list[Alert]:
    state: DeviceAlerts | None = None
    out: list[Alert] = []
    for e in events:
        state, alerts = step(state, e, policy)
        out.extend(alerts)
    return out


def kinds(alerts: Sequence[Alert]) -> list[tuple[str, str, int]]:
    return [(a.kind, a.status, a.ts_ms // 1000) for a in alerts]


def series(healths: Sequence[Health], every_s: float = 10, **kw: object) -> list[AttributionEvent]:
    return [ev(i * every_s, h, **kw) for i, h in enumerate(healths)]  # type: ignore[arg-type]


def temp(
    gpu: float | None = 60.0, mem: float | None = 70.0, throttle: float | None = 0.0
) -> Health:
    return Health(gpu_temp_c=gpu, memory_temp_c=mem, thermal_throttle_pct=throttle)


HOT = temp(90.0)
GONE = Telemetry("unknown", "gone", "the node was deleted from the API")


def gone(ts_s: float) -> AttributionEvent:
    return replace(ev(ts_s, Health(), holders=()), state="unknown", origin="gone", telemetry=GONE)


@pytest.mark.parametrize(
    ("healths", "expected"),
    [
        pytest.param([HOT] * 8, [("thermal", "firing", 60)], id="fires-once-after-window"),
        pytest.param([HOT] * 6, [], id="window-not-yet-elapsed"),
        pytest.param([temp(84.9)] * 10, [], id="under-threshold"),
        pytest.param([temp(mem=95.0)] * 7, [("thermal", "firing", 60)], id="memory-temperature"),
        pytest.param([temp(throttle=10.0)] * 7, [("thermal", "firing", 60)], id="throttling"),
        pytest.param(
            [HOT] * 7 + [temp(81.9)],
            [("thermal", "firing", 60), ("thermal", "resolved", 70)],
            id="resolves-when-every-figure-clear",
        ),
        pytest.param(
            [HOT] * 7 + [temp(83.0), temp(82.0), temp(81.9)],
            [("thermal", "firing", 60), ("thermal", "resolved", 90)],
            id="no-resolve-inside-hysteresis-band",
        ),
        pytest.param(
            [HOT] * 7 + [temp(80.0, throttle=12.0)],
            [("thermal", "firing", 60)],
            id="throttling-still-over-keeps-it-open",
        ),
        pytest.param(
            [HOT] * 6 + [temp(83.0), HOT],
            [("thermal", "firing", 70)],
            id="band-while-pending-neither-fires-nor-ends",
        ),
        pytest.param(
            [HOT] * 3 + [temp(70.0)] + [HOT] * 7,
            [("thermal", "firing", 100)],
            id="cooling-restarts-window",
        ),
        pytest.param(
            [HOT] * 7 + [Health()] * 3,
            [("thermal", "firing", 60)],
            id="no-figure-never-ends",
        ),
    ],
)
def test_thermal(healths: list[Health], expected: list[tuple[str, str, int]]) -> None:
    assert kinds(run(series(healths))) == expected


def test_thermal_names_holders_at_the_time_and_figures() -> None:
    [alert] = run(series([HOT] * 7, holders=(H1, H2)))
    assert [h.pod for h in alert.holders] == ["a", "b"]
    assert alert.device_wide
    f = alert.figures
    assert (f.gpu_temp_c, f.temp_threshold_c, f.memory_temp_c) == (90.0, 85, 70.0)
    assert "GPU 90 °C" in alert.summary
    assert "2 tenants" in alert.summary


def test_thermal_holders_change_resolves_and_new_holders_start_their_own_window() -> None:
    events = [*series([HOT] * 7), *(ev(t, HOT, holders=(H2,)) for t in range(70, 140, 10))]
    alerts = run(events)
    assert kinds(alerts) == [
        ("thermal", "firing", 60),
        ("thermal", "resolved", 70),
        ("thermal", "firing", 130),
    ]
    assert alerts[1].holders == ()
    assert "holders changed" in alerts[1].summary
    assert "ml/b" not in alerts[1].summary
    assert [h.pod for h in alerts[2].holders] == ["b"]
    assert alerts[2].started_ms == 70_000


def fault(rows: float | None = 0.0, dbe: float | None = 0.0, failed: bool | None = False) -> Health:
    return replace(
        COOL,
        uncorrectable_remapped_rows_increase=rows,
        ecc_dbe_increase=dbe,
        row_remap_failure=failed,
        uncorrectable_remapped_rows=None if rows is None else 4.0,
    )


RESET = replace(
    fault(None, None),
    uncorrectable_remapped_rows=0.0,
    counter_resets=("uncorrectable_remapped_rows", "ecc_dbe_volatile", "pcie_replays"),
)


@pytest.mark.parametrize(
    ("healths", "expected"),
    [
        pytest.param([fault()] * 10, [], id="no-rise"),
        pytest.param(
            [fault(), fault(rows=1.0)] + [fault()] * 12,
            [("memory-fault", "firing", 10), ("memory-fault", "resolved", 130)],
            id="remapped-rows-rise-fires-at-once-resolves-after-quiet",
        ),
        pytest.param(
            [fault(dbe=2.0)] + [fault()] * 5 + [fault(dbe=1.0)] + [fault()] * 12,
            [("memory-fault", "firing", 0), ("memory-fault", "resolved", 180)],
            id="a-new-rise-keeps-it-open",
        ),
        pytest.param([fault(failed=True)] * 20, [], id="remap-failure-at-first-sight-is-history"),
        pytest.param(
            [fault(), fault(failed=None), fault(failed=True)] + [fault(failed=True)] * 12,
            [("memory-fault", "firing", 20), ("memory-fault", "resolved", 140)],
            id="remap-failure-turning-true-fires",
        ),
        pytest.param(
            [fault(), RESET, fault(None, None)] + [fault()] * 5,
            [],
            id="counter-reset-fires-nothing",
        ),
        pytest.param(
            [fault(), fault(rows=1.0), RESET] + [fault()] * 12,
            [("memory-fault", "firing", 10), ("memory-fault", "resolved", 130)],
            id="reset-while-open-is-not-a-rise",
        ),
    ],
)
def test_memory_fault(healths: list[Health], expected: list[tuple[str, str, int]]) -> None:
    assert kinds(run(series(healths))) == expected


def test_memory_fault_figures_and_summary() -> None:
    [alert] = run([ev(0, fault()), ev(10, fault(rows=2.0, dbe=1.0))])
    f = alert.figures
    assert (f.uncorrectable_remapped_rows, f.ecc_dbe_increase, f.row_remap_failure) == (
        4.0,
        1.0,
        False,
    )
    assert "uncorrectable remapped rows +2 (now 4)" in alert.summary
    assert "double-bit ECC errors +1" in alert.summary
    assert "ml/a" in alert.summary
    assert alert.window_s is None


def test_memory_fault_is_never_inherited_by_the_next_holder() -> None:
    events = [ev(0, fault()), ev(10, fault(rows=1.0)), ev(20, fault(failed=True))]
    events += [ev(t, fault(failed=True), holders=(H2,)) for t in range(30, 300, 10)]
    alerts = run(events)
    assert kinds(alerts) == [("memory-fault", "firing", 10), ("memory-fault", "resolved", 30)]
    assert [h.pod for h in alerts[0].holders] == ["a"]
    assert alerts[1].holders == ()
    assert "holders changed" in alerts[1].summary
    # a rise under the new holders is theirs
    later = run([*events, ev(300, fault(dbe=1.0, failed=True), holders=(H2,))])
    assert kinds(later)[-1] == ("memory-fault", "firing", 300)
    assert [h.pod for h in later[-1].holders] == ["b"]


def pcie(rate: float | None) -> Health:
    return replace(COOL, pcie_replays_per_min=rate)


@pytest.mark.parametrize(
    ("healths", "expected"),
    [
        pytest.param([pcie(7.9)] * 20, [], id="under-rate"),
        pytest.param(
            [pcie(0), pcie(8.0), pcie(30.0)] + [pcie(1.0)] * 13,
            [("pcie-replays", "firing", 10), ("pcie-replays", "resolved", 140)],
            id="fires-at-rate-resolves-after-quiet-below-it",
        ),
        pytest.param(
            [pcie(12.0)] + [pcie(None)] * 12,
            [("pcie-replays", "firing", 0), ("pcie-replays", "resolved", 120)],
            id="no-rate-known-is-quiet",
        ),
        pytest.param(
            [pcie(0), replace(pcie(None), counter_resets=("pcie_replays",)), pcie(0)],
            [],
            id="counter-reset-fires-nothing",
        ),
    ],
)
def test_pcie_replays(healths: list[Health], expected: list[tuple[str, str, int]]) -> None:
    assert kinds(run(series(healths))) == expected


def test_pcie_replays_holders_change_resolves_and_new_holders_their_own() -> None:
    events = [ev(0, pcie(20.0)), ev(10, pcie(20.0)), ev(20, pcie(1.0), holders=(H2,))]
    alerts = run(events)
    assert kinds(alerts) == [("pcie-replays", "firing", 0), ("pcie-replays", "resolved", 20)]
    assert alerts[1].holders == ()
    assert alerts[0].figures.pcie_threshold_per_min == 8
    assert "20/min" in alerts[0].summary


def test_a_device_gone_resolves_every_health_alert() -> None:
    sick = replace(HOT, uncorrectable_remapped_rows_increase=1.0, pcie_replays_per_min=50.0)
    events = [*series([HOT] * 6), ev(60, sick), gone(70)]
    alerts = run(events)
    assert sorted(kinds(alerts)) == sorted(
        [
            ("thermal", "firing", 60),
            ("memory-fault", "firing", 60),
            ("pcie-replays", "firing", 60),
            ("thermal", "resolved", 70),
            ("memory-fault", "resolved", 70),
            ("pcie-replays", "resolved", 70),
        ]
    )
    assert all("the device is gone" in a.summary for a in alerts if a.status == "resolved")


def test_events_without_a_reading_or_holders_unknown_change_nothing() -> None:
    blind = Telemetry("unknown", "exporter-unreachable", "dcgm-exporter failing")
    sick = replace(HOT, ecc_dbe_increase=3.0, pcie_replays_per_min=90.0)
    assert run([replace(ev(t, sick), telemetry=blind) for t in range(0, 300, 10)]) == []
    assert run([replace(ev(t, sick), state="unknown") for t in range(0, 300, 10)]) == []


def test_a_healthy_device_writes_no_state_in_steady_state() -> None:
    state: DeviceAlerts | None = None
    states = []
    for e in series([fault()] * 50):
        state, alerts = step(state, e, POLICY)
        assert alerts == []
        states.append(state)
    assert len({id(s) for s in states[1:]}) == 1  # the first sample's baseline, then nothing


def test_replaying_an_event_re_emits_its_alerts_with_the_same_ids() -> None:
    events = [ev(0, fault()), ev(10, fault(rows=1.0)), ev(20, fault())]
    state: DeviceAlerts | None = None
    first: list[Alert] = []
    for e in events[:2]:
        state, first = step(state, e, POLICY)
    again_state, again = step(state, events[1], POLICY)
    assert again == first
    assert again_state is state
