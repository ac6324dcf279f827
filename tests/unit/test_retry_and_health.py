"""The one backoff rule and the one source-health rule every collector uses."""

from __future__ import annotations

import logging
import random

import pytest

from agents.health import SourceHealth
from agents.selfmetrics import SOURCE_ERRORS, SOURCE_UP
from infra.backoff import Backoff, backoff_delay


@pytest.mark.parametrize(
    ("attempt", "low", "high"),
    [(1, 0.1, 0.2), (2, 0.2, 0.4), (3, 0.4, 0.8), (6, 3.2, 6.4), (7, 5.0, 10.0), (60, 5.0, 10.0)],
)
def test_delays_double_to_the_cap_with_equal_jitter(attempt: int, low: float, high: float) -> None:
    rng = random.Random(attempt)
    delays = [backoff_delay(attempt, 0.2, 10.0, rng) for _ in range(200)]
    assert all(low <= d <= high for d in delays)
    assert max(delays) - min(delays) > (high - low) / 2  # jittered, not one fixed step


def test_backoff_resets_after_a_success() -> None:
    backoff = Backoff(1.0, 8.0, random.Random(0))
    first = [backoff.next_delay() for _ in range(5)]
    assert 4.0 <= first[3] <= 8.0  # 1, 2, 4, 8, 8: doubled to the cap
    assert 4.0 <= first[4] <= 8.0
    backoff.reset()
    assert backoff.next_delay() <= 1.0


def test_an_outage_is_counted_every_time_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    health = SourceHealth("test-src", "test source", logging.getLogger("t.health"), lambda: now[0])
    errors = SOURCE_ERRORS.labels("test-src", "timeout")
    before = errors._value.get()
    with caplog.at_level(logging.INFO, logger="t.health"):
        for _ in range(3):
            health.failed("timeout", "no answer")
        assert SOURCE_UP.labels("test-src")._value.get() == 0
        health.failed("refused", "connection refused")  # a new reason: said again
        now[0] = 112.5
        health.ok()
        health.ok()  # healthy stays quiet
    assert errors._value.get() == before + 3
    assert SOURCE_UP.labels("test-src")._value.get() == 1
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert lines == [
        ("WARNING", "test source failing (timeout): no answer; retrying"),
        ("WARNING", "test source failing (refused): connection refused; retrying"),
        ("INFO", "test source answers again after 12.5s (refused, 4 failure(s))"),
    ]
    assert not health.down
