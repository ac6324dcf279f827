"""What a record emitted, remembered for the record's replay: every such memory's bound and the
rules they keep (node-supply, node-stack, the demand stage, a device's alerts, a node's beats,
departures and scrapes, a partition's gone nodes and ticks). Pure.

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

Memories whose entries are made in the order they are applied, never for a record older than the
ones held (a node's beats, a device's alert emissions, a partition's gone nodes), keep the last
few made (:func:`latest`); memories of times keep the newest (:func:`newest`).
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
T = TypeVar("T")

#: emissions remembered per input key (node-supply, node-stack, the demand stage's demand records,
#: a device's alerts) and transitions per node (beats, departures): more than can happen between
#: two commits of a partition (seconds apart; windows and cool-downs are minutes)
REMEMBERED = 4
#: alert emissions remembered per resource by the demand stage (more than move between two
#: commits: the demand records of later input never push an alert out before its input commits)
ALERTS_REMEMBERED = 16
#: nodes gone remembered per partition (their keys are deleted, so the partition keeps them)
GONE_REMEMBERED = 16
#: quanta whose first scrape a node remembers: two minutes at the 15 s quantum, past the longest a
#: partition went uncommitted in a storm of rebalances (~50 s)
SCRAPES_REMEMBERED = 8
#: accepted ticks a partition remembers (a tick processed again finds the same one before it)
TICKS_REMEMBERED = 4
#: removals remembered per resource by the demand stage (a replay reaching further back may bring
#: a bound pod back until its own bound record, processed again too, removes it)
REMOVALS_REMEMBERED = 64


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


def latest(entry: T, held: tuple[T, ...], limit: int = REMEMBERED) -> tuple[T, ...]:
    """``held`` with ``entry`` first, the last ``limit`` made (newest first, in the order made)."""
    return (entry, *held)[:limit]


def newest(times: tuple[int, ...], ts_ms: int, limit: int) -> tuple[int, ...]:
    """``times`` with ``ts_ms``, the ``limit`` latest (newest first)."""
    return tuple(sorted((*times, ts_ms), reverse=True)[:limit])
