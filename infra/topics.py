"""Topic specs for the admin client: every topic of the contract, created by ``gpuattr topics``."""

from __future__ import annotations

from collections.abc import Iterable

from contract.topics import DEMAND_TABLES, TABLES, TOPICS
from infra.admin import TopicSpec
from infra.settings import KafkaSettings


def changelog_specs(kafka: KafkaSettings, app_id: str, tables: Iterable[str]) -> list[TopicSpec]:
    """The workers' table changelogs: compacted, as many partitions as the input topic.

    Created up front so every worker's metadata knows them before the first assignment."""
    return [
        TopicSpec(
            name=f"{app_id}-{table}-changelog",
            partitions=kafka.partitions,
            replication=kafka.replication,
            config={"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"},
        )
        for table in tables
    ]


def topic_specs(kafka: KafkaSettings, app_id: str | None = None) -> list[TopicSpec]:
    """Every topic: inputs and outputs, plus the changelogs of worker app ``app_id``."""
    changelogs = (
        changelog_specs(kafka, app_id, [*TABLES.values(), *DEMAND_TABLES.values()])
        if app_id
        else []
    )
    return changelogs + [
        TopicSpec(
            name=kafka.topic(doc.role),
            partitions=doc.partitions or kafka.partitions,
            replication=kafka.replication,
            config=(
                {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}
                if doc.compacted
                else {"retention.ms": str(doc.retention_ms), "cleanup.policy": "delete"}
            )
            | ({"message.timestamp.type": "LogAppendTime"} if doc.log_append_time else {}),
        )
        for doc in TOPICS
    ]
