"""Capture one logger's records inside ``@given`` tests (where caplog cannot be used)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class Captured(logging.Handler):
    """Collects the records of one logger (caplog is function-scoped, which Hypothesis forbids
    inside ``@given``)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self, level: int = logging.DEBUG) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= level]


@contextmanager
def captured(logger: str) -> Iterator[Captured]:
    handler = Captured()
    log = logging.getLogger(logger)
    old_level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)
