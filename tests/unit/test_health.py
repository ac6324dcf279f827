"""A device's health at one sample: decision tables for throttle shares, rates, increases,
clock-event reasons and marks, counter resets included."""

from __future__ import annotations

import pytest

from contract.inputs import DcgmSample, SinceLast
from contract.outputs import Activity, Health, Telemetry
from infra.settings import AlertSettings
from streams.core.devices.attribution import DeviceContext, DeviceFacts, attribute, describe
from streams.core.devices.health import clock_events, health

POLICY = AlertSettings.model_construct()  # 85 °C GPU, 95 °C memory, 10 % throttle, 8 / min


def sample(since: SinceLast | None = None, **fields: object) -> DcgmSample:
    return DcgmSample("n", 1000, "GPU-1", 0, "H100", "n", since_last=since, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        pytest.param(None, (), id="not-exported"),
        pytest.param(0, (), id="none"),
        pytest.param(0x1, ("gpu-idle",), id="idle"),
        pytest.param(0x4 | 0x40, ("sw-power-cap", "hw-thermal-slowdown"), id="power-and-heat"),
        pytest.param(
            0x1FF,
            (
                "gpu-idle",
                "applications-clocks-setting",
                "sw-power-cap",
                "hw-slowdown",
                "sync-boost",
                "sw-thermal-slowdown",
                "hw-thermal-slowdown",
                "hw-power-brake-slowdown",
                "display-clock-setting",
            ),
            id="every-nvml-reason",
        ),
        pytest.param(0x20 | 0x400, ("sw-thermal-slowdown", "bit-0x400"), id="unknown-bit-named"),
    ],
)
def test_clock_event_reasons(mask: int | None, names: tuple[str, ...]) -> None:
    assert clock_events(mask) == names


@pytest.mark.parametrize(
    ("since", "fields", "figures", "marks"),
    [
        pytest.param(None, {}, {}, (), id="first-scrape-nothing-known"),
        pytest.param(
            None,
            {"temp_c": 85.0},
            {"gpu_temp_c": 85.0},
            ("hot",),
            id="gpu-at-threshold-is-hot",
        ),
        pytest.param(
            None,
            {"temp_c": 84.9, "memory_temp_c": 95.0},
            {"memory_temp_c": 95.0},
            ("hot",),
            id="memory-at-threshold-is-hot",
        ),
        pytest.param(
            SinceLast(10_000, thermal_violation_us=1_500_000.0, power_violation_us=500_000.0),
            {},
            {"thermal_throttle_pct": 15.0, "power_throttle_pct": 5.0},
            ("throttled",),
            id="thermal-throttle-share",
        ),
        pytest.param(
            SinceLast(10_000, thermal_violation_us=999_000.0),
            {},
            {"thermal_throttle_pct": 9.99},
            (),
            id="throttle-under-threshold",
        ),
        pytest.param(
            SinceLast(10_000, thermal_violation_us=12_000_000.0),
            {},
            {"thermal_throttle_pct": 100.0},
            ("throttled",),
            id="throttle-share-at-most-100",
        ),
        pytest.param(
            None,
            {"clock_event_reasons": 0x40},
            {"clock_events": ("hw-thermal-slowdown",)},
            ("throttled",),
            id="thermal-clock-reason",
        ),
        pytest.param(
            None,
            {"clock_event_reasons": 0x4},
            {"clock_events": ("sw-power-cap",)},
            (),
            id="power-cap-is-not-thermal",
        ),
        pytest.param(
            SinceLast(30_000, pcie_replays=4.0),
            {},
            {"pcie_replays_per_min": 8.0},
            ("pcie-replays",),
            id="pcie-rate-at-threshold",
        ),
        pytest.param(
            SinceLast(60_000, pcie_replays=7.0),
            {},
            {"pcie_replays_per_min": 7.0},
            (),
            id="pcie-rate-under",
        ),
        pytest.param(
            SinceLast(10_000, uncorrectable_remapped_rows=1.0),
            {"uncorrectable_remapped_rows": 3.0},
            {"uncorrectable_remapped_rows": 3.0, "uncorrectable_remapped_rows_increase": 1.0},
            ("memory-fault",),
            id="remapped-rows-rose",
        ),
        pytest.param(
            SinceLast(10_000, uncorrectable_remapped_rows=0.0, ecc_dbe_volatile=0.0),
            {"uncorrectable_remapped_rows": 3.0, "ecc_dbe_volatile": 2.0},
            {"uncorrectable_remapped_rows": 3.0, "ecc_dbe_increase": 0.0},
            (),
            id="old-faults-no-rise",
        ),
        pytest.param(
            SinceLast(10_000, ecc_dbe_volatile=2.0),
            {},
            {"ecc_dbe_increase": 2.0},
            ("memory-fault",),
            id="double-bit-ecc-rose",
        ),
        pytest.param(
            None,
            {"row_remap_failure": True},
            {"row_remap_failure": True},
            ("memory-fault",),
            id="row-remap-failed",
        ),
        pytest.param(
            SinceLast(
                10_000,
                resets=("pcie_replays", "uncorrectable_remapped_rows", "ecc_dbe_volatile"),
            ),
            {"uncorrectable_remapped_rows": 0.0, "pcie_replays": 0.0},
            {
                "counter_resets": (
                    "pcie_replays",
                    "uncorrectable_remapped_rows",
                    "ecc_dbe_volatile",
                ),
                "pcie_replays_per_min": None,
                "uncorrectable_remapped_rows_increase": None,
                "ecc_dbe_increase": None,
            },
            (),
            id="counter-reset-marks-nothing",
        ),
        pytest.param(
            SinceLast(10_000, pcie_replays=500.0, ecc_dbe_volatile=3.0, resets=("pcie_replays",)),
            {},
            {"pcie_replays_per_min": None, "ecc_dbe_increase": 3.0},
            ("memory-fault",),
            id="a-reset-counter-figure-is-never-a-rise",
        ),
        pytest.param(
            SinceLast(0, pcie_replays=5.0, thermal_violation_us=5.0),
            {},
            {"pcie_replays_per_min": None, "thermal_throttle_pct": None},
            (),
            id="no-interval-no-rate",
        ),
    ],
)
def test_health(
    since: SinceLast | None,
    fields: dict[str, object],
    figures: dict[str, object],
    marks: tuple[str, ...],
) -> None:
    h = health(sample(since, **fields), POLICY)
    assert {k: getattr(h, k) for k in figures} == figures
    assert h.marks == marks


