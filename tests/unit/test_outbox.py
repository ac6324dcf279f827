"""The worker's outbox: outputs and changelog records go to the producer as whole per-partition
batches, in the order they were queued, each to the partition a keyed send would have chosen;
a drain starts at a size bound or after the linger, and before a commit; a batch the producer
gives up on stops the worker; a record too large is dead-lettered small in its place (never sent,
or refused by the broker), and the worker goes on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka.errors import MessageSizeTooLargeError, RecordListTooLargeError, RecordTooLargeError
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.producer.message_accumulator import BatchBuilder
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from contract import codec
from contract.outputs import OutputRefused
from streams.worker.outbox import Outbox, partition_of
from streams.worker.publisher import Publisher


@given(key=st.binary(min_size=1, max_size=80), count=st.integers(1, 64))
def test_the_memo_partitions_exactly_as_the_producers_partitioner(key: bytes, count: int) -> None:
    parts = list(range(count))
    assert partition_of(key, tuple(parts)) == DefaultPartitioner()(key, parts, parts)


@dataclass
class Cluster:
    partitions: dict[str, set[int]]

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self.partitions.get(topic)


@dataclass
class Client:
    cluster: Cluster


@dataclass
class FakeBatch:
    """aiokafka's BatchBuilder as the outbox fills it: full after ``room`` records."""

    room: int
    records: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)
    stamps: list[int | None] = field(default_factory=list)
    closed: bool = False

    def append(self, *, timestamp: int | None, key: bytes | None, value: bytes | None) -> Any:
        assert not self.closed
        if len(self.records) >= self.room:
            return None
        self.records.append((key, value))
        self.stamps.append(timestamp)
        return object()

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeProducer:
    """aiokafka's producer as the outbox sees it: each batch's future is the test's to settle;
    ``known`` is what its metadata holds (``partitions_for`` learns ``later`` too)."""

    client: Client
    later: dict[str, set[int]] = field(default_factory=dict)
    batch_room: int = 1000
    sent: list[tuple[str, int, list[tuple[bytes | None, bytes | None]]]] = field(
        default_factory=list
    )
    batches: list[FakeBatch] = field(default_factory=list)
    futures: list[asyncio.Future[Any]] = field(default_factory=list)
    gate: asyncio.Event | None = None  # set: send_batch waits for it (a busy accumulator)
    submitted: asyncio.Event = field(default_factory=asyncio.Event)  # a batch was handed over

    def create_batch(self) -> FakeBatch:
        return FakeBatch(self.batch_room)

    async def send_batch(self, batch: FakeBatch, topic: str, *, partition: int) -> Any:
        assert batch.closed, "a batch is closed before it is submitted (no linger)"
        if self.gate is not None:
            await self.gate.wait()
        self.sent.append((topic, partition, batch.records))
        self.batches.append(batch)
        self.submitted.set()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut

    async def partitions_for(self, topic: str) -> set[int]:
        self.client.cluster.partitions[topic] = self.later[topic]
        return self.later[topic]


MAX = 1 << 20  # the most bytes a record may have: none of these tests' but the size tests' reach it


def keyed(key: bytes, parts: int) -> int:
    return int(DefaultPartitioner()(key, list(range(parts)), []))


def counted(kind: str) -> float:
    return REGISTRY.get_sample_value("gpuattr_worker_events_out_total", {"kind": kind}) or 0.0


def errors() -> float:
    return REGISTRY.get_sample_value("gpuattr_worker_errors_total", {"kind": "produce"}) or 0.0


def producer(**topics: set[int]) -> FakeProducer:
    return FakeProducer(Client(Cluster(dict(topics))))


def outbox_over(
    prod: Any, crash: Callable[[BaseException], None] = lambda e: None, **bounds: Any
) -> Outbox:
    """An outbox over ``prod`` with roomy bounds, a long linger and a ``dead`` dead-letter topic;
    a test names only the bounds it is about."""
    settings: dict[str, Any] = {
        "max_records": 100,
        "max_bytes": 1 << 20,
        "linger_s": 60,
        "max_record_bytes": MAX,
        "dead_letter_topic": "dead",
    }
    return Outbox(lambda: prod, crash, **(settings | bounds))


