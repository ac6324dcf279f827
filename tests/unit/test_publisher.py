"""The worker's publisher: a record's outputs go to the producer together, each to the
partition a keyed send would have chosen; a write the producer gives up on stops the worker."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from streams.worker.publisher import Publisher, partition_of


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
class FakeProducer:
    """aiokafka's producer as the publisher sees it: each send's future is the test's to settle."""

    client: Client
    sent: list[tuple[str, bytes | None, bytes | None, int | None]] = field(default_factory=list)
    futures: list[asyncio.Future[Any]] = field(default_factory=list)

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> asyncio.Future[Any]:
        self.sent.append((topic, key, value, partition))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut


@dataclass(frozen=True)
class Out:
    key: str
    value: str | None


class OtherOut(Out):
    pass


def counted(kind: str) -> float:
    return REGISTRY.get_sample_value("gpuattr_worker_events_out_total", {"kind": kind}) or 0.0


def publisher(producer: FakeProducer, crashed: list[BaseException]) -> Publisher:
    return Publisher(
        lambda: producer,
        lambda out: "known" if isinstance(out, OtherOut) else "unknown",
        lambda out: out.key.encode(),
        lambda out: out.value.encode() if out.value is not None else None,
        crashed.append,
    )


async def test_a_records_outputs_go_in_order_each_to_its_keys_partition() -> None:
    producer = FakeProducer(Client(Cluster({"known": set(range(8))})))
    crashed: list[BaseException] = []
    before = counted("OtherOut"), counted("Out")
    outs = [OtherOut("node-a/GPU-1", "e1"), OtherOut("node-a/GPU-2", None), Out("node-b", "x")]
    await publisher(producer, crashed).publish_all(outs)
    assert producer.sent == [
        ("known", b"node-a/GPU-1", b"e1", DefaultPartitioner()(b"node-a/GPU-1", [*range(8)], [])),
        ("known", b"node-a/GPU-2", None, DefaultPartitioner()(b"node-a/GPU-2", [*range(8)], [])),
        # a topic whose partitions the producer does not know yet: it partitions the key itself
        ("unknown", b"node-b", b"x", None),
    ]
    assert (counted("OtherOut"), counted("Out")) == (before[0] + 2, before[1] + 1)
    for fut in producer.futures:
        fut.set_result(None)
    await asyncio.sleep(0)  # the done callbacks run on the loop
    assert crashed == []


async def test_a_write_the_producer_gives_up_on_stops_the_worker() -> None:
    producer = FakeProducer(Client(Cluster({"known": {0}})))
    crashed: list[BaseException] = []
    errors = REGISTRY.get_sample_value("gpuattr_worker_errors_total", {"kind": "produce"}) or 0.0
    await publisher(producer, crashed).publish(OtherOut("k", "v"))
    error = RuntimeError("broker gone")
    producer.futures[0].set_exception(error)
    await asyncio.sleep(0)
    assert crashed == [error]
    after = REGISTRY.get_sample_value("gpuattr_worker_errors_total", {"kind": "produce"})
    assert after == errors + 1