def test_figures_as_read() -> None:
    s = sample(
        SinceLast(15_000),
        temp_c=61.0,
        memory_temp_c=70.0,
        sm_clock_mhz=1980.0,
        power_w=512.5,
        correctable_remapped_rows=4.0,
    )
    h = health(s, POLICY)
    assert (h.gpu_temp_c, h.memory_temp_c, h.sm_clock_mhz, h.power_w) == (61, 70, 1980, 512.5)
    assert h.correctable_remapped_rows == 4.0
    assert (h.marks, h.counter_resets) == ((), ())


def test_events_carry_health_and_events_without_a_reading_keep_the_defaults() -> None:
    ev, _ = attribute(sample(temp_c=90.0), [], DeviceContext())
    assert (ev.health.gpu_temp_c, ev.health.marks) == (90.0, ("hot",))
    cooler = POLICY.model_copy(update={"thermal_gpu_temp_c": 95.0})
    ev, _ = attribute(sample(temp_c=90.0), [], DeviceContext(), cooler)
    assert ev.health.marks == ()
    beat = describe(
        DeviceFacts("n", "GPU-1"), 1000, [], DeviceContext(), "heartbeat", Telemetry("unknown")
    )
    assert (beat.activity, beat.health) == (Activity(), Health())


RISE = SinceLast(60_000, pcie_replays=0.0, uncorrectable_remapped_rows=0.0)


@pytest.mark.parametrize(
    ("since", "fields", "watched"),
    [
        pytest.param(None, {}, (), id="nothing-exported-nothing-judged"),
        pytest.param(None, {"temp_c": 40.0}, ("hot",), id="temperature-judges-hot-only"),
        pytest.param(None, {"clock_event_reasons": 0}, ("throttled",), id="reasons-exported-clear"),
        pytest.param(
            None, {"row_remap_failure": False}, ("memory-fault",), id="remap-flag-judges-faults"
        ),
        pytest.param(
            None,
            {"pcie_replays": 5.0, "uncorrectable_remapped_rows": 0.0},
            (),
            id="first-scrape-counters-not-judged",
        ),
        pytest.param(RISE, {}, ("memory-fault", "pcie-replays"), id="increases-known-judged"),
        pytest.param(
            SinceLast(60_000, pcie_replays=None, resets=("pcie_replays",)),
            {},
            (),
            id="reset-not-judged",
        ),
    ],
)
def test_a_mark_is_watched_only_where_its_fields_say(
    since: SinceLast | None, fields: dict[str, object], watched: tuple[str, ...]
) -> None:
    """A mark the sample cannot judge is unknown (no series, no 0), never reported clear."""
    h = health(sample(since, **fields), POLICY)
    assert h.watched == watched
    assert set(h.marks) <= set(h.watched)
