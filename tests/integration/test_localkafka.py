"""The embedded broker: a real Kafka that round-trips, persists across restarts, makes topics."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from gpuattr.kafka_admin import TopicSpec, create_topics
from gpuattr.localkafka import LocalKafka, LocalKafkaConfig, render_properties

pytestmark = pytest.mark.integration


async def _produce(bootstrap: str, topic: str, value: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=b"k")
    finally:
        await producer.stop()


async def _read_one(bootstrap: str, topic: str) -> bytes:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    try:
        msg = await consumer.getone()
        return msg.value or b""
    finally:
        await consumer.stop()


async def test_round_trip(kafka_bootstrap: str) -> None:
    await create_topics(kafka_bootstrap, [TopicSpec("it-roundtrip", 1)])
    await _produce(kafka_bootstrap, "it-roundtrip", b"hello")
    assert await _read_one(kafka_bootstrap, "it-roundtrip") == b"hello"


async def test_restart_keeps_data_and_does_not_reformat(tmp_path: Path) -> None:
    config = LocalKafkaConfig(data_dir=tmp_path / "data")
    async with LocalKafka(config) as broker:
        await create_topics(broker.bootstrap, [TopicSpec("persisted", 1)])
        await _produce(broker.bootstrap, "persisted", b"kept")
        meta = (tmp_path / "data" / "kraft-logs" / "meta.properties").read_text()
    async with LocalKafka(config) as again:  # same data dir: no re-format, same cluster
        assert (tmp_path / "data" / "kraft-logs" / "meta.properties").read_text() == meta
        assert await _read_one(again.bootstrap, "persisted") == b"kept"


async def test_create_topics_is_idempotent(kafka_bootstrap: str) -> None:
    spec = TopicSpec("it-idem", 3, config={"retention.ms": "3600000"})
    assert await create_topics(kafka_bootstrap, [spec]) == ["it-idem"]
    assert await create_topics(kafka_bootstrap, [spec]) == []
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(["it-idem"])
        assert len(described[0]["partitions"]) == 3
    finally:
        await admin.close()


def test_properties_render_ports_dir_and_fast_join(tmp_path: Path) -> None:
    text = render_properties(tmp_path, 19092, 19093)
    assert "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093" in text
    assert f"log.dirs={tmp_path}" in text
    assert "group.initial.rebalance.delay.ms=0" in text