async def test_records_go_as_one_batch_per_partition_in_the_order_queued() -> None:
    prod = producer(out=set(range(8)))
    outbox = outbox_over(prod)
    keys = [f"node-a/GPU-{i}".encode() for i in range(20)]
    for i, key in enumerate(keys):
        outbox.add("out", key, b"v%d" % i)
    outbox.add("changelog", b"node-a", b"state", partition=3)
    outbox.add("changelog", b"node-a", None, partition=3)  # a tombstone, after the write
    assert prod.sent == []  # nothing awaited per record
    assert len(outbox) == 22
    await outbox.drain()
    assert len(outbox) == 0
    by_partition: dict[tuple[str, int], list[tuple[bytes | None, bytes | None]]] = {}
    for topic, partition, records in prod.sent:
        assert (topic, partition) not in by_partition, "one batch per partition"
        by_partition[(topic, partition)] = records
    for p in range(8):
        expected = [(k, b"v%d" % i) for i, k in enumerate(keys) if keyed(k, 8) == p]
        assert by_partition.get(("out", p), []) == expected
    assert by_partition[("changelog", 3)] == [(b"node-a", b"state"), (b"node-a", None)]


async def test_a_full_batch_goes_and_the_partitions_next_records_follow_it() -> None:
    prod = producer()
    prod.batch_room = 2
    outbox = outbox_over(prod)
    for i in range(5):
        outbox.add("changelog", b"k", b"%d" % i, partition=0)
    await outbox.drain()
    assert [records for _, _, records in prod.sent] == [
        [(b"k", b"0"), (b"k", b"1")],
        [(b"k", b"2"), (b"k", b"3")],
        [(b"k", b"4")],
    ]


async def test_a_topic_the_producer_does_not_know_yet_is_partitioned_at_the_drain() -> None:
    prod = producer()
    prod.later["new"] = set(range(4))
    outbox = outbox_over(prod)
    outbox.add("new", b"node-b", b"x")
    await outbox.drain()
    outbox.add("new", b"node-b", b"y")  # now known: partitioned when queued
    await outbox.drain()
    assert prod.sent == [
        ("new", keyed(b"node-b", 4), [(b"node-b", b"x")]),
        ("new", keyed(b"node-b", 4), [(b"node-b", b"y")]),
    ]


async def test_a_drain_starts_at_the_bound_without_the_caller_waiting() -> None:
    prod = producer()
    outbox = outbox_over(prod, max_records=3)
    for i in range(3):
        outbox.add("changelog", b"k", b"%d" % i, partition=0)
    assert prod.sent == []  # started, not run: add() never awaits
    await outbox.room()  # under twice the bound: returns at once
    await asyncio.wait_for(prod.submitted.wait(), 5)  # the background drain, on the loop
    assert [r for _, _, r in prod.sent] == [[(b"k", b"0"), (b"k", b"1"), (b"k", b"2")]]


async def test_the_caller_waits_past_twice_the_bound_and_order_holds_across_drains() -> None:
    prod = producer()
    prod.gate = asyncio.Event()  # the accumulator is busy: a drain stays under way
    outbox = outbox_over(prod, max_records=2)
    outbox.add("c", b"k", b"0", partition=0)
    outbox.add("c", b"k", b"1", partition=0)  # the bound: a drain starts
    await asyncio.sleep(0)  # it takes the queue and waits at the gate
    for i in range(2, 6):
        outbox.add("c", b"k", b"%d" % i, partition=0)
    assert len(outbox) == 4
    room = asyncio.create_task(outbox.room())
    await asyncio.sleep(0)
    assert not room.done()  # over twice the bound: the caller waits
    prod.gate.set()
    await asyncio.wait_for(room, 5)
    await outbox.drain()
    flat = [v for _, _, records in prod.sent for _, v in records]
    assert flat == [b"%d" % i for i in range(6)]


