"""The session's Kafka: ``GPUATTR_KAFKA_BOOTSTRAP`` if set, else a real local broker we start."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from gpuattr.localkafka import LocalKafka, LocalKafkaConfig


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    configured = os.environ.get("GPUATTR_KAFKA_BOOTSTRAP")
    if configured:
        yield configured
        return
    data = tmp_path_factory.mktemp("kafka")
    broker = LocalKafka(LocalKafkaConfig(data_dir=data))
    asyncio.run(broker.start())  # the JVM is a child process: no loop has to outlive this call
    try:
        yield broker.bootstrap
    finally:
        broker.stop_sync()
