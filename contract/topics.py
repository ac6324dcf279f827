"""Topics: roles, keys and retention of every topic, and the worker's changelog tables.

The input topic is keyed by node; table changelog topics (created by Faust, compacted) share
its partition count.
"""

from __future__ import annotations

from typing import Literal

from contract.records import Record

TopicRole = Literal[
    "node-events",
    "attribution",
    "alerts",
    "deadletter",
    "flags",
    "node-status",
    "demand-events",
    "demand",
    "doctor",
]

HOUR_MS = 3600 * 1000
DAY_MS = 24 * HOUR_MS


class TopicDoc(Record, frozen=True):
    role: TopicRole
    key: str
    carries: str
    retention_ms: int  # of a topic deleted by age (not of a compacted one)
    #: compacted (the latest record per key is kept; a key's tombstone removes it), not
    #: deleted by age
    compacted: bool = False
    #: its own partition count; None: ``KafkaSettings.partitions`` (co-partitioned with the input)
    partitions: int | None = None
    #: the broker stamps each record with its append time (``message.timestamp.type``)
    log_append_time: bool = False


TOPICS: tuple[TopicDoc, ...] = (
    TopicDoc(
        "node-events",
        "node",
        "everything a node agent publishes, in publish order: podresources.snapshot, "
        "podresources.diff, dcgm.scrape, dcgm.sample, k8s.pod, k8s.pod-list, k8s.node, inventory, "
        "k8s.resourceslice, k8s.resourceclaim, agent.status, k8s.operand-pods; the cluster "
        "role's k8s.node deletions, clock.tick, k8s.clusterpolicy, k8s.gpucluster, "
        "k8s.nvidiadriver and k8s.devicetaintrule (into every partition)",
        3 * DAY_MS,
    ),
    TopicDoc(
        "attribution",
        "node/device-uuid",
        "attribution: every device a node has, its holders and each pod's share, sharing mode, "
        "device-wide usage or why it is unknown; on samples, allocation changes, heartbeats, "
        "stale and gone (origin says which)",
        7 * DAY_MS,
    ),
    TopicDoc(
        "alerts",
        "alert id",
        "alert: a device's idle, xid, orphaned-memory, low-efficiency, thermal, memory-fault, "
        "pcie-replays, device-unhealthy; a shared device tenant's idle-tenant, memory-hog; a "
        "node's stack-broken; a pool's demand-while-idle; firing and resolved",
        14 * DAY_MS,
    ),
    TopicDoc(
        "flags",
        "node/device-uuid; node for a refused scrape",
        "exporter.misattribution: dcgm-exporter credits a pod that holds no slot there; "
        "usage.uncredited: a per-process reading of a pod that holds no slot there, or of no "
        "pod; telemetry.refused: a scrape that is not provably the node's",
        7 * DAY_MS,
    ),
    TopicDoc(
        "node-status",
        "node",
        "node-status: each node's GPU stack (intended versus reconciled, the first broken "
        "boundary), on every change; a tombstone when the node leaves",
        7 * DAY_MS,
        compacted=True,
    ),
    TopicDoc(
        "demand-events",
        "resource (the pool's resource name)",
        "the demand stage's input: the cluster role's k8s.pending-pod (per resource a pod asks "
        "for), k8s.pending-pods and clock.tick (into every partition); the workers' pool.supply "
        "(each node's allocated devices of a resource, on change)",
        3 * DAY_MS,
    ),
    TopicDoc(
        "demand",
        "pool",
        "demand: a pool's waiting pods and its allocated and idle GPUs, on change; a tombstone "
        "when nobody waits and nothing of it is allocated",
        7 * DAY_MS,
        compacted=True,
    ),
    TopicDoc(
        "deadletter",
        "source key; alert id; an output's key",
        "deadletter: an input the worker could not use; delivery.failure: an alert every "
        "destination attempt refused; output.refused: an output too large to send",
        14 * DAY_MS,
    ),
    TopicDoc(
        "doctor",
        "none",
        "doctor.probe: one record per `gpuattr doctor` run, stamped with the broker's append "
        "time to measure this host's clock against the broker's; nobody reads it",
        HOUR_MS,
        partitions=1,
        log_append_time=True,
    ),
)


#: The worker's tables, changelog ``<app id>-<name>-changelog`` (compacted, the input topic's
#: partition count, values in the codec): :class:`streams.core.flow.processor.Tables` field → name
TABLES: dict[str, str] = {
    "slot_holders": "slot-holders",
    "node_devices": "node-devices",
    "inventories": "inventories",
    "pods": "pods",
    "node_pods": "node-pods",
    "nodes": "nodes",
    "alert_state": "alert-state",
    "dra_slices": "dra-slices",
    "dra_claims": "dra-claims",
    "node_state": "node-state",
    "partition_nodes": "partition-nodes",
    "operand_pods": "operand-pods",
    "node_stack": "node-stack",
    "cluster_policies": "cluster-policies",
    "node_supply": "node-supply",
    "device_taint_rules": "device-taint-rules",
}

#: The demand stage's tables (a second agent of the same app, over demand-events; changelogs as
#: above, the demand-events topic's partition count):
#: :class:`streams.core.flow.demandstage.DemandTables` field → name
DEMAND_TABLES: dict[str, str] = {
    "demand_pods": "demand-pods",
    "demand_supply": "demand-supply",
    "demand_resources": "demand-resources",
    "demand_partitions": "demand-partitions",
}
