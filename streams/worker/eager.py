"""A coroutine's first step run at once, in the caller's task; the rest, if there is any, handed
on as an awaitable that continues it exactly where it stopped.

Faust's fetcher hands every consumed message to the conductor through ``Service.wait_first``:
four tasks (the handler, the flow's suspension, the service's stop and crash) and an
``asyncio.wait`` per message, although the handler nearly always ends in its first step (a put
into a stream's queue with room). :class:`streams.worker.transport.Consumer` runs that first
step here and pays for the tasks only when the handler has to wait: a worker whose record loop
does nothing spent 97 µs per consumed record without it and 54 with it (``bench.floor``, four
alternating pairs; bench.run).
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any


class Started:
    """Either a coroutine's result (it ended in its first step: ``done``) or the awaitable that
    continues it (``rest``)."""

    __slots__ = ("done", "rest", "result")

    def __init__(self, done: bool, result: Any, rest: Continued | None) -> None:
        self.done = done
        self.result = result
        self.rest = rest


def first_step(coro: Coroutine[Any, Any, Any]) -> Started:
    """Run ``coro`` until it first waits. Its exception, if it fails in that step, is raised."""
    try:
        waiting_on = coro.send(None)
    except StopIteration as stop:
        return Started(True, stop.value, None)
    return Started(False, None, Continued(coro, waiting_on))


class Continued:
    """A started coroutine, awaitable once: awaiting it (in a task, or from a coroutine) first
    passes up what the coroutine was waiting on when it stopped, then steps it as a task would —
    every value sent and every exception thrown (a cancellation included) goes to the coroutine."""

    __slots__ = ("_coro", "_waiting_on")

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting_on: Any) -> None:
        self._coro = coro
        self._waiting_on = waiting_on

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, value = self._coro, self._waiting_on
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation, or a future's exception
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as stop:
                    return stop.value

    def close(self) -> None:
        """Never awaited: close the coroutine (no "never awaited" warning, its ``finally``
        runs)."""
        self._coro.close()
