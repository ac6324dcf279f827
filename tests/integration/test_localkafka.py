"""The embedded broker: a real Kafka that round-trips, persists across restarts, makes topics."""

from __future__ import annotations

import asyncio
import socket
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import InvalidReplicationFactorError

from gpuattr.localkafka import LocalKafka, LocalKafkaConfig, LocalKafkaError
from infra.admin import TopicSpec, create_topics

pytestmark = pytest.mark.integration

WAIT_S = 30.0  # bound on every wait for the broker


def _unique(prefix: str) -> str:
    """Topic names unique per run (the session broker may be a shared, long-lived cluster)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _produce(bootstrap: str, topic: str, value: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await asyncio.wait_for(producer.send_and_wait(topic, value, key=b"k"), WAIT_S)
    finally:
        await producer.stop()


async def _read_one(bootstrap: str, topic: str) -> bytes:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    try:
        msg = await asyncio.wait_for(consumer.getone(), WAIT_S)
        return msg.value or b""
    finally:
        await consumer.stop()


async def test_round_trip(kafka_bootstrap: str) -> None:
    topic = _unique("it-roundtrip")
    await create_topics(kafka_bootstrap, [TopicSpec(topic, 1)])
    await _produce(kafka_bootstrap, topic, b"hello")
    assert await _read_one(kafka_bootstrap, topic) == b"hello"


async def test_restart_keeps_data_and_does_not_reformat(tmp_path: Path) -> None:
    broker = LocalKafka(LocalKafkaConfig(data_dir=tmp_path / "data"))
    storage = broker.storage_dir
    await broker.start()
    try:
        await create_topics(broker.bootstrap, [TopicSpec("persisted", 1)])
        await _produce(broker.bootstrap, "persisted", b"kept")
        meta = (storage / "meta.properties").read_text()
        assert not (storage / ".kafka_cleanshutdown").exists()
    finally:
        await broker.stop()
    assert broker.returncode is not None  # the JVM is gone, not orphaned
    assert (storage / ".kafka_cleanshutdown").exists()  # Kafka's own clean-shutdown marker

    await broker.start()  # same data dir: no re-format, same cluster id
    try:
        assert (storage / "meta.properties").read_text() == meta
        assert await _read_one(broker.bootstrap, "persisted") == b"kept"
    finally:
        await broker.stop()


async def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = LocalKafkaConfig(data_dir=tmp_path / "data", port=taken.getsockname()[1])
        with pytest.raises(LocalKafkaError, match="already in use"):
            await LocalKafka(config).start()


async def test_jvm_exit_fails_fast_with_log_tail(tmp_path: Path) -> None:
    storage = tmp_path / "data" / "kraft-logs"  # someone else's storage: Kafka refuses it
    storage.mkdir(parents=True)
    (storage / "meta.properties").write_text(
        "version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=7\n"
    )
    broker = LocalKafka(LocalKafkaConfig(data_dir=tmp_path / "data"))
    with pytest.raises(LocalKafkaError, match="exited during start-up") as caught:
        await broker.start()
    assert "Stored node id 7" in str(caught.value)  # the JVM's log tail is in the error
    assert broker.returncode not in (None, 0)


async def test_create_topics_is_idempotent(kafka_bootstrap: str) -> None:
    topic = _unique("it-idem")
    spec = TopicSpec(topic, 3, config={"retention.ms": "3600000"})
    assert await create_topics(kafka_bootstrap, [spec]) == [topic]
    assert await create_topics(kafka_bootstrap, [spec]) == []
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
        assert len(described[0]["partitions"]) == 3
    finally:
        await admin.close()


async def test_create_topics_raises_real_errors(kafka_bootstrap: str) -> None:
    with pytest.raises(InvalidReplicationFactorError):
        await create_topics(kafka_bootstrap, [TopicSpec(_unique("it-bad"), 1, replication=99)])
