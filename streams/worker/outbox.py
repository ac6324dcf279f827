"""The worker's outbox: every record it writes, handed to aiokafka as whole per-partition batches.

Both kinds of write go through it: the outputs of the records it processes (attribution events,
alerts, flags, node status, supply, demand; :mod:`streams.worker.publisher`) and its tables'
changelog records (:class:`streams.worker.faust_codecs.RecordTable`). :meth:`Outbox.add` only
appends an encoded record to its partition's queue: nothing is awaited per record, and no
per-record future, callback or Faust wrapper is made. The queues go to the producer together
(:meth:`Outbox.drain`): one closed ``BatchBuilder`` per topic partition (more when one fills up),
submitted with ``send_batch`` — one delivery future per batch. A drain starts

- when the queues hold :attr:`Outbox.max_records` records or :attr:`Outbox.max_bytes` bytes of
  values (in a task: processing goes on meanwhile; the agent waits, :meth:`Outbox.room`, only
  past twice either — backpressure: the memory it holds is bounded),
- ``linger_s`` after the first record queued since the last drain (a worker that is not saturated
  sends within that time), and
- before every offset commit and rebalance: :class:`streams.worker.transport.Producer` drains the
  outbox before Faust flushes the producer and commits. So no input is committed before every
  record it caused is in the producer and flushed — at least once, as with a send per record.

Time: each record carries the time it was queued (milliseconds since the epoch) as its Kafka
``CreateTime`` — when the worker made it, not when a drain up to ``linger_s`` later handed it over;
so a consumer that reads the timestamps (as the benchmark's measured span does) sees when the
output was made.

Order: a partition's records are submitted in the order they were added (one drain at a time;
records added during a drain go in the next), so a changelog key's writes, and a device's
events, keep their order. A record whose topic's partitions the producer does not know yet is
queued without one and partitioned at the drain by :func:`partition_of` — the producer's own
partitioner (murmur2 of the key, as the Java client and a keyed send choose), memoized and
bounded, keyed by the topic's partition list so that a topic that grows is partitioned afresh.
A batch the producer gives up on (after its own retries) stops the worker (``crash``): carrying on
could let a later commit cover the lost records, so the input stays uncommitted and the restarted
worker processes it again.

Size: no record larger than :attr:`Outbox.max_record_bytes` (key and value; the output topics'
``max.message.bytes`` must be at least that) is handed over. Such a record is not queued: a small
``output.refused`` record naming its topic, key, size and the limit goes to the dead-letter topic
in its place, counted (``gpuattr_worker_outputs_refused_total{cause="too-large"}``) and logged.
A batch the producer or broker still refuses for its size (``MessageSizeTooLargeError``,
``RecordListTooLargeError``, ``RecordTooLargeError``) is dead-lettered the same way, record by
record (``cause="broker-refused"``), and the worker goes on: the same input would make the same
record again, so stopping would only crash-loop its partition. Those dead letters are queued when
the batch's delivery fails, inside the producer's flush: the flush before a commit
(:meth:`Outbox.settle`) drains and flushes again until none is left behind, so the commit covers
them. Any other failure still stops the worker.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiokafka.errors import MessageSizeTooLargeError, RecordListTooLargeError, RecordTooLargeError
from aiokafka.partitioner import DefaultPartitioner

from contract import codec
from contract.bounds import cut
from contract.outputs import OutputRefusalCause, OutputRefused
from streams.core.memo import live_memo
from streams.worker import selfmetrics

log = logging.getLogger(__name__)

#: what the producer or broker says of a record or batch too large for it
TOO_LARGE = (MessageSizeTooLargeError, RecordListTooLargeError, RecordTooLargeError)


#: keys remembered with their partition while they are produced (devices, nodes, pools); alert
#: ids come and go and fall out (streams.core.memo: by what is live, not by every key seen)
@live_memo(1 << 16)
def partition_of(key: bytes, partitions: tuple[int, ...]) -> int:
    """The partition the producer's partitioner picks for ``key`` (pure: murmur2 of the key)."""
    return int(DefaultPartitioner()(key, list(partitions), list(partitions)))


class Batch(Protocol):
    """aiokafka's ``BatchBuilder``, as the outbox fills it."""

    def append(self, *, timestamp: int | None, key: bytes | None, value: bytes | None) -> Any: ...
    def close(self) -> None: ...


class Cluster(Protocol):
    def partitions_for_topic(self, topic: str) -> set[int] | None: ...


