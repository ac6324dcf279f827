"""A worker whose consumer has not started yet owns nothing, and says so: /metrics and /readyz
answer from :func:`streams.worker.api.assignment` instead of failing with a 500."""

from __future__ import annotations

from typing import Any

from faust.exceptions import ConsumerNotStarted
from faust.types import TP

from streams.worker.api import assignment


class _Consumer:
    def __init__(self, assigned: set[TP] | None) -> None:
        self.assigned = assigned

    def assignment(self) -> set[TP]:
        if self.assigned is None:
            raise ConsumerNotStarted("Consumer thread not yet started")
        return self.assigned


class _App:
    def __init__(self, assigned: set[TP] | None) -> None:
        self.consumer = _Consumer(assigned)


def app(assigned: set[TP] | None) -> Any:
    return _App(assigned)


def test_a_consumer_not_started_owns_nothing() -> None:
    assert assignment(app(None)) == set()


def test_a_started_consumer_owns_its_assignment() -> None:
    tps = {TP("t.node-events", 0), TP("t.node-events", 3)}
    assert assignment(app(tps)) == tps
