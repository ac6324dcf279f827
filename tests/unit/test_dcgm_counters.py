"""The counter rule (agents.dcgm.counters): increases since the last scrape, resets, first sight.

Decision tables: one previous/current pair per case, then sequences of scrapes (a reset followed
by a rise). An increase is never negative and a counter that went down is a reset, not a rise.
"""

from __future__ import annotations

from typing import Any, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.dcgm.counters import COUNTERS, since_last, with_since_last
from contract.inputs import CounterName, DcgmSample, SinceLast
from contract.records import replace

T0 = 1_700_000_000_000


def sample(ts_ms: int = T0, **counters: Any) -> DcgmSample:
    base = DcgmSample(
        node="node-1",
        ts_ms=ts_ms,
        uuid="GPU-1",
        gpu_index=0,
        model="L4",
        hostname="node-1",
        device="nvidia0",
        pci_bus_id="",
        driver_version="",
        mig_instance_id=None,
        mig_profile=None,
        util_pct=None,
        gr_engine_active=None,
        fb_used_mib=None,
        fb_free_mib=None,
        power_w=None,
        temp_c=None,
        xid=None,
    )
    return replace(base, **counters)


def test_every_counter_is_a_sample_total_and_an_increase() -> None:
    assert set(COUNTERS) == set(get_args(CounterName))
    for name in COUNTERS:
        assert hasattr(sample(), name)
        assert hasattr(SinceLast(1), name)


# (previous counters or None for first sight, previous ts offset, current counters, expected)
PAIRS: list[Any] = [
    pytest.param(None, 0, {"pcie_replays": 5}, None, id="first-sight"),
    pytest.param(
        {"pcie_replays": 1},
        15_000,
        {"pcie_replays": 4},
        SinceLast(15_000, pcie_replays=3),
        id="rise",
    ),
    pytest.param(
        {"pcie_replays": 5},
        15_000,
        {"pcie_replays": 5},
        SinceLast(15_000, pcie_replays=0),
        id="unchanged-is-zero",
    ),
    pytest.param(
        {"uncorrectable_remapped_rows": 8},
        15_000,
        {"uncorrectable_remapped_rows": 0},
        SinceLast(15_000, resets=("uncorrectable_remapped_rows",)),
        id="went-down-is-a-reset-not-a-rise",
    ),
    pytest.param(
        {},
        15_000,
        {"ecc_dbe_volatile": 2},
        SinceLast(15_000),
        id="missing-before-no-increase-no-reset",
    ),
    pytest.param(
        {"ecc_dbe_volatile": 2},
        15_000,
        {},
        SinceLast(15_000),
        id="missing-now-no-increase-no-reset",
    ),
    pytest.param({}, 15_000, {}, SinceLast(15_000), id="none-exported"),
    pytest.param({"pcie_replays": 1}, 0, {"pcie_replays": 4}, None, id="same-timestamp"),
    pytest.param({"pcie_replays": 1}, -1_000, {"pcie_replays": 4}, None, id="clock-went-back"),
    pytest.param(
        {"power_violation_us": 1_000.5, "thermal_violation_us": 10.0},
        1_000,
        {"power_violation_us": 251_000.5, "thermal_violation_us": 10.0},
        SinceLast(1_000, power_violation_us=250_000, thermal_violation_us=0),
        id="throttle-time-rises",
    ),
    pytest.param(
        {
            "pcie_replays": 3,
            "ecc_dbe_volatile": 1,
            "uncorrectable_remapped_rows": 2,
            "correctable_remapped_rows": 9,
            "power_violation_us": 100,
        },
        30_000,
        {
            "pcie_replays": 10,
            "ecc_dbe_volatile": 0,
            "uncorrectable_remapped_rows": 2,
            "correctable_remapped_rows": 1,
            "thermal_violation_us": 5,
        },
        SinceLast(
            30_000,
            pcie_replays=7,
            uncorrectable_remapped_rows=0,
            resets=("ecc_dbe_volatile", "correctable_remapped_rows"),
        ),
        id="mixed-rise-unchanged-resets-and-missing",
    ),
]


@pytest.mark.parametrize(("before", "ago_ms", "now", "expected"), PAIRS)
def test_since_last(
    before: dict[str, float] | None,
    ago_ms: int,
    now: dict[str, float],
    expected: SinceLast | None,
) -> None:
    previous = None if before is None else sample(T0 - ago_ms, **before)
    current = sample(T0, **now)
    assert since_last(previous, current) == expected
    filled = with_since_last(previous, current)
    assert filled.since_last == expected
    assert replace(filled, since_last=None) == current  # nothing else changed


# successive scrapes of one device: (pcie_replays per scrape, the increases published)
SEQUENCES: list[Any] = [
    pytest.param([2, 5, 9], [None, 3, 4], [(), (), ()], id="rising"),
    pytest.param([7, 7, 7], [None, 0, 0], [(), (), ()], id="flat"),
    pytest.param(
        [40, 2, 5],
        [None, None, 3],
        [(), ("pcie_replays",), ()],
        id="exporter-restart-then-rise",
    ),
    pytest.param(
        [40, 0, 0, 1],
        [None, None, 0, 1],
        [(), ("pcie_replays",), (), ()],
        id="reset-to-zero-stays-then-rises",
    ),
    pytest.param([3, None, 4], [None, None, None], [(), (), ()], id="gap-in-export"),
]


@pytest.mark.parametrize(("totals", "increases", "resets"), SEQUENCES)
def test_sequence_of_scrapes(
    totals: list[float | None],
    increases: list[float | None],
    resets: list[tuple[CounterName, ...]],
) -> None:
    previous: DcgmSample | None = None
    got_increases: list[float | None] = []
    got_resets: list[tuple[CounterName, ...]] = []
    for i, total in enumerate(totals):
        current = with_since_last(previous, sample(T0 + 15_000 * i, pcie_replays=total))
        got_increases.append(
            None if current.since_last is None else current.since_last.pcie_replays
        )
        got_resets.append(() if current.since_last is None else current.since_last.resets)
        previous = current
    assert got_increases == increases
    assert got_resets == resets


counter_values = st.one_of(st.none(), st.floats(0, 1e15))


@given(before=counter_values, now=counter_values)
def test_an_increase_is_never_negative_and_a_fall_is_always_a_reset(
    before: float | None, now: float | None
) -> None:
    got = since_last(sample(T0, pcie_replays=before), sample(T0 + 1, pcie_replays=now))
    assert got is not None
    assert got.pcie_replays is None or got.pcie_replays >= 0
    fell = before is not None and now is not None and now < before
    assert (got.resets == ("pcie_replays",)) == fell
    assert (got.pcie_replays is None) == (before is None or now is None or fell)
