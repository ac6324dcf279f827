"""One retry rule for every loop that waits before trying again: capped exponential backoff with
equal jitter. Delay ``n`` (from 1) is drawn from ``[d/2, d]`` with ``d = min(max_s, first_s *
2**(n-1))``: retries from many agents spread out, and none waits less than half its step."""

from __future__ import annotations

import asyncio
import random


def backoff_delay(attempt: int, first_s: float, max_s: float, rng: random.Random) -> float:
    """The wait before retry number ``attempt`` (1 for the first retry)."""
    step = min(max_s, first_s * 2 ** max(0, attempt - 1))
    return rng.uniform(step / 2, step)


class Backoff:
    """The delays of one retry loop: :meth:`sleep` waits the next, :meth:`reset` after a success."""

    def __init__(self, first_s: float, max_s: float, rng: random.Random | None = None) -> None:
        self.first_s = first_s
        self.max_s = max_s
        self.attempt = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        self.attempt += 1
        return backoff_delay(self.attempt, self.first_s, self.max_s, self._rng)

    async def sleep(self) -> float:
        delay = self.next_delay()
        await asyncio.sleep(delay)
        return delay

    def reset(self) -> None:
        self.attempt = 0
