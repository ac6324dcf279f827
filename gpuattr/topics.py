"""Topic definitions: names, keys, partitions and retention, created by ``gpuattr topics``.

The input topic is keyed by node; table changelog topics (created by Faust, compacted) share
its partition count.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuattr.kafka_admin import TopicSpec
from gpuattr.settings import KafkaSettings, TopicRole
from streams.tables import TABLES

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class TopicDoc:
    role: TopicRole
    key: str
    carries: str
    retention_ms: int


TOPICS: tuple[TopicDoc, ...] = (
    TopicDoc(
        "node-events",
        "node",
        "everything a node agent publishes, in publish order: podresources.snapshot, "
        "podresources.diff, dcgm.sample, k8s.pod, k8s.pod-list, k8s.node, inventory",
        3 * DAY_MS,
    ),
    TopicDoc("attribution", "node/device-uuid", "attribution events, one per sample", 7 * DAY_MS),
    TopicDoc(
        "alerts", "alert id", "alert: idle, xid, orphaned-memory; firing and resolved", 14 * DAY_MS
    ),
    TopicDoc(
        "flags",
        "node/device-uuid",
        "exporter.misattribution: exporter credits a non-holder",
        7 * DAY_MS,
    ),
    TopicDoc(
        "deadletter",
        "source key",
        "inputs or alerts that could not be used or delivered",
        14 * DAY_MS,
    ),
)


def changelog_specs(kafka: KafkaSettings, app_id: str, tables: list[str]) -> list[TopicSpec]:
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
    changelogs = changelog_specs(kafka, app_id, list(TABLES.values())) if app_id else []
    return changelogs + [
        TopicSpec(
            name=kafka.topic(doc.role),
            partitions=kafka.partitions,
            replication=kafka.replication,
            config={"retention.ms": str(doc.retention_ms), "cleanup.policy": "delete"},
        )
        for doc in TOPICS
    ]
