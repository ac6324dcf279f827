"""Outputs stay bounded on the real broker: a ~560 KB ``Hostname`` label (seen in the wild) goes
through the agent's edge and the worker without a crash loop.

The agent cuts the label (contract.bounds); an older agent's scrape that still carries it whole
is refused by the worker with a small record all the same. Either way the worker keeps running,
commits the inputs, and every record it writes is small (before: the refusal carried the label
twice, 1.12 MB, and the worker stopped on the batch the broker refused, again after each restart).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition

from contract import codec
from contract.bounds import CUT_MARK, MAX_TEXT_CHARS, cut
from contract.outputs import OutputRefused, TelemetryRefused
from contract.records import replace
from contract.topics import TopicRole
from infra.admin import TopicSpec, create_topics
from infra.settings import KafkaSettings, WorkerSettings
from sim.exporter_rows import ExporterRow
from sim.runner import SimulatedCluster
from sim.scenario import gpu_uuid, load
from tests.helpers import wait_for, wait_for_async
from tests.integration.pipeline import Pipeline, collect, pipeline
from tests.unit.test_outbox import outbox_over
from tests.unit.test_spine import scrape as old_agents_scrape

pytestmark = pytest.mark.integration

SCENARIO = load("exclusive")
NODE = "gpu-a"
HUGE = "h" * 560_000
#: what a record of this pipeline may weigh at most here (the refusals are ~2 KB)
SMALL_BYTES = 16 * MAX_TEXT_CHARS


def huge_hostname(sim: SimulatedCluster) -> None:
    """gpu-a's exporter prints its first GPU with a ~560 KB Hostname (one field: one line)."""
    rows_of = sim.cluster.exporter_rows

    def rows(node: str, scrape: int) -> list[ExporterRow]:
        out = rows_of(node, scrape)
        if node != NODE:
            return out
        one = tuple(v for v in out[0].values if v[0] == "DCGM_FI_DEV_FB_USED")
        first = replace(out[0], hostname=HUGE, values=one)
        return [first, *out[1:]]

    sim.cluster.exporter_rows = rows  # type: ignore[method-assign]


