"""Kafka helpers for the benchmark: bulk produce, count, read back, raw passthrough."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Hashable, Iterable, Set
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from contract import codec
from contract.inputs import InputRecord as AgentRecord
from gpuattr.localkafka import LocalKafka, LocalKafkaConfig
from infra.settings import WorkerSettings
from streams.worker.outbox import Outbox


async def broker(stack: contextlib.AsyncExitStack, bootstrap: str | None, workdir: Path) -> str:
    """The bench's broker: ``bootstrap`` when given, else an embedded one whose data is in
    ``workdir``, stopped when ``stack`` closes. Returns its bootstrap address."""
    if bootstrap:
        return bootstrap
    local = LocalKafka(LocalKafkaConfig(data_dir=workdir / "kafka", heap_mb=1024))
    await stack.enter_async_context(local)
    return local.bootstrap


async def produce(bootstrap: str, topic: str, records: Iterable[AgentRecord]) -> int:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, acks=1, max_batch_size=1 << 20
    )
    await producer.start()
    n = 0
    try:
        for r in records:
            await producer.send(topic, codec.encode(r), key=r.node.encode())
            n += 1
        await producer.flush()
    finally:
        await producer.stop()
    return n


async def count(bootstrap: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        if not parts:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(topic) or set()
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in parts])
        return sum(ends.values())
    finally:
        await consumer.stop()


Record = tuple[int, bytes | None, bytes]  # partition, key, value
Stamped = tuple[int, bytes]  # the record's timestamp (ms, as its producer stamped it), value


async def _read(bootstrap: str, topic: str) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record the topic holds now (up to its end offsets when called), partition by
    partition in offset order."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=1 << 22,
    )
    await consumer.start()
    got: dict[int, list[ConsumerRecord[bytes, bytes]]] = {}
    try:
        parts = await consumer._client._wait_on_metadata(topic)  # raises if unknown
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        pending = {tp for tp in tps if ends[tp] > 0}
        while pending:
            batch = await consumer.getmany(*pending, timeout_ms=500, max_records=10_000)
            for tp, msgs in batch.items():
                got.setdefault(tp.partition, []).extend(m for m in msgs if m.offset < ends[tp])
                if msgs and msgs[-1].offset >= ends[tp] - 1:
                    pending.discard(tp)
    finally:
        await consumer.stop()
    return [r for p in sorted(got) for r in got[p]]


async def read_records(bootstrap: str, topic: str) -> list[Record]:
    """Every record the topic holds now (up to its end offsets when called), partition by
    partition in offset order."""
    return [(m.partition, m.key, m.value or b"") for m in await _read(bootstrap, topic)]


async def read_present(bootstrap: str, topic: str) -> list[bytes]:
    """The values of :func:`read_records`."""
    return [value for _, _, value in await read_records(bootstrap, topic)]


async def wait_covered(
    bootstrap: str,
    topic: str,
    wanted: Set[Hashable],
    identity: Callable[[bytes], Hashable],
    timeout_s: float,
) -> list[Stamped]:
    """Read the topic until every identity in ``wanted`` is on it: all its records, each with
    the timestamp its producer gave it.

    After a rebalance a worker writes some outputs twice (at least once). A second copy is
    usually byte-identical, but an input processed again sees the state already recovered, so
    it can differ in content (docs/RELIABILITY.md); counting distinct bytes would take such a
    copy for coverage and stop before the last outputs arrived. Identities cannot."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = [(m.timestamp, m.value or b"") for m in await _read(bootstrap, topic)]
        missing = wanted - {identity(value) for _, value in records}
        if not missing:
            return records
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{topic}: {len(missing)} of {len(wanted)} identities missing after "
                f"{timeout_s:.0f}s, e.g. {sorted(map(repr, missing))[:3]}"
            )
        await asyncio.sleep(0.5)


#: how a node's scrape begins on the wire, and how each of its device rows is named
SCRAPE_PREFIX = b'{"schema":"dcgm.scrape"'
DEVICE_ROW = b'"uuid":'


def outputs_of(value: bytes) -> int:
    """How many per-device records a scrape makes (a byte count, no decoding); 0 otherwise."""
    return value.count(DEVICE_ROW) if value.startswith(SCRAPE_PREFIX) else 0


def worker_producer(bootstrap: str) -> AIOKafkaProducer:
    """A producer with the worker's settings: acks=all, its linger and batch size."""
    worker = WorkerSettings.model_construct()  # the defaults the worker runs with
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=int(worker.producer_linger_s * 1000),
        max_batch_size=worker.producer_batch_bytes,
    )


