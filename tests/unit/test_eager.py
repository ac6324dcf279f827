"""A coroutine's first step run at once, the rest continued exactly (streams.worker.eager), and
the fetcher's wait that uses it (streams.worker.transport.Consumer.wait_first): the same results
as Faust's own wait_first, in every way a handler can end."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from typing import Any

import pytest

from streams.worker import eager
from streams.worker.transport import App


async def test_a_coroutine_that_ends_in_its_first_step_is_done_without_a_task() -> None:
    ran: list[str] = []

    async def handler() -> int:
        ran.append("handler")
        return 7

    started = eager.first_step(handler())
    assert (started.done, started.result, started.rest) == (True, 7, None)
    assert ran == ["handler"]


async def test_a_coroutine_that_waits_continues_where_it_stopped() -> None:
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def handler() -> int:
        steps.append("first")
        value = await fut
        steps.append("second")
        await asyncio.sleep(0)  # a bare yield to the loop, as a task takes it
        return value + 1

    started = eager.first_step(handler())
    assert not started.done
    assert steps == ["first"]
    assert started.rest is not None
    task = asyncio.ensure_future(started.rest)
    await asyncio.sleep(0)
    assert not task.done()
    fut.set_result(41)
    assert await asyncio.wait_for(task, 5) == 42
    assert steps == ["first", "second"]


async def test_an_exception_of_what_it_waits_on_reaches_the_coroutine() -> None:
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def handler() -> str:
        try:
            await fut
        except KeyError as exc:
            return f"caught {exc.args[0]}"
        return "not caught"

    started = eager.first_step(handler())
    assert started.rest is not None
    task = asyncio.ensure_future(started.rest)
    await asyncio.sleep(0)
    fut.set_exception(KeyError("k"))
    assert await asyncio.wait_for(task, 5) == "caught k"


def _stopped_at_a_future() -> tuple[eager.Started, asyncio.Future[int], list[str]]:
    """A handler started and stopped at a future it awaits, and what its ``finally`` records."""
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    cleaned: list[str] = []

    async def handler() -> None:
        try:
            await fut
        finally:
            cleaned.append("finally")

    started = eager.first_step(handler())
    assert started.rest is not None
    return started, fut, cleaned


async def test_cancelling_the_continuation_cancels_the_coroutine_and_runs_its_finally() -> None:
    started, fut, cleaned = _stopped_at_a_future()
    assert started.rest is not None
    task = asyncio.ensure_future(started.rest)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["finally"]
    assert fut.cancelled()  # the cancellation went down to what the coroutine awaited


async def test_a_failure_in_the_first_step_is_raised_at_once() -> None:
    async def handler() -> None:
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        eager.first_step(handler())


async def test_a_continuation_never_awaited_closes_its_coroutine() -> None:
    started, _, cleaned = _stopped_at_a_future()
    assert started.rest is not None
    started.rest.close()
    assert cleaned == ["finally"]


@pytest.fixture
async def consumer() -> AsyncIterator[Any]:
    """Faust's consumer on the running loop. Built without one, it would take whatever loop the
    event-loop policy holds — after a test that ran ``asyncio.run``, a new loop that never runs,
    so Faust's ``wait_first`` tasks would wait forever (as they did after the integration tests
    on CI)."""
    app = App("eager-test", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    app.loop = asyncio.get_running_loop()
    consumer = app.consumer
    consumer.loop = app.loop
    yield consumer
    consumer._thread.thread_loop.close()  # its thread's loop, made with it and never started


async def test_the_fetchers_wait_on_a_handler_done_at_once(consumer: Any) -> None:
    async def handler() -> int:
        return 5

    flow = consumer.suspend_flow.wait()
    result = await consumer.wait_first(handler(), flow)
    assert (result.results, result.stopped) == ([5], False)
    assert inspect.getcoroutinestate(flow) == inspect.CORO_CLOSED  # not needed: closed unstarted


async def test_a_handler_done_at_once_still_gives_the_loop_a_turn(consumer: Any) -> None:
    """The stream's agent takes each event before the fetcher hands over the next (as Faust's
    tasks let it): a fetcher that never yielded filled the buffer and stalled on a paused
    partition."""
    turns: list[str] = []
    others: list[asyncio.Task[None]] = []

    async def other() -> None:
        turns.append("other")

    async def handler() -> None:
        others.append(asyncio.ensure_future(other()))  # runs at the next turn of the loop

    await consumer.wait_first(handler(), consumer.suspend_flow.wait())
    assert turns == ["other"]
    assert others[0].done()


async def test_the_fetchers_wait_on_a_handler_that_waits(consumer: Any) -> None:
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def handler() -> int:
        return await fut * 2

    wait = asyncio.ensure_future(consumer.wait_first(handler(), consumer.suspend_flow.wait()))
    await asyncio.sleep(0)
    assert not wait.done()
    fut.set_result(21)
    result = await asyncio.wait_for(wait, 5)
    assert (result.results, result.stopped) == ([42], False)


async def test_a_suspended_flow_abandons_a_waiting_handler_as_faust_does(consumer: Any) -> None:
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    cleaned = asyncio.Event()

    async def handler() -> None:
        try:
            await fut
        finally:
            cleaned.set()

    consumer.suspend_flow.clear()
    wait = asyncio.ensure_future(consumer.wait_first(handler(), consumer.suspend_flow.wait()))
    await asyncio.sleep(0)
    consumer.suspend_flow.set()
    result = await asyncio.wait_for(wait, 5)
    assert result.results == [True]  # the flow's wait won
    assert not result.stopped
    await asyncio.wait_for(cleaned.wait(), 5)  # the handler cancelled, its finally ran
    assert fut.cancelled()


async def test_a_stopped_service_reports_stopped_even_if_the_handler_ended(consumer: Any) -> None:
    async def handler() -> int:
        return 1

    consumer._stopped.set()
    try:
        result = await consumer.wait_first(handler(), consumer.suspend_flow.wait())
    finally:
        consumer._stopped.clear()
    assert (result.done, result.results, result.stopped) == ([], [], True)


async def test_a_handler_failing_at_once_raises_and_closes_the_other_waits(consumer: Any) -> None:
    async def handler() -> None:
        raise RuntimeError("defect")

    flow = consumer.suspend_flow.wait()
    with pytest.raises(RuntimeError, match="defect"):
        await consumer.wait_first(handler(), flow)
    assert inspect.getcoroutinestate(flow) == inspect.CORO_CLOSED