async def sizes(kafka: KafkaSettings, role: TopicRole) -> list[int]:
    """The size (key and value) of every record on a topic so far."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap,
        enable_auto_commit=False,
        group_id=None,
        fetch_max_bytes=64 << 20,
        max_partition_fetch_bytes=16 << 20,
    )
    await consumer.start()
    try:
        parts = [TopicPartition(kafka.topic(role), n) for n in range(kafka.partitions)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        out: list[int] = []
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            batch = await consumer.getmany(timeout_ms=1000)
            out += [len(m.value or b"") + len(m.key or b"") for ms in batch.values() for m in ms]
        return out
    finally:
        await consumer.stop()


def committed_past(p: Pipeline, ends: dict[TopicPartition, int]) -> Callable[[], Awaitable[bool]]:
    """A check that the worker group has committed every input up to ``ends``."""

    async def check() -> bool:
        admin = AIOKafkaAdminClient(bootstrap_servers=p.kafka.bootstrap)
        await admin.start()
        try:
            offsets = await admin.list_consumer_group_offsets(p.kafka.topic_prefix + "worker")
        finally:
            await admin.close()
        return all(tp in offsets and offsets[tp].offset >= end for tp, end in ends.items() if end)

    return check


async def test_a_huge_hostname_is_refused_small_the_input_committed_and_no_crash(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    async with (
        pipeline(kafka_bootstrap, SCENARIO, tmp_path, before_start=huge_hostname) as p,
        collect(p.kafka, "flags") as flags,
    ):

        def refusals(uuid: str) -> list[TelemetryRefused]:
            return [
                r
                for r in flags.records
                if isinstance(r, TelemetryRefused) and r.node == NODE and uuid in r.uuids
            ]

        # through the agent's edge: the label is cut there, the scrape refused for it
        own = gpu_uuid(NODE, 0)
        await wait_for(lambda: len(refusals(own)) >= 3, timeout_s=90, what=p.logs)
        edge = refusals(own)[0]
        assert edge.cause == "hostname"
        assert edge.hostname.startswith(f"{NODE}, hhhh")  # the other rows' and the cut one
        assert edge.hostname.endswith(CUT_MARK)
        assert len(edge.hostname) <= MAX_TEXT_CHARS
        assert len(edge.reason) <= MAX_TEXT_CHARS

        # an older agent's scrape carrying the label whole: refused small by the worker
        old = old_agents_scrape(int(time.time() * 1000), "GPU-old-agent", hostname=HUGE)
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, max_request_size=2 << 20)
        await producer.start()
        try:
            sent = await producer.send_and_wait(
                p.kafka.topic("node-events"), codec.encode(old), key=NODE.encode()
            )
        finally:
            await producer.stop()
        assert sent.offset >= 0
        (whole,) = await wait_for(lambda: refusals("GPU-old-agent"), timeout_s=60, what=p.logs)
        assert whole.hostname == cut(HUGE)
        assert len(whole.reason) <= MAX_TEXT_CHARS

        # the inputs are committed (no crash loop holds them back) and the worker runs on
        inputs = TopicPartition(p.kafka.topic("node-events"), sent.partition)
        check = committed_past(p, {inputs: sent.offset + 1})
        await wait_for_async(check, timeout_s=60, what=p.logs)
        assert p.workers[0].running, p.logs()
        assert "stopping the worker" not in p.workers[0].tail(200)
        # every output is small: flags, node status, dead letters
        roles: tuple[TopicRole, ...] = ("flags", "node-status", "deadletter", "attribution")
        for role in roles:
            assert max(await sizes(p.kafka, role), default=0) < SMALL_BYTES, role


async def test_a_record_the_broker_refuses_for_its_size_is_dead_lettered_not_a_crash(
    kafka_bootstrap: str,
) -> None:
    """The outbox against the real broker and aiokafka's own error: a topic whose
    ``max.message.bytes`` is below what the worker allows refuses the batch; the record is
    dead-lettered small, the next batch goes, and nothing stops."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    small, dead = f"{prefix}small", f"{prefix}deadletter"
    await create_topics(
        kafka_bootstrap,
        [TopicSpec(small, 1, config={"max.message.bytes": "20000"}), TopicSpec(dead, 1)],
    )
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    crashed: list[BaseException] = []
    outbox = outbox_over(
        producer,
        crashed.append,
        max_record_bytes=WorkerSettings().max_record_bytes,  # above the topic's 20,000
        dead_letter_topic=dead,
    )
    try:
        await producer.partitions_for(small)
        await producer.partitions_for(dead)
        outbox.add(small, b"gpu-a", b"x" * 50_000, kind="TelemetryRefused")
        await outbox.drain()
        await producer.flush()
        await wait_for(lambda: len(outbox) > 0, timeout_s=30, what="the dead letter queued")
        outbox.add(small, b"gpu-a", b"fits", kind="TelemetryRefused")
        await outbox.drain()
        await producer.flush()
    finally:
        await producer.stop()
    assert crashed == []
    written = await records(kafka_bootstrap, small)
    assert written == [b"fits"]
    (letter,) = [codec.decode(v) for v in await records(kafka_bootstrap, dead)]
    assert isinstance(letter, OutputRefused)
    assert (letter.topic, letter.key, letter.size_bytes, letter.cause) == (
        small,
        "gpu-a",
        50_005,
        "broker-refused",
    )
    assert "MessageSizeTooLarge" in letter.error


async def records(bootstrap: str, topic: str) -> list[bytes]:
    """Every value on a one-partition topic so far."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out: list[bytes] = []
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            out += [m.value or b"" for m in batch.get(tp, [])]
        return out
    finally:
        await consumer.stop()
