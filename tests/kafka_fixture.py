"""The session's Kafka: ``GPUATTR_KAFKA_BOOTSTRAP`` if set, else a real local broker we start."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from gpuattr.localkafka import LocalKafka, LocalKafkaConfig, LocalKafkaSecurity
from infra.acls import DEFAULT_PRINCIPALS


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


#: the secured broker's users: each role's default principal and one per doctor case (SCRAM
#: users are made when its storage is formatted, so every test's user is named here)
SECURE_USERS = (
    *DEFAULT_PRINCIPALS.values(),
    *(f"doc-{role}" for role in ("agent", "cluster", "worker", "sink", "reader")),
    *("doc-missing", "doc-probe", "doc-narrow", "doc-broad", "doc-cli"),
    *("e2e-agent", "e2e-cluster", "e2e-narrow"),
)


@pytest.fixture(scope="session")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """A second broker, with its security on (TLS, SASL/SCRAM, the authorizer denying what no ACL
    allows), shared by the session's tests that judge credentials and ACLs as a role sees them.
    Each test takes its own topic prefix and its own user."""
    security = LocalKafkaSecurity.generate(SECURE_USERS)
    config = LocalKafkaConfig(data_dir=tmp_path_factory.mktemp("secure-kafka"), security=security)
    broker = LocalKafka(config)
    asyncio.run(broker.start())
    try:
        yield broker
    finally:
        broker.stop_sync()
