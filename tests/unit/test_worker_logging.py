"""The worker keeps the root logger at the level asked for (no Faust spinner)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import faust
import pytest

from streams.worker.transport import Worker


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    probe = logging.getLogger("gpuattr-test-root-probe")
    probe.addHandler(logging.StreamHandler(io.StringIO()))
    probe.setLevel(logging.WARNING)
    yield probe
    probe.handlers.clear()


@pytest.mark.parametrize(
    ("worker_class", "level_after"), [(faust.Worker, logging.DEBUG), (Worker, logging.WARNING)]
)
def test_a_warn_level_worker_leaves_the_root_logger_at_warn(
    logger: logging.Logger, worker_class: type[faust.Worker], level_after: int
) -> None:
    """Faust's own worker (first case) shows the defect: at WARN it turns the root logger to
    DEBUG for its spinner, so every library debug call builds a record. Ours does not."""
    stdout = io.StringIO()
    stdout.isatty = lambda: True  # type: ignore[method-assign]  # where the spinner would spin
    app = faust.App("gpuattr-test-logging", broker="memory://", store="memory://")
    worker = worker_class(app, loglevel="WARN", quiet=True, stdout=stdout)
    worker.on_setup_root_logger(logger, logging.WARNING)
    assert logger.level == level_after
