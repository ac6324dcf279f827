"""What a record emitted, remembered for the record's replay: the one rule every such memory
keeps (node-supply, node-stack, the demand stage). Pure.

A worker's state writes and its outputs are flushed through different partitions, and an input
is committed only after both; after a crash the state may hold the writes of inputs whose
outputs never went out, and those inputs are processed again against the state they made
(docs/RELIABILITY.md). So what an input emitted is remembered by the input — its event time and
fingerprint — and processing it again emits that again.

The memory is bounded: the ``limit`` newest emissions **by their record's event time**, newest
first. Records processed in order make those the last ones made. A record processed again from
further back than the memory reaches — older than every one held, after a long stretch
uncommitted under a storm of rebalances — is left out instead of pushing newer ones out, so the
memory after the replay is the one a run without the crash left (the fault suite compares the
final tables of both). An emission already remembered keeps what it emitted first.
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
    """``held`` with ``emission``: the ``limit`` newest by event time, newest first (the one
    just made first among equals); unchanged when its record is remembered already."""
    if recall(held, emission.ts_ms, emission.by) is not None:
        return held
    ordered = sorted((emission, *held), key=lambda e: e.ts_ms, reverse=True)  # stable
    return tuple(ordered[:limit])


def recall(held: tuple[E, ...], ts_ms: int, by: str) -> E | None:
    """What the record (``ts_ms``, ``by``) emitted, if it is remembered."""
    return next((e for e in held if (e.ts_ms, e.by) == (ts_ms, by)), None)
