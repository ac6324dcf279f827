"""The lag gauge survives a rebalance that takes a partition away while it reads the lag.

The consumer here keeps aiokafka's contract: ``position`` is awaited (the consumer thread
answers) and raises ``IllegalStateError`` for a partition not assigned when it is asked;
``highwater`` asserts that the partition is assigned. A rebalance lands during a ``position``
await, as one did on CI, where the gauge timer's ``AssertionError`` stopped the worker.
"""

from __future__ import annotations

import asyncio

from aiokafka.errors import IllegalStateError
from faust.types import TP

from streams.worker.lag import consumer_lags

TOPIC = "t.node-events"


class _Consumer:
    def __init__(self, assigned: set[TP], rebalance_to: set[TP] | None = None) -> None:
        self.assigned = set(assigned)
        self.rebalance_to = rebalance_to  # the assignment after the first position() await
        self.highwaters = {tp: 100 + tp.partition for tp in assigned}
        self.positions = {tp: 90 for tp in assigned}

    def assignment(self) -> set[TP]:
        return set(self.assigned)

    async def position(self, tp: TP) -> int:
        if tp not in self.assigned:
            raise IllegalStateError(f"No current assignment for partition {tp}")
        await asyncio.sleep(0)  # the consumer thread answers; the loop runs other tasks
        if self.rebalance_to is not None:
            self.assigned, self.rebalance_to = self.rebalance_to, None
        return self.positions[tp]

    def highwater(self, tp: TP) -> int:
        assert tp in self.assigned, "Partition is not assigned"  # as aiokafka does
        return self.highwaters[tp]


class _App:
    def __init__(self, consumer: _Consumer) -> None:
        self.consumer = consumer


async def test_lag_of_every_owned_partition_of_the_input_topic() -> None:
    owned = {TP(TOPIC, 0), TP(TOPIC, 2), TP("t.worker-pods-changelog", 0)}
    lags = await consumer_lags(_App(_Consumer(owned)), TOPIC)
    assert lags == {"0": 10, "2": 12}


async def test_a_partition_revoked_during_the_position_await_is_skipped_not_a_crash() -> None:
    tps = [TP(TOPIC, p) for p in range(4)]
    for revoked in tps:  # whichever the set's order reads first, the rebalance lands under it
        consumer = _Consumer(set(tps), rebalance_to=set(tps) - {revoked})
        lags = await consumer_lags(_App(consumer), TOPIC)
        assert lags == {str(tp.partition): 10 + tp.partition for tp in tps if tp != revoked}


async def test_a_partition_revoked_before_its_turn_is_skipped() -> None:
    a, b = TP(TOPIC, 0), TP(TOPIC, 1)
    consumer = _Consumer({a, b}, rebalance_to=set())  # everything moves during the first await
    assert await consumer_lags(_App(consumer), TOPIC) == {}
