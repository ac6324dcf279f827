"""The consumer thread never lets a position move past records nobody will deliver.

A fetch asked for before a rebalance can return after it (aiokafka waits out the reassignment,
then drains the old generation's partitions from the new assignment's positions). Faust drops
such records with the positions already past them; for a table's changelog that left recovery
waiting for events that never came. These tests drive :class:`ConsumerThread._fetch_records`
over a stand-in for aiokafka's consumer whose fetch can rebalance or stop the flow mid-call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Set
from dataclasses import dataclass, field
from typing import Any

from aiokafka.structs import TopicPartition

from streams.worker.transport import ConsumerThread

CHANGELOG = TopicPartition("t.worker-pods-changelog", 0)
STREAM = TopicPartition("t.inputs", 1)


@dataclass(frozen=True)
class Record:
    offset: int


@dataclass
class Subscription:
    assignment: object


@dataclass
class Subscriptions:
    subscription: Subscription | None

    @contextlib.contextmanager
    def fetch_context(self) -> Iterator[None]:
        yield


@dataclass
class Fetcher:
    """aiokafka's fetcher as the thread sees it: buffered records per partition; ``during``
    runs inside ``fetched_records`` (a rebalance, a stopped flow)."""

    subscriptions: Subscriptions
    buffered: dict[TopicPartition, list[Record]]
    during: Callable[[], None] = lambda: None
    _closed: bool = False

    @property
    def _subscriptions(self) -> Subscriptions:
        return self.subscriptions

    async def fetched_records(
        self,
        partitions: Set[TopicPartition],
        timeout: float = 0,  # noqa: ASYNC109 (aiokafka's signature)
        max_records: Any = None,
    ) -> dict[TopicPartition, list[Record]]:
        self.during()
        return {tp: list(rs) for tp, rs in self.buffered.items() if tp in partitions and rs}


@dataclass
class AioConsumer:
    _fetcher: Fetcher
    assigned: set[TopicPartition]
    seeks: list[tuple[TopicPartition, int]] = field(default_factory=list)
    _closed: bool = False

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        assert tp in self.assigned, f"seek of an unassigned {tp}"
        self.seeks.append((tp, offset))


@dataclass
class FaustConsumer:
    flow_active: bool = True


def thread(faust: FaustConsumer) -> ConsumerThread:
    t: ConsumerThread = ConsumerThread.__new__(ConsumerThread)
    t.consumer = faust
    return t


def setup(
    during: Callable[[AioConsumer, FaustConsumer], None] = lambda c, f: None,
) -> tuple[ConsumerThread, AioConsumer, FaustConsumer]:
    faust = FaustConsumer()
    subs = Subscriptions(Subscription(assignment=object()))
    fetcher = Fetcher(
        subs,
        {CHANGELOG: [Record(0), Record(1), Record(2)], STREAM: [Record(7), Record(8)]},
    )
    consumer = AioConsumer(fetcher, {CHANGELOG, STREAM})
    fetcher.during = lambda: during(consumer, faust)
    return thread(faust), consumer, faust


async def test_a_quiet_fetch_returns_its_records_and_seeks_nothing() -> None:
    t, consumer, _ = setup()
    got = await t._fetch_records(consumer, {CHANGELOG, STREAM}, timeout=1.0)
    assert got == {CHANGELOG: [Record(0), Record(1), Record(2)], STREAM: [Record(7), Record(8)]}
    assert consumer.seeks == []


async def test_a_fetch_that_straddles_a_rebalance_is_handed_back_to_its_first_offsets() -> None:
    def rebalance(consumer: AioConsumer, _: FaustConsumer) -> None:
        subs = consumer._fetcher.subscriptions
        subs.subscription = Subscription(assignment=object())  # a new generation's assignment

    t, consumer, _ = setup(rebalance)
    got = await t._fetch_records(consumer, {CHANGELOG, STREAM}, timeout=1.0)
    assert got == {}
    assert sorted(consumer.seeks) == sorted([(CHANGELOG, 0), (STREAM, 7)])


async def test_a_partition_no_longer_assigned_is_not_sought() -> None:
    def rebalance(consumer: AioConsumer, _: FaustConsumer) -> None:
        consumer._fetcher.subscriptions.subscription = Subscription(assignment=object())
        consumer.assigned = {CHANGELOG}  # the stream partition went to another worker

    t, consumer, _ = setup(rebalance)
    assert await t._fetch_records(consumer, {CHANGELOG, STREAM}, timeout=1.0) == {}
    assert consumer.seeks == [(CHANGELOG, 0)]


async def test_a_fetch_returning_to_a_stopped_flow_is_handed_back() -> None:
    def stop_flow(_: AioConsumer, faust: FaustConsumer) -> None:
        faust.flow_active = False  # on_partitions_revoked began while the fetch ran

    t, consumer, _ = setup(stop_flow)
    assert await t._fetch_records(consumer, {CHANGELOG}, timeout=1.0) == {}
    assert consumer.seeks == [(CHANGELOG, 0)]


async def test_a_fetch_begun_mid_rebalance_and_drained_after_it_is_handed_back() -> None:
    t, consumer, _ = setup()
    consumer._fetcher.subscriptions.subscription = None  # reassignment in progress

    def assigned(c: AioConsumer, _: FaustConsumer) -> None:
        c._fetcher.subscriptions.subscription = Subscription(assignment=object())

    consumer._fetcher.during = lambda: assigned(consumer, FaustConsumer())
    assert await t._fetch_records(consumer, {STREAM}, timeout=1.0) == {}
    assert consumer.seeks == [(STREAM, 7)]


async def test_an_empty_active_set_fetches_nothing() -> None:
    t, consumer, _ = setup()
    assert await t._fetch_records(consumer, set(), timeout=1.0) == {}
    assert consumer.seeks == []
