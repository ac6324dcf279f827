"""Create topics idempotently (local broker or a real cluster)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication: int = 1
    config: Mapping[str, str] = field(default_factory=dict)


async def create_topics(
    bootstrap: str, specs: Sequence[TopicSpec], **client_options: Any
) -> list[str]:
    """Create the topics that do not exist yet; return the names created."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [s for s in specs if s.name not in existing]
        if not missing:
            return []
        new = [
            NewTopic(s.name, s.partitions, s.replication, topic_configs=dict(s.config))
            for s in missing
        ]
        with contextlib.suppress(TopicAlreadyExistsError):  # created concurrently: fine
            await admin.create_topics(new)
        return [s.name for s in missing]
    finally:
        await admin.close()
