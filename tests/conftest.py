"""Shared fixtures: the real local Kafka broker (one per session) and an asyncio task-leak check."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import pytest
from hypothesis import settings

from tests.kafka_fixture import kafka_bootstrap, secure_broker

# CI runs the fuzz tests on a fixed sequence of examples (a red CI means a code change, not a
# lucky draw); local runs draw new examples every time and keep failures in .hypothesis/.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

__all__ = ["kafka_bootstrap", "secure_broker"]


@pytest.fixture(autouse=True)
async def _no_leaked_tasks(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks running behind it (as kopf's suite does)."""
    before = set(asyncio.all_tasks())
    yield
    current = asyncio.current_task()

    def leaked() -> set[asyncio.Task[object]]:
        return {t for t in asyncio.all_tasks() - before if t is not current and not t.done()}

    # Cancelled tasks may still be unwinding (an aiohttp connector closing, a watch's finally):
    # wait on the tasks themselves, bounded, re-reading the set since an unwinding task may
    # start another. The failure names exactly the tasks that were still running at the bound.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10.0
    pending = leaked()
    while pending and loop.time() < deadline:
        await asyncio.wait(pending, timeout=deadline - loop.time())
        pending = leaked()
    if pending:
        names = sorted(t.get_name() + ":" + repr(t.get_coro()) for t in pending)
        pytest.fail(f"{request.node.nodeid} leaked asyncio tasks: {names}")
