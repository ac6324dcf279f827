"""Create topics idempotently (local broker or a real cluster)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError, for_code


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication: int = 1
    config: Mapping[str, str] = field(default_factory=dict)


def _check(topic_errors: Sequence[Sequence[Any]]) -> list[str]:
    """Names created by this request; raise on any error but "already exists".

    aiokafka returns per-topic error codes in the response instead of raising them.
    """
    created: list[str] = []
    for entry in topic_errors:  # (name, code) in v0, (name, code, message) from v1
        name, code = str(entry[0]), int(entry[1])
        if code == 0:
            created.append(name)
        elif code != TopicAlreadyExistsError.errno:  # created concurrently: fine
            message = entry[2] if len(entry) > 2 else None
            raise for_code(code)(f"creating topic {name!r}: {message or 'error ' + str(code)}")
    return created


async def create_topics(
    bootstrap: str, specs: Sequence[TopicSpec], **client_options: Any
) -> list[str]:
    """Create the topics that do not exist yet; return the names this call created.

    ``client_options`` go to ``AIOKafkaAdminClient`` (security settings for real clusters).
    """
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
        response = await admin.create_topics(new)
        return _check(response.topic_errors)
    finally:
        await admin.close()
