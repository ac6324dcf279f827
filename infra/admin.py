"""Create topics idempotently and wait until Kafka serves them (local broker or a real cluster).

"Serves" is checked the way clients will use it, so that they start without error lines: every
new partition answers a ListOffsets request at its leader (the metadata names a leader a moment
before that leader accepts requests), and a consumer group's coordinator is found (on a new
cluster the first FindCoordinator creates ``__consumer_offsets``; a consumer that joins before
its partitions have leaders logs ``Group Coordinator Request failed`` at ERROR).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code


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


def leaderless(topics: Sequence[Mapping[str, Any]], wanted: Mapping[str, int]) -> list[str]:
    """``topic[partition]`` of the wanted topics that have no leader yet (or are not listed)."""
    seen = {t["topic"]: t for t in topics}
    missing = []
    for name, partitions in wanted.items():
        listed = {p["partition"]: p for p in (seen.get(name) or {}).get("partitions", [])}
        missing += [
            f"{name}[{p}]"
            for p in range(partitions)
            if p not in listed or listed[p]["leader"] < 0 or listed[p]["error_code"] != 0
        ]
    return missing


async def _wait_for_leaders(
    admin: AIOKafkaAdminClient, wanted: Mapping[str, int], timeout_s: float
) -> None:
    """Return once every partition of ``wanted`` has a leader: clients started before that log
    ``NotLeaderForPartitionError`` and retry. Raise after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    delay_s = 0.05
    while True:
        missing = leaderless(await admin.describe_topics(list(wanted)), wanted)
        if not missing:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no leader after {timeout_s:g}s for {', '.join(missing[:5])}")
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, 1.0)


async def create_topics(
    bootstrap: str,
    specs: Sequence[TopicSpec],
    leader_timeout_s: float = 60.0,
    **client_options: Any,
) -> list[str]:
    """Create the topics that do not exist yet, wait until each of their partitions has a
    leader, and return the names this call created.

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
        created = _check(response.topic_errors)
        wanted = {s.name: s.partitions for s in missing}
        await _wait_for_leaders(admin, wanted, leader_timeout_s)
    finally:
        await admin.close()
    await _wait_for_list_offsets(bootstrap, wanted, leader_timeout_s, client_options)
    return created


async def _wait_for_list_offsets(
    bootstrap: str, wanted: Mapping[str, int], timeout_s: float, client_options: Mapping[str, Any]
) -> None:
    """Return once every partition's leader answers ListOffsets (aiokafka retries quietly)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        request_timeout_ms=int(timeout_s * 1000),
        **client_options,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(name, p) for name, n in wanted.items() for p in range(n)]
        await asyncio.wait_for(consumer.end_offsets(tps), timeout_s)
    finally:
        await consumer.stop()


async def wait_for_coordinator(
    bootstrap: str, group: str, timeout_s: float = 60.0, **client_options: Any
) -> bool:
    """Return True once the cluster names a coordinator for ``group``; False after
    ``timeout_s`` (the caller starts anyway: its client retries, only less quietly)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options)
    await admin.start()
    try:
        deadline = time.monotonic() + timeout_s
        delay_s = 0.05
        while True:
            try:
                await admin.find_coordinator(group)
                return True
            except KafkaError as exc:
                if not exc.retriable:
                    raise
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, 1.0)
    finally:
        await admin.close()
