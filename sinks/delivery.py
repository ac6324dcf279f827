"""Deliver one alert to one destination: rate limit, retries with backoff and jitter, verdict.

A destination is a name and an ``async send(alert, payload)`` that raises
:class:`DeliveryError` on failure. :func:`deliver` never raises for a failed destination: it
returns ``Delivered`` or ``GaveUp`` (with the last error) for the dead-letter topic.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from contract.outputs import Alert
from infra.backoff import backoff_delay

log = logging.getLogger(__name__)


class DeliveryError(Exception):
    """A failed attempt. ``retryable`` False (e.g. HTTP 400/404) goes straight to dead-letter."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class Destination(Protocol):
    name: str

    async def send(self, alert: Alert, payload: bytes) -> None: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 8
    base_delay_s: float = 0.5
    max_delay_s: float = 60.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        """The wait before attempt ``attempt + 1`` (:func:`infra.backoff.backoff_delay`)."""
        return backoff_delay(attempt, self.base_delay_s, self.max_delay_s, rng)


@dataclass(frozen=True, slots=True)
class Delivered:
    attempts: int


@dataclass(frozen=True, slots=True)
class GaveUp:
    attempts: int
    last_error: str


class RateLimiter:
    """Token bucket per destination: ``rate_per_s`` sustained, ``burst`` at once."""

    def __init__(
        self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate_per_s
        self.burst = float(burst)
        self.tokens = float(burst)
        self.clock = clock
        self.stamp = clock()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            while True:
                now = self.clock()
                self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
                self.stamp = now
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                await asyncio.sleep((1 - self.tokens) / self.rate)


Sleep = Callable[[float], Awaitable[None]]


async def deliver(
    alert: Alert,
    payload: bytes,
    dest: Destination,
    limiter: RateLimiter,
    policy: RetryPolicy,
    rng: random.Random,
    sleep: Sleep = asyncio.sleep,
) -> Delivered | GaveUp:
    last = ""
    for attempt in range(1, policy.max_attempts + 1):
        await limiter.acquire()
        try:
            await dest.send(alert, payload)
            return Delivered(attempt)
        except DeliveryError as exc:
            last = str(exc)
            if not exc.retryable:
                log.error("%s refused alert %s for good: %s", dest.name, alert.id, last)
                return GaveUp(attempt, last)
            if attempt == policy.max_attempts:
                break
            wait = policy.delay(attempt, rng)
            log.warning(
                "%s: delivering alert %s failed (attempt %d/%d: %s); retrying in %.1fs",
                dest.name,
                alert.id,
                attempt,
                policy.max_attempts,
                last,
                wait,
            )
            await sleep(wait)
    log.error(
        "%s: giving up on alert %s after %d attempts: %s",
        dest.name,
        alert.id,
        policy.max_attempts,
        last,
    )
    return GaveUp(policy.max_attempts, last)
