"""What a record emitted, remembered for the record's replay: the one rule every such memory
keeps (node-supply, node-stack, the demand stage). Pure.

A worker's state writes and its outputs are flushed through different partitions, and an input
is committed only after both; after a crash the state may hold the writes of inputs whose
outputs never went out, and those inputs are processed again against the state they made
(docs/RELIABILITY.md). So what an input emitted is remembered by the input — its event time and
fingerprint — and processing it again emits that again.

The memory is bounded: ``limit`` emissions, the last made first (so the first is the last
word). When it is full, the one whose record is the oldest by event time makes room. A record
processed again from further back than the memory reaches (older than every emission held, after
a long stretch uncommitted under a storm of rebalances) is not remembered at all. So it pushes
no newer emission out and is not taken for the last word: the memory after the replay is the one
a run without the crash left (the fault suite compares the final tables of both). A record a
little out of order (another producer's clock) is remembered as the last word, as it should be.
An emission already remembered keeps what it emitted first.
"""

from __future__ import annotations

from typing import Protocol, TypeVar


class Remembered(Protocol):
    """An emission, named by its record: event time and fingerprint."""

    @property
    def ts_ms(self) -> int: ...

    @property
    def by(self) -> str: ...


E = TypeVar("E", bound=Remembered)


def remember(emission: E, held: tuple[E, ...], limit: int) -> tuple[E, ...]:
    """``held`` with ``emission`` first, at most ``limit`` (the oldest by event time leaves, the
    one made earliest among equals); unchanged when its record is remembered already, or when
    the memory is full and the record is older than every one held."""
    if recall(held, emission.ts_ms, emission.by) is not None:
        return held
    if len(held) >= limit and all(emission.ts_ms < e.ts_ms for e in held):
        return held
    made = (emission, *held)
    if len(made) <= limit:
        return made
    oldest = min(range(len(made)), key=lambda i: (made[i].ts_ms, -i))
    return made[:oldest] + made[oldest + 1 :]


def recall(held: tuple[E, ...], ts_ms: int, by: str) -> E | None:
    """What the record (``ts_ms``, ``by``) emitted, if it is remembered."""
    return next((e for e in held if (e.ts_ms, e.by) == (ts_ms, by)), None)