async def passthrough(
    bootstrap: str, source: str, target: str, expected: int, event_bytes: int = 0
) -> tuple[float, float]:
    """The ceiling: consume every message and produce, no decoding. (Input records/s, GPU
    samples/s.)

    Like for like with the worker: the same input records, the worker's producer settings
    (acks=all, its linger and batch size) and its way of handing records over (its outbox:
    whole per-partition batches, :mod:`streams.worker.outbox`, drained before every commit),
    with a commit after every poll.
    ``event_bytes`` > 0: what the worker must do at minimum — each scrape becomes one record of
    ``event_bytes`` per device (keyed per device, as attribution events are), every other record
    is produced again as it is; 0: every record is produced again as it is (the plain
    passthrough)."""
    worker = WorkerSettings.model_construct()  # the defaults the worker runs with
    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=f"raw-{target}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        # more than the worker reads per fetch (GPUATTR_WORKER_FETCH_BYTES_PER_PARTITION): this
        # line commits after every poll, so a smaller fetch would lower the ceiling, not match it
        max_partition_fetch_bytes=1 << 22,
    )
    producer = worker_producer(bootstrap)
    await consumer.start()
    await producer.start()
    failed: list[BaseException] = []
    outbox = Outbox(
        lambda: producer,
        failed.append,
        max_records=worker.outbox_records,
        max_bytes=worker.outbox_bytes,
        linger_s=worker.outbox_linger_s,
        max_record_bytes=worker.max_record_bytes,
        dead_letter_topic=target,  # its records are far below the limit: none is refused
    )
    done, samples, started = 0, 0, None
    blob = b"x" * event_bytes
    try:
        while done < expected:
            batch = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            for msgs in batch.values():
                started = started or time.monotonic()
                for m in msgs:
                    n = outputs_of(m.value or b"")
                    samples += n
                    if not event_bytes or not n:
                        outbox.add(target, m.key or b"", m.value)
                        continue
                    for i in range(n):
                        outbox.add(target, (m.key or b"") + b"/%d" % i, blob)
                    await outbox.room()
                done += len(msgs)
            await outbox.drain()
            await consumer.commit()
        await producer.flush()
        if failed:
            raise failed[0]
    finally:
        await producer.stop()
        await consumer.stop()
    spent = time.monotonic() - (started or time.monotonic())
    return done / spent, samples / spent


async def wait_count(bootstrap: str, topic: str, expected: int, timeout_s: float) -> None:
    """Poll a topic's size until it holds at least ``expected`` records."""
    deadline = time.monotonic() + timeout_s
    while await count(bootstrap, topic) < expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: fewer than {expected} records after {timeout_s:.0f}s")
        await asyncio.sleep(0.2)


async def topics(bootstrap: str) -> set[str]:
    """The names of every topic on the broker."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        return set(await consumer.topics())
    finally:
        await consumer.stop()


Ends = dict[TopicPartition, int]


async def end_offsets(bootstrap: str, names: Iterable[str]) -> Ends:
    """Every partition's end offset of the topics ``names``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        tps = [
            TopicPartition(name, p)
            for name in sorted(names)
            for p in sorted(await consumer._client._wait_on_metadata(name))
        ]
        return dict(await consumer.end_offsets(tps)) if tps else {}
    finally:
        await consumer.stop()


async def settled_ends(
    bootstrap: str, names: Iterable[str], quiet_s: float = 1.5, timeout_s: float = 15.0
) -> Ends:
    """End offsets once they stop moving for ``quiet_s`` (a producer's buffered writes are
    out), or as they are after ``timeout_s`` (a writer that never stops)."""
    wanted = sorted(names)
    deadline = time.monotonic() + timeout_s
    ends = await end_offsets(bootstrap, wanted)
    still = time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.3)
        now = await end_offsets(bootstrap, wanted)
        if now != ends:
            ends, still = now, time.monotonic()
        elif time.monotonic() - still >= quiet_s:
            break
    return ends


async def bytes_between(bootstrap: str, before: Ends, after: Ends) -> int:
    """The key and value bytes of the records between two readings of end offsets (a
    tombstone counts its key)."""
    spans = {tp: (before.get(tp, 0), end) for tp, end in after.items() if end > before.get(tp, 0)}
    if not spans:
        return 0
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, max_partition_fetch_bytes=1 << 22
    )
    await consumer.start()
    total = 0
    try:
        consumer.assign(list(spans))
        for tp, (start, _) in spans.items():
            consumer.seek(tp, start)
        pending = set(spans)
        while pending:
            batch = await consumer.getmany(*pending, timeout_ms=500, max_records=10_000)
            for tp, msgs in batch.items():
                end = spans[tp][1]
                total += sum(
                    len(m.key or b"") + len(m.value or b"") for m in msgs if m.offset < end
                )
                if msgs and msgs[-1].offset >= end - 1:
                    pending.discard(tp)
    finally:
        await consumer.stop()
    return total
