"""What kube-scheduler makes of a pod of a scenario at scenario time ``t``. Pure.

A pending pod (:attr:`sim.scenario.PodSpec.pending_s`) carries the scheduler's ``PodScheduled``
condition: False, reason ``Unschedulable`` and the message the real scheduler writes (its
``FitError``): each node's first failing filter, in its default plugin order — the node
selector (NodeAffinity) before the resources (NodeResourcesFit, every resource a node lacks) —
counted into a histogram of ``"<count> <reason>"`` strings sorted as strings, then what the
default preemption plugin said (a node that failed only on resources: no victims, every pod here
has the same priority; a node the selector rules out: preemption cannot help)::

    0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are
    available: 3 No preemption victims found for incoming pod..

A node's free count of a resource is its allocatable (the device plugin's advertised devices)
less the slots its pods hold at ``t`` (a terminating pod holds them until its grace period ends,
as the scheduler counts it).
"""

from __future__ import annotations

from collections import Counter

from sim.cluster import allocatable_counts, holds_at, resource_name
from sim.gpuoperator import node_labels
from sim.scenario import NodeSpec, PodSpec, Scenario, parse_slot

UNSCHEDULABLE = "Unschedulable"
SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"


def labels_at(node: NodeSpec, t: float) -> dict[str, str]:
    """The Node object's labels at ``t``: the scenario's, the GPU Operator's, the hostname."""
    return {**dict(node.labels), **node_labels(node, t), "kubernetes.io/hostname": node.name}


def nodes_at(scenario: Scenario, t: float) -> list[NodeSpec]:
    """The nodes in the cluster at ``t`` (a node deleted at ``deleted_s`` is gone)."""
    return [n for n in scenario.nodes if n.deleted_s is None or t < n.deleted_s]


def requests_of(scenario: Scenario, pod: PodSpec) -> dict[str, int]:
    """What the pod asks for: its ``requests``, or what its slots are on its node."""
    if pod.requests:
        return dict(pod.requests)
    node = scenario.node(pod.node)
    counts = Counter(
        resource_name(node, parse_slot(s)) for _, slots in pod.held_by_container for s in slots
    )
    return dict(sorted(counts.items()))


def free_at(scenario: Scenario, node: NodeSpec, t: float) -> dict[str, int]:
    """The node's allocatable devices per resource that no pod holds at ``t``."""
    free = Counter({k: int(v) for k, v in allocatable_counts(node, t).items()})
    for pod in scenario.pods:
        if pod.node == node.name and holds_at(pod, t):
            for _, slots in pod.held_by_container:
                free.subtract(resource_name(node, parse_slot(s)) for s in slots)
    return dict(free)


def node_reasons(scenario: Scenario, pod: PodSpec, node: NodeSpec, t: float) -> list[str]:
    """Why the node cannot take the pod at ``t`` (empty: it fits)."""
    labels = labels_at(node, t)
    if any(labels.get(k) != v for k, v in pod.node_selector):
        return [SELECTOR_MISMATCH]
    free = free_at(scenario, node, t)
    return [
        f"Insufficient {resource}"
        for resource, count in sorted(requests_of(scenario, pod).items())
        if free.get(resource, 0) < count
    ]


def _histogram(reasons: list[str]) -> str:
    return ", ".join(sorted(f"{count} {reason}" for reason, count in Counter(reasons).items()))


def unschedulable_message(scenario: Scenario, pod: PodSpec, t: float) -> str:
    """The scheduler's message for the pod at ``t``, as it writes it in ``PodScheduled``."""
    nodes = nodes_at(scenario, t)
    failed = [node_reasons(scenario, pod, n, t) for n in nodes]
    filters = [reason for reasons in failed for reason in reasons]
    preemption = [
        NOT_HELPFUL if reasons == [SELECTOR_MISMATCH] else NO_VICTIMS
        for reasons in failed
        if reasons
    ]
    head = f"0/{len(nodes)} nodes are available"
    return f"{head}: {_histogram(filters)}. preemption: {head}: {_histogram(preemption)}.."


def fitting_nodes(scenario: Scenario, pod: PodSpec, t: float) -> list[str]:
    """Nodes that could take the pod at ``t``: a consistent scenario has none while it waits."""
    return [n.name for n in nodes_at(scenario, t) if not node_reasons(scenario, pod, n, t)]
