"""Handing the worker's outputs to Kafka: each record's outputs in one call, partitioned once.

A record's outputs (a scrape's attribution events, the spine's heartbeats) go to the producer
together (:meth:`Publisher.publish_all`): encoded, their partition found from a memo of the
producer's own partitioner (murmur2 of the key, as the Java client and aiokafka partition — so
every key lands exactly where a keyed send puts it; the memo is bounded, and keyed by the
topic's partition list, so a topic that grows is partitioned afresh), and appended to aiokafka's
accumulator without Faust's per-message wrapper. Half a keyed send's CPU was the partitioner
(``python -m bench.producer``). Per-output metrics are counted
per call, not per output.

At least once, as before: the sends land in the producer Faust flushes before every offset
commit, so no input is committed before its outputs are written; a write the producer gives up
on (after its own retries) stops the worker (``crash``), leaving the input uncommitted.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from aiokafka.partitioner import DefaultPartitioner

from streams.worker import selfmetrics

log = logging.getLogger(__name__)

#: keys remembered with their partition (devices, nodes, pools: bounded by what is live; alert
#: ids come and go and fall out)
PARTITION_MEMO = 1 << 16


@functools.lru_cache(maxsize=PARTITION_MEMO)
def partition_of(key: bytes, partitions: tuple[int, ...]) -> int:
    """The partition the producer's partitioner picks for ``key`` (pure: murmur2 of the key)."""
    return int(DefaultPartitioner()(key, list(partitions), list(partitions)))


class Producer(Protocol):
    """What is used of aiokafka's producer."""

    @property
    def client(self) -> Any: ...

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> asyncio.Future[Any]: ...


class Publisher:
    """Sends outputs to their topics (``topic_of``), keyed (``key_of``), encoded (``value_of``,
    ``None``: a tombstone), on the producer ``producer()`` returns (Faust's, once started)."""

    def __init__(
        self,
        producer: Callable[[], Producer],
        topic_of: Callable[[object], str],
        key_of: Callable[[Any], bytes],
        value_of: Callable[[Any], bytes | None],
        crash: Callable[[BaseException], None],
    ) -> None:
        self.producer = producer
        self.topic_of = topic_of
        self.key_of = key_of
        self.value_of = value_of
        self.crash = crash

    async def publish(self, out: object) -> None:
        await self.publish_all((out,))

    async def publish_all(self, outputs: Iterable[object]) -> None:
        producer = self.producer()
        kinds: Counter[str] = Counter()
        for out in outputs:
            topic = self.topic_of(out)
            key = self.key_of(out)
            parts = producer.client.cluster.partitions_for_topic(topic)
            partition = partition_of(key, tuple(sorted(parts))) if parts else None
            fut = await producer.send(topic, self.value_of(out), key=key, partition=partition)
            kind = type(out).__name__
            fut.add_done_callback(functools.partial(self._delivered, kind))
            kinds[kind] += 1
        for kind, n in kinds.items():
            selfmetrics.EVENTS_OUT.labels(kind).inc(n)

    def _delivered(self, kind: str, fut: asyncio.Future[Any]) -> None:
        """A write the producer gave up on (after its own retries) stops the worker.

        Carrying on could let a later commit cover the lost output; stopping leaves the input
        uncommitted, so the restarted worker (its Deployment restarts it) processes it again."""
        if fut.cancelled() or fut.exception() is None:
            return
        error = fut.exception()
        assert error is not None
        selfmetrics.ERRORS.labels("produce").inc()
        log.critical("publishing a %s failed, stopping the worker: %r", kind, error)
        self.crash(error)


def topics_by_type(names: Mapping[type, str]) -> Callable[[object], str]:
    """The topic of an output, by its type."""
    return lambda out: names[type(out)]
