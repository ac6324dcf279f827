"""Memos for pure functions, sized by what is live rather than by history.

An LRU memo with a fixed cap keeps entries for pods and devices long gone: on a cluster whose
pods churn it fills to its cap and stays there (a 65,536-entry cap held ~30 MiB of gone pods'
identities after ~60k pod lifecycles, bench.run). A worker's working set is its live
devices and pods, each asked for at least once per scrape round; what matters is to drop what is
no longer asked for, however many keys were ever seen.

:class:`LiveMemo` keeps two generations. A call finds its result in the current generation, or in
the previous one (and moves it over: a key is in one generation only), or computes it. After
``factor`` times as many calls as the previous generation had entries (at least
``factor * floor``), the current generation becomes the previous one and the old previous one
is dropped. So an entry survives at least one full generation after its last use, a live key
asked for about once per round is kept as long as ``factor`` exceeds the calls per live key per
round, and what is held is the keys asked for in the last two generations: the live set plus the
churn of a few rounds, never the history.

Calls alone cannot tell a large live set still in its first round from keys never asked for
again (both are all misses), and a memo whose calls are mostly such keys would lengthen its
generations without end. ``maxsize`` is the hard bound, as an LRU's cap was: when the two
generations hold that many keys, the generation turns at once (the previous one dropped). So a
memo never holds more than an LRU of the same cap (a live set up to the cap fits), and on a
churning cluster much less.

Only for pure functions of hashable, positional arguments: a result is never stale, a dropped one
is recomputed the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
K = TypeVar("K")
V = TypeVar("V")

_MISSING: object = object()


class LiveMemo(Generic[P, R]):
    """A pure function, memoised over the keys asked for in its last two generations."""

    __slots__ = ("__wrapped__", "_current", "_left", "_previous", "factor", "floor", "maxsize")

    def __init__(self, fn: Callable[P, R], factor: int, floor: int, maxsize: int) -> None:
        if factor < 1 or floor < 1 or maxsize < 1:
            raise ValueError("a live memo wants factor, floor and maxsize of at least 1")
        self.__wrapped__ = fn
        self.factor = factor
        self.floor = floor
        self.maxsize = maxsize
        self._current: dict[object, R] = {}
        self._previous: dict[object, R] = {}
        self._left = factor * floor

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if kwargs:
            raise TypeError("a live memo takes positional arguments only")
        self._left -= 1
        if self._left < 0:
            self._rotate()
        current = self._current
        found = current.get(args, _MISSING)
        if found is not _MISSING:
            return found  # type: ignore[return-value]
        found = self._previous.pop(args, _MISSING)
        result: R = self.__wrapped__(*args, **kwargs) if found is _MISSING else found  # type: ignore[assignment]
        if len(current) + len(self._previous) >= self.maxsize:
            self._rotate()
            current = self._current
        current[args] = result
        return result

    def _rotate(self) -> None:
        self._previous = self._current
        self._current = {}
        self._left = self.factor * max(len(self._previous), self.floor)

    def size(self) -> int:
        """Keys held (both generations, apart): what the memo costs in memory."""
        return len(self._current) + len(self._previous)

    def clear(self) -> None:
        self._current = {}
        self._previous = {}
        self._left = self.factor * self.floor


def live_memo(
    maxsize: int, *, factor: int = 4, floor: int = 1024
) -> Callable[[Callable[P, R]], LiveMemo[P, R]]:
    """Decorate a pure function with a :class:`LiveMemo` of at most ``maxsize`` entries."""

    def wrap(fn: Callable[P, R]) -> LiveMemo[P, R]:
        return LiveMemo(fn, factor, floor, maxsize)

    return wrap


def keep_newest(memo: dict[K, V], key: K, value: V, most: int) -> None:
    """Insert as the newest entry of an insertion-ordered memo, the oldest dropped past
    ``most`` (the device frames' and a node's kept supply's bound)."""
    memo.pop(key, None)
    if len(memo) >= most:
        del memo[next(iter(memo))]
    memo[key] = value
