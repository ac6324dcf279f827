"""Topic definitions: names, keys, partitions and retention, created by ``gpuattr topics``.

Input topics are keyed by node and must share one partition count (the worker co-partitions
them). Table changelog topics are created by Faust itself (compacted).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuattr.kafka_admin import TopicSpec
from gpuattr.settings import KafkaSettings, TopicRole

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class TopicDoc:
    role: TopicRole
    key: str
    carries: str
    retention_ms: int


TOPICS: tuple[TopicDoc, ...] = (
    TopicDoc(
        "podresources", "node", "PodResources snapshots and diffs (podresources.*)", 7 * DAY_MS
    ),
    TopicDoc("dcgm", "node", "one dcgm.sample per GPU or MIG instance per scrape", 1 * DAY_MS),
    TopicDoc(
        "k8s", "node", "pod and node watch records (k8s.pod, k8s.pod-list, k8s.node)", 7 * DAY_MS
    ),
    TopicDoc(
        "inventory", "node", "inventory: GPU index/UUID and MIG UUID → parent GPU", 7 * DAY_MS
    ),
    TopicDoc("attribution", "node/device-uuid", "attribution events, one per sample", 7 * DAY_MS),
    TopicDoc(
        "flags",
        "node/device-uuid",
        "exporter.misattribution: exporter credits a non-holder",
        7 * DAY_MS,
    ),
    TopicDoc(
        "deadletter", "source key", "inputs the worker could not use, with the error", 14 * DAY_MS
    ),
)


def topic_specs(kafka: KafkaSettings) -> list[TopicSpec]:
    return [
        TopicSpec(
            name=kafka.topic(doc.role),
            partitions=kafka.partitions,
            replication=kafka.replication,
            config={"retention.ms": str(doc.retention_ms), "cleanup.policy": "delete"},
        )
        for doc in TOPICS
    ]