class Client(Protocol):
    @property
    def cluster(self) -> Cluster: ...


class BatchProducer(Protocol):
    """What the outbox uses of aiokafka's producer."""

    @property
    def client(self) -> Client: ...
    def create_batch(self) -> Batch: ...
    async def send_batch(
        self, batch: Batch, topic: str, *, partition: int
    ) -> asyncio.Future[Any]: ...
    async def partitions_for(self, topic: str) -> set[int]: ...


#: (key, value, CreateTime in ms) of one queued record; a value of ``None`` is a tombstone
Entry = tuple[bytes | None, bytes | None, int]


class Outbox:
    """Queues encoded records per topic partition and hands them to ``producer()`` (aiokafka's,
    once started) as whole batches. ``max_records``: a drain starts at that many queued records;
    ``linger_s``: at most that long after the first record queued; ``crash``: a batch the producer
    gave up on, or a drain that failed, stops the worker. ``max_bytes``: a drain starts at that
    many bytes of queued values, too. ``clock``: wall time in seconds, read once per queued record
    for its ``CreateTime``. ``max_record_bytes``: a larger record is not sent; it and a batch
    refused for its size are dead-lettered to ``dead_letter_topic`` (module docstring)."""

    def __init__(
        self,
        producer: Callable[[], BatchProducer],
        crash: Callable[[BaseException], None],
        *,
        max_records: int,
        max_bytes: int,
        linger_s: float,
        max_record_bytes: int,
        dead_letter_topic: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_records < 1 or max_bytes < 1 or max_record_bytes < 1:
            raise ValueError("max_records, max_bytes and max_record_bytes must be at least 1")
        self.producer = producer
        self.crash = crash
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.linger_s = linger_s
        self.clock = clock
        self.max_record_bytes = max_record_bytes
        self.dead_letter_topic = dead_letter_topic
        self._queues: dict[tuple[str, int | None], list[Entry]] = {}
        self._kinds: Counter[str] = Counter()
        self._size = 0
        self._bytes = 0
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._refused = 0  # records dead-lettered for their size: settle() waits for theirs
        #: topic → its partitions, as the producer's metadata said since the last drain
        self._known: dict[str, tuple[int, ...]] = {}

    def __len__(self) -> int:
        """Records queued and not yet handed to the producer."""
        return self._size

    def add(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        kind: str | None = None,
    ) -> None:
        """Queue one record for ``topic`` (``partition``: its own; ``None``: the producer's
        partitioner's for ``key``). ``kind``: counted as an output of that kind when handed over.
        A record over :attr:`max_record_bytes` is dead-lettered instead (module docstring)."""
        size = len(key or b"") + len(value or b"")
        if size > self.max_record_bytes:
            self._refuse(topic, partition, key, size, "too-large", "")
            return
        if partition is None:
            partition = self._partition(topic, key)
        queue = self._queues.get((topic, partition))
        if queue is None:
            queue = self._queues[(topic, partition)] = []
        queue.append((key, value, int(self.clock() * 1000)))
        self._size += 1
        if value is not None:
            self._bytes += len(value)
        if kind is not None:
            self._kinds[kind] += 1
        if self._size >= self.max_records or self._bytes >= self.max_bytes:
            self._start()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.linger_s, self._start)

    async def room(self) -> None:
        """Wait while the queues hold twice :attr:`max_records` or :attr:`max_bytes` (a drain is
        under way by then)."""
        while self._size >= 2 * self.max_records or self._bytes >= 2 * self.max_bytes:
            await self.drain()

    async def drain(self) -> None:
        """Hand every queued record to the producer, including those queued while this runs;
        returns once the producer holds them all (delivery is the producer's flush)."""
        async with self._lock:
            while self._size:
                queues, kinds = self._queues, self._kinds
                self._queues, self._kinds, self._size, self._bytes = {}, Counter(), 0, 0
                self._known.clear()  # partitions read again from the metadata: a topic grows
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                await self._hand_over(queues)
                for kind, n in kinds.items():
                    selfmetrics.EVENTS_OUT.labels(kind).inc(n)

    async def settle(self, flush: Callable[[], Awaitable[None]]) -> None:
        """Drain, then ``flush`` (the producer's: every batch delivered or refused), and again
        while a batch refused for its size queued its dead letters meanwhile: the commit after
        this covers them too, so none is lost to a crash after it."""
        while True:
            refused = self._refused
            await self.drain()
            await flush()
            if self._refused == refused:
                return

    def _start(self) -> None:
        """A drain in the background (at most one task at a time; the lock orders them)."""
        self._timer = None
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._background())

    async def _background(self) -> None:
        try:
            await self.drain()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a defect or a producer that is gone: never silent
            selfmetrics.ERRORS.labels("produce").inc()
            log.critical("handing records to the producer failed, stopping the worker: %r", exc)
            self.crash(exc)

    def _partition(self, topic: str, key: bytes | None) -> int | None:
        parts = self._known.get(topic)
        if parts is None:
            found = self.producer().client.cluster.partitions_for_topic(topic)
            if not found:
                return None  # partitioned at the drain, once the producer knows the topic
            parts = self._known[topic] = tuple(sorted(found))
        if key is None:
            raise ValueError(f"a record for {topic} without a partition needs a key")
        return partition_of(key, parts)

    async def _hand_over(self, queues: dict[tuple[str, int | None], list[Entry]]) -> None:
        producer = self.producer()
        for (topic, partition), entries in queues.items():
            if partition is not None:
                await self._send(producer, topic, partition, entries)
                continue
            # queued before the producer knew the topic (so before any of its partitioned ones)
            parts = tuple(sorted(await producer.partitions_for(topic)))
            self._known[topic] = parts
            split: dict[int, list[Entry]] = {}
            for entry in entries:
                key = entry[0]
                assert key is not None  # add() refuses a record without key or partition
                split.setdefault(partition_of(key, parts), []).append(entry)
            for p, part in split.items():
                await self._send(producer, topic, p, part)

    async def _send(
        self, producer: BatchProducer, topic: str, partition: int, entries: list[Entry]
    ) -> None:
        """One partition's records in as few batches as fit (a batch's first record always fits:
        aiokafka takes it whatever its size, as a send would)."""
        batch, held = producer.create_batch(), 0
        for n, (key, value, stamp) in enumerate(entries):
            if batch.append(timestamp=stamp, key=key, value=value) is None:  # full
                await self._submit(producer, batch, topic, partition, entries[held:n])
                batch, held = producer.create_batch(), n
                first = batch.append(timestamp=stamp, key=key, value=value)
                assert first is not None
        await self._submit(producer, batch, topic, partition, entries[held:])

    async def _submit(
        self,
        producer: BatchProducer,
        batch: Batch,
        topic: str,
        partition: int,
        entries: list[Entry],
    ) -> None:
        """``entries``: the batch's records, dead-lettered if it is refused for its size."""
        batch.close()  # ready for the sender at once: no linger for a whole batch
        fut = await producer.send_batch(batch, topic, partition=partition)
        fut.add_done_callback(functools.partial(self._delivered, topic, partition, entries))

    def _delivered(
        self, topic: str, partition: int, entries: list[Entry], fut: asyncio.Future[Any]
    ) -> None:
        if fut.cancelled() or fut.exception() is None:
            return
        error = fut.exception()
        assert error is not None
        if isinstance(error, TOO_LARGE) and topic != self.dead_letter_topic:
            for key, value, _ in entries:
                size = len(key or b"") + len(value or b"")
                self._refuse(topic, partition, key, size, "broker-refused", repr(error))
            return
        selfmetrics.ERRORS.labels("produce").inc()
        log.critical(
            "a batch for %s[%d] was not written, stopping the worker: %r", topic, partition, error
        )
        self.crash(error)

    def _refuse(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        size: int,
        cause: OutputRefusalCause,
        error: str,
    ) -> None:
        """A record not written for its size: counted, logged, and a small ``output.refused``
        record queued for the dead-letter topic in its place (under the same key)."""
        self._refused += 1
        selfmetrics.OUTPUTS_REFUSED.labels(cause).inc()
        shown = cut(key.decode(errors="replace")) if key is not None else None
        log.error(
            "a %d-byte record for %s (key %.80r) not written for its size (%s; the worker sends "
            "at most %d bytes%s): dead-lettered in its place",
            size,
            topic,
            shown,
            cause,
            self.max_record_bytes,
            f", the producer said {error}" if error else "",
        )
        refused = OutputRefused(
            topic=topic,
            partition=partition,
            key=shown,
            size_bytes=size,
            limit_bytes=self.max_record_bytes,
            cause=cause,
            error=cut(error),
            ts_ms=int(self.clock() * 1000),
        )
        dead_key = (shown if shown is not None else topic).encode()
        self.add(self.dead_letter_topic, dead_key, codec.encode(refused), None, "OutputRefused")
