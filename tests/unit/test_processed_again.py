"""Every record processed again after a rebalance or a crash says what it said the first time.

A partition's next owner (or a restarted worker) recovers the tables from their changelogs and
starts from the last committed offset, so the records after it are processed again against state
that already holds them, and more (docs/RELIABILITY.md). Here the bench fleet (one node of each
sharing mode, a pod replaced on every node every four scrapes) is processed once in order; then,
for windows ending throughout the stream, a processor with a copy of the tables at the window's
end (no memos, as a recovered worker) processes the window again. Its attribution events and
alerts are those of the first time, record for record. A node's supply emits again what the
record emitted then (and may add the node's word now) while the record is among the last few that
emitted (``supply.REMEMBERED``: streams/core/demand/supply.py and its own replay tests).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import fields

from bench.fleet import stream
from contract.inputs import NodeSupply
from streams.core.demand import supply
from streams.core.flow.processor import Output, Processor, Tables

NODES, INTERVALS = 4, 12
#: records processed again, up to: 12 of each node's, a minute of its records (a scrape every 5 s,
#: two pod replacements)
WINDOW = 12 * NODES
#: windows short enough for every node's supply memory (its last four emissions)
SUPPLY_WINDOW = supply.REMEMBERED * NODES


def recovered(tables: Tables) -> Processor:
    """A processor on a copy of ``tables`` (their values are immutable: a shallow copy)."""
    return Processor(Tables(**{f.name: dict(getattr(tables, f.name)) for f in fields(Tables)}))


def _split(outputs: list[Output]) -> tuple[list[Output], Counter[NodeSupply]]:
    return [o for o in outputs if not isinstance(o, NodeSupply)], Counter(
        o for o in outputs if isinstance(o, NodeSupply)
    )


def test_every_record_processed_again_from_up_to_a_minute_back_says_the_same() -> None:
    records = list(stream(NODES, INTERVALS, start_ms=1_700_000_000_000))
    calm = Processor(Tables.in_memory())
    first = [calm.handle(r) for r in records]
    assert sum(len(o) for o in first) > 600
    ahead = Processor(Tables.in_memory())
    windows = 0
    for end, record in enumerate(records):
        ahead.handle(record)
        if end % 8:
            continue
        for start in range(max(0, end - WINDOW), end + 1):
            again = recovered(ahead.tables)
            for i in range(start, end + 1):
                said, supplied = _split(first[i])
                says, supplies = _split(again.handle(records[i]))
                assert says == said, (i, start, end, type(records[i]).__name__)
                if end - start < SUPPLY_WINDOW:
                    assert not supplied - supplies, (i, start, end)
            windows += 1
    assert windows > 1_000