async def test_the_linger_drains_a_worker_that_is_not_saturated() -> None:
    prod = producer()
    outbox = outbox_over(prod, linger_s=0.01)
    outbox.add("c", b"k", b"v", partition=0)
    await asyncio.wait_for(prod.submitted.wait(), 5)
    assert prod.sent == [("c", 0, [(b"k", b"v")])]


async def test_each_record_is_stamped_with_the_time_it_was_queued_not_the_drains() -> None:
    """A record's CreateTime is when the worker made it: a drain up to the linger later does not
    move it (the benchmark's span, and any consumer reading timestamps, see when work was done)."""
    now = [1_700_000_000.0]
    prod = producer(out={0, 1})
    outbox = outbox_over(prod, clock=lambda: now[0])
    outbox.add("out", b"a", b"1", partition=0)
    now[0] += 0.25
    outbox.add("out", b"b", b"2", partition=0)
    outbox.add("out", b"c", b"3")  # partitioned by key (known topic)
    now[0] += 5.0  # the drain comes later
    await outbox.drain()
    stamps = {r: s for b in prod.batches for r, s in zip(b.records, b.stamps, strict=True)}
    assert stamps == {
        (b"a", b"1"): 1_700_000_000_000,
        (b"b", b"2"): 1_700_000_000_250,
        (b"c", b"3"): 1_700_000_000_250,
    }


async def test_the_stamp_is_what_aiokafkas_batch_builder_takes() -> None:
    """Conformance of the double: aiokafka's own BatchBuilder takes the outbox's stamp (an int of
    milliseconds, the type its pure-Python builder insists on) and writes it as the record's
    timestamp."""
    prod = producer(out={0})
    outbox = outbox_over(prod, clock=lambda: 1_700_000_000.1234)
    outbox.add("out", b"a", b"1", partition=0)
    await outbox.drain()
    (batch,) = prod.batches
    assert isinstance(batch.stamps[0], int)
    real = BatchBuilder(16384, 0)
    meta = real.append(timestamp=batch.stamps[0], key=b"a", value=b"1")
    assert meta is not None
    assert meta.timestamp == 1_700_000_000_123


async def test_outputs_are_counted_by_kind_when_handed_over() -> None:
    prod = producer(t=set(range(2)))
    outbox = outbox_over(prod)
    publisher = Publisher(outbox, lambda out: "t", lambda out: out.encode(), lambda out: None)
    before = counted("str")
    await publisher.publish_all(["a", "b"])
    assert counted("str") == before  # queued, not yet handed over
    await outbox.drain()
    assert counted("str") == before + 2
    assert sorted(k for _, _, records in prod.sent for k, _ in records) == [b"a", b"b"]


async def test_a_batch_the_producer_gives_up_on_stops_the_worker() -> None:
    prod = producer()
    crashed: list[BaseException] = []
    outbox = outbox_over(prod, crashed.append)
    before = errors()
    outbox.add("c", b"k", b"v", partition=0)
    await outbox.drain()
    error = RuntimeError("broker gone")
    prod.futures[0].set_exception(error)
    await asyncio.sleep(0)  # the done callbacks run on the loop
    assert crashed == [error]
    assert errors() == before + 1


async def test_a_drain_that_fails_in_the_background_stops_the_worker() -> None:
    class Gone(FakeProducer):
        async def send_batch(self, batch: FakeBatch, topic: str, *, partition: int) -> Any:
            raise RuntimeError("producer closed")

    prod = Gone(Client(Cluster({})))
    crashed: list[BaseException] = []
    stopped = asyncio.Event()

    def crash(exc: BaseException) -> None:
        crashed.append(exc)
        stopped.set()

    outbox = outbox_over(prod, crash, max_records=1)
    before = errors()
    outbox.add("c", b"k", b"v", partition=0)
    await asyncio.wait_for(stopped.wait(), 5)
    assert [str(e) for e in crashed] == ["producer closed"]
    assert errors() == before + 1


