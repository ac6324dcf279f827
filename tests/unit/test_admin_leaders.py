"""Topic creation returns only once every partition has a leader (no NotLeaderForPartition
errors from clients started right after it), and the worker's group timing is validated."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from infra.admin import leaderless
from infra.settings import WorkerSettings


def topic(name: str, leaders: list[int], error: int = 0) -> dict[str, object]:
    return {
        "topic": name,
        "error_code": error,
        "partitions": [
            {"partition": p, "leader": leader, "error_code": 0} for p, leader in enumerate(leaders)
        ],
    }


@pytest.mark.parametrize(
    ("described", "missing"),
    [
        pytest.param([topic("a", [1, 1]), topic("b", [1])], [], id="all-led"),
        pytest.param([topic("a", [1, -1]), topic("b", [1])], ["a[1]"], id="one-leaderless"),
        pytest.param([topic("a", [1])], ["a[1]", "b[0]"], id="not-listed-yet"),
    ],
)
def test_leaderless_partitions(described: list[dict[str, object]], missing: list[str]) -> None:
    assert leaderless(described, {"a": 2, "b": 1}) == missing


def test_session_timeout_and_heartbeat_are_checked() -> None:
    assert WorkerSettings().session_timeout_s == 10.0
    with pytest.raises(ValidationError, match="at most a third"):
        WorkerSettings(session_timeout_s=6.0, heartbeat_interval_s=3.0)
    with pytest.raises(ValidationError):
        WorkerSettings(session_timeout_s=2.0)
