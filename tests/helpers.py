"""Test helpers: wait on conditions with bounded timeouts (tests never sleep to wait)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def wait_for(
    condition: Callable[[], T | bool | None],
    timeout_s: float = 10.0,
    every_s: float = 0.02,
    what: str | Callable[[], str] = "condition",
) -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout_s``.

    ``what`` may be a callable, evaluated only on failure (e.g. to attach process logs)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result  # type: ignore[return-value]
        if time.monotonic() > deadline:
            text = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {text}")
        await asyncio.sleep(every_s)


async def wait_for_async(
    condition: Callable[[], Awaitable[T | bool | None]],
    timeout_s: float = 10.0,
    every_s: float = 0.05,
    what: str | Callable[[], str] = "condition",
) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        result = await condition()
        if result:
            return result  # type: ignore[return-value]
        if time.monotonic() > deadline:
            text = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {text}")
        await asyncio.sleep(every_s)


class _Response:
    def __init__(self, body: bytes) -> None:
        self.status, self.reason, self._body = 200, "OK", body

    async def read(self) -> bytes:
        return self._body

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class BodySession:
    """Just enough of ``aiohttp.ClientSession`` for ``DcgmCollector.scrape_once``: every GET
    answers 200 with ``body``."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def get(self, url: str, timeout: object) -> _Response:
        return _Response(self.body)