async def test_a_drain_starts_at_the_byte_bound_and_the_caller_waits_past_twice_it() -> None:
    prod = producer()
    prod.gate = asyncio.Event()
    outbox = outbox_over(prod, max_bytes=10)
    outbox.add("c", b"k", b"x" * 10, partition=0)  # the byte bound: a drain starts
    await asyncio.sleep(0)  # it takes the queue and waits at the gate
    outbox.add("c", b"k", b"y" * 20, partition=0)  # twice the bytes queued behind it
    room = asyncio.create_task(outbox.room())
    await asyncio.sleep(0)
    assert not room.done()
    prod.gate.set()
    await asyncio.wait_for(room, 5)
    await outbox.drain()
    assert [v for _, _, records in prod.sent for _, v in records] == [b"x" * 10, b"y" * 20]


async def test_a_topic_that_grows_is_partitioned_afresh_after_a_drain() -> None:
    prod = producer(out={0, 1})
    outbox = outbox_over(prod)
    key = next(k for k in (b"k%d" % i for i in range(100)) if keyed(k, 2) != keyed(k, 16))
    outbox.add("out", key, b"before")
    await outbox.drain()
    prod.client.cluster.partitions["out"] = set(range(16))  # the topic grew
    outbox.add("out", key, b"after")
    await outbox.drain()
    assert [(p, r) for _, p, r in prod.sent] == [
        (keyed(key, 2), [(key, b"before")]),
        (keyed(key, 16), [(key, b"after")]),
    ]


def refusals(cause: str) -> float:
    labels = {"cause": cause}
    return REGISTRY.get_sample_value("gpuattr_worker_outputs_refused_total", labels) or 0.0


def dead_letters(prod: FakeProducer) -> list[OutputRefused]:
    records = [r for topic, _, batch in prod.sent if topic == "dead" for r in batch]
    return [codec.decode(value) for _, value in records if value is not None]


async def test_a_record_over_the_size_limit_is_not_sent_but_dead_lettered_small() -> None:
    prod = producer(flags={0, 1}, dead={0, 1})
    crashed: list[BaseException] = []
    outbox = outbox_over(prod, crashed.append, max_record_bytes=1000)
    before = refusals("too-large")
    outbox.add("flags", b"gpu-a", b"x" * 1_120_000, kind="TelemetryRefused")
    outbox.add("flags", b"gpu-a", b"y" * 10, kind="TelemetryRefused")  # the next still goes
    await outbox.drain()
    assert [(t, [v for _, v in r]) for t, _, r in prod.sent if t == "flags"] == [
        ("flags", [b"y" * 10])
    ]
    (letter,) = dead_letters(prod)
    assert (letter.topic, letter.key, letter.size_bytes, letter.limit_bytes, letter.cause) == (
        "flags",
        "gpu-a",
        1_120_005,
        1000,
        "too-large",
    )
    assert max(len(v or b"") for _, _, r in prod.sent for _, v in r) < 1000
    assert refusals("too-large") == before + 1
    assert crashed == []


@pytest.mark.parametrize(
    "error",
    [MessageSizeTooLargeError(), RecordListTooLargeError(), RecordTooLargeError()],
    ids=["message-too-large", "record-list-too-large", "record-too-large"],
)
async def test_a_batch_the_broker_refuses_for_its_size_is_dead_lettered_not_a_crash(
    error: Exception,
) -> None:
    prod = producer(dead={0})
    crashed: list[BaseException] = []
    outbox = outbox_over(prod, crashed.append)
    before, failed = refusals("broker-refused"), errors()
    outbox.add("c", b"k1", b"v" * 50, partition=2)
    outbox.add("c", b"k2", b"w" * 60, partition=2)
    await outbox.drain()
    prod.futures[0].set_exception(error)
    await asyncio.sleep(0)  # the done callbacks run on the loop
    await outbox.drain()  # the dead letters queued in their place
    assert crashed == []
    assert [(d.topic, d.partition, d.key, d.size_bytes, d.cause) for d in dead_letters(prod)] == [
        ("c", 2, "k1", 52, "broker-refused"),
        ("c", 2, "k2", 62, "broker-refused"),
    ]
    assert all(type(error).__name__ in d.error for d in dead_letters(prod))
    assert refusals("broker-refused") == before + 2
    assert errors() == failed  # not a produce failure: nothing stops
