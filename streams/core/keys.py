"""How the worker's table keys are made: the one owner of every key format. Pure.

Every key of a node's state starts with the node, the key of the input topic, so all state for
a node lives in the partition its records arrive on (``node/...``); ``partition-nodes``,
``cluster-policies``, ``device-taint-rules`` and ``demand-partitions`` are keyed by the input
partition, the demand stage's tables by the resource (``resource|...``). Keys are interned: a
node's keys are made on every record, and equal keys then share one string.
"""

from __future__ import annotations

from sys import intern

#: the tables keyed by the node alone (:class:`streams.core.flow.tables.Tables` fields)
PER_NODE_TABLES = (
    "node_devices",
    "inventories",
    "node_pods",
    "nodes",
    "dra_slices",
    "node_state",
    "operand_pods",
    "node_stack",
    "node_supply",
)


def holder_key(node: str, base: str) -> str:
    """A base device's holders (``slot_holders``)."""
    return intern(f"{node}/{base}")


def alert_key(node: str, device_uuid: str) -> str:
    """A device's alert state (``alert_state``), by its id in events."""
    return intern(f"{node}/{device_uuid}")


def short_name(namespace: str, name: str) -> str:
    """A pod or claim as its node names it (:class:`streams.core.node.pods.NodePods`,
    :attr:`streams.core.node.nodestate.NodeState.claims`): namespace and name."""
    return intern(f"{namespace}/{name}")


def short_key(node: str, short: str) -> str:
    """The key of a name its node keeps (:func:`short_name`): a pod's in ``pods``, a claim's in
    ``dra_claims``."""
    return intern(f"{node}/{short}")


def name_key(node: str, namespace: str, name: str) -> str:
    """A pod's key in the pod watch (``pods``): its node, namespace and name (:func:`short_key`
    of its :func:`short_name`, in one step: it is made for every holder of every sample)."""
    return intern(f"{node}/{namespace}/{name}")


def claim_key(node: str, namespace: str, name: str) -> str:
    """A ResourceClaim's key (``dra_claims``): node, namespace and name, as :func:`name_key`."""
    return intern(f"{node}/{namespace}/{name}")


def partition_key(partition: int) -> str:
    """The key of a table kept per input partition."""
    return str(partition)


def resource_key(resource: str, item: str) -> str:
    """A demand-stage key under its resource: a pending pod's (``namespace/name``) in
    ``demand_pods``, a node's supply in ``demand_supply``."""
    return f"{resource}|{item}"


def node_removal(node: str) -> str:
    """How the demand stage names a node's supply among a resource's removals (pods are named
    by ``namespace/name``, which holds no ``:``)."""
    return f"node:{node}"
