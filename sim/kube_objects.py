"""Kubernetes objects (as the API server returns them, JSON dicts) for a scenario at time ``t``.

A pod exists from ``start_s``; at ``stop_s`` deletion is requested (``deletionTimestamp`` and
``deletionGracePeriodSeconds`` set, the pod keeps its devices); at ``stop_s + grace_s`` its
containers have stopped and it is gone. Owner references follow the controllers' naming.
A pod that waits for the scheduler (``pending_s``) exists before that without ``spec.nodeName``,
``Pending`` with the scheduler's ``PodScheduled`` condition (:mod:`sim.scheduling`).

On a node whose kubelet runs with ``ResourceHealthStatus`` a pod that holds devices has its
containers' statuses, each with ``allocatedResourcesStatus`` as the kubelet's device manager
writes it (``UpdateAllocatedResourcesStatus``): per resource, every device ID the container was
allocated with what the device plugin last said of it (Healthy, or Unhealthy from a health
step on), no message (a device plugin gives none). A health change is a status write: the pod
is served changed (MODIFIED) from that scenario second on. A Node's ``allocatable`` leaves out
the devices its plugin says are unhealthy; its ``capacity`` keeps them.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from typing import Any

from sim.cluster import allocatable_counts, device_id, holds_at, resource_name
from sim.scenario import NodeSpec, PodSpec, Scenario, parse_slot
from sim.scheduling import UNSCHEDULABLE, labels_at, nodes_at, unschedulable_message
from sim.timefmt import rfc3339

IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"


def _owner(pod: PodSpec) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """(controller ownerReference, extra labels) the way the controllers make them."""
    head, _, _ = pod.name.rpartition("-")
    kind, labels = pod.workload_kind, {}
    if kind == "Deployment":
        rs_hash = head.rpartition("-")[2]
        labels["pod-template-hash"] = rs_hash
        ref = ("ReplicaSet", head)
    elif kind == "CronJob":
        ref = ("Job", head)
    elif kind in ("StatefulSet", "DaemonSet", "Job"):
        ref = (kind, pod.workload_name)
    else:
        return None, labels
    return {
        "apiVersion": "apps/v1" if ref[0] != "Job" else "batch/v1",
        "kind": ref[0],
        "name": ref[1],
        "uid": f"owner-{ref[1]}",
        "controller": True,
        "blockOwnerDeletion": True,
    }, labels


def _containers(scenario: Scenario, pod: PodSpec) -> list[dict[str, Any]]:
    """The pod's containers with their resources: the same before and after it is bound (a
    pod's spec does not change when the scheduler binds it)."""
    node = scenario.node(pod.node) if pod.node else None
    containers = []
    for i, (name, slots) in enumerate(pod.held_by_container):
        if pod.requests:  # what it asks for, on its first container
            counts = Counter(dict(pod.requests)) if i == 0 else Counter[str]()
        elif node is not None and not node.dra:
            counts = Counter(resource_name(node, parse_slot(s)) for s in slots)
        else:  # on a DRA node no limit: the devices come through claims
            counts = Counter()
        resources = {k: str(v) for k, v in sorted(counts.items())}
        container: dict[str, Any] = {
            "name": name,
            "image": IMAGE,
            "resources": {"limits": resources, "requests": resources},
        }
        if node is not None and node.dra and pod.claims:  # through ResourceClaims
            refs = [{"name": f"gpu{j}" if j else "gpu"} for j in range(len(pod.claims))]
            container["resources"] = {"claims": refs}
        containers.append(container)
    return containers


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def allocated_resources_status(
    node: NodeSpec, slots: tuple[str, ...], t: float
) -> list[dict[str, Any]]:
    """One container's ``allocatedResourcesStatus`` at ``t``: per resource (by name), each
    device ID it holds, exactly as allocated, with its plugin's health then."""
    by_resource: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for slot in map(parse_slot, slots):
        health = node.health_at(slot, t)
        by_resource[resource_name(node, slot)].add((device_id(node, slot), health))
    return [
        {
            "name": resource,
            "resources": [{"resourceID": rid, "health": health} for rid, health in sorted(ids)],
        }
        for resource, ids in sorted(by_resource.items())
    ]


def _container_statuses(
    scenario: Scenario, node: NodeSpec, pod: PodSpec, t: float, epoch_s: float
) -> list[dict[str, Any]]:
    """The running containers' statuses in the kubelet's order (by name), each with what it was
    allocated and the health of the devices it holds (none written for a container holding
    none)."""
    started = rfc3339(epoch_s + pod.start_s)
    held = dict(pod.held_by_container)
    statuses = []
    for container in sorted(_containers(scenario, pod), key=lambda c: str(c["name"])):
        name = container["name"]
        status: dict[str, Any] = {
            "name": name,
            "image": IMAGE,
            "imageID": f"nvcr.io/nvidia/cuda@sha256:{_digest(IMAGE)}",
            "containerID": f"containerd://{_digest(f'{pod.uid}/{name}')}",
            "ready": True,
            "restartCount": 0,
            "started": True,
            "state": {"running": {"startedAt": started}},
            "lastState": {},
            "allocatedResources": dict(container["resources"].get("requests", {})),
            "resources": container["resources"],
        }
        if devices := allocated_resources_status(node, held.get(name, ()), t):
            status["allocatedResourcesStatus"] = devices
        statuses.append(status)
    return statuses


def _scheduled(
    scenario: Scenario, pod: PodSpec, t: float, epoch_s: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(spec fields, status) of a pod that waits for the scheduler: unbound with the
    scheduler's word while it waits, bound (PodScheduled True) once scheduled."""
    spec: dict[str, Any] = {"schedulerName": "default-scheduler", "priority": pod.priority}
    if pod.node_selector:
        spec["nodeSelector"] = dict(pod.node_selector)
    if pod.pending_at(t):
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": UNSCHEDULABLE,
            "message": unschedulable_message(scenario, pod, t),
            "lastProbeTime": None,
            "lastTransitionTime": rfc3339(epoch_s + pod.created_s),
        }
        return spec, {"phase": "Pending", "conditions": [condition], "qosClass": "BestEffort"}
    condition = {
        "type": "PodScheduled",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": rfc3339(epoch_s + pod.start_s),
    }
    return {**spec, "nodeName": pod.node}, {"phase": "Running", "conditions": [condition]}


def pod_object(scenario: Scenario, pod: PodSpec, t: float, epoch_s: float) -> dict[str, Any]:
    node = scenario.node(pod.node) if pod.node else None
    owner, extra = _owner(pod)
    meta: dict[str, Any] = {
        "name": pod.name,
        "namespace": pod.namespace,
        "uid": pod.uid,
        "creationTimestamp": rfc3339(epoch_s + pod.created_s),
        "labels": {**dict(pod.labels), **extra},
        "annotations": dict(pod.annotations),
    }
    if owner:
        meta["ownerReferences"] = [owner]
    if pod.stop_s is not None and t >= pod.stop_s:
        meta["deletionTimestamp"] = rfc3339(epoch_s + pod.stop_s + pod.grace_s)
        meta["deletionGracePeriodSeconds"] = int(pod.grace_s)
    spec: dict[str, Any] = {"nodeName": pod.node, "containers": _containers(scenario, pod)}
    status: dict[str, Any] = {"phase": "Running"}
    if pod.pending_s is not None:
        waited, status = _scheduled(scenario, pod, t, epoch_s)
        spec = {"containers": spec["containers"], **waited}
    if node is not None and node.resource_health_status and not node.dra and holds_at(pod, t):
        status["containerStatuses"] = _container_statuses(scenario, node, pod, t, epoch_s)
    if node is not None and node.dra and pod.claims:
        named = [
            {"name": f"gpu{i}" if i else "gpu", "resourceClaimName": claim}
            for i, claim in enumerate(pod.claims)
        ]
        spec["resourceClaims"] = named
        status["resourceClaimStatuses"] = named
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def pod_objects(scenario: Scenario, t: float, epoch_s: float) -> list[dict[str, Any]]:
    """The pods of the scenario at ``t``: those on their nodes, and those waiting unbound."""
    return [
        pod_object(scenario, p, t, epoch_s)
        for p in scenario.pods
        if holds_at(p, t) or p.pending_at(t)
    ]


def node_objects(scenario: Scenario, t: float = 0.0) -> list[dict[str, Any]]:
    """The scenario's Node objects at ``t`` (a node deleted at ``deleted_s`` is gone)."""
    out = []
    for node in nodes_at(scenario, t):
        base = {"cpu": "64", "memory": "512Gi", "pods": "110"}
        capacity = {**base, **allocatable_counts(node)}
        alloc = {**base, **allocatable_counts(node, t)}
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": node.name,
                    "uid": f"node-{node.name}",
                    "labels": labels_at(node, t),
                },
                "status": {"allocatable": alloc, "capacity": capacity},
            }
        )
    return out


EXPORTER_NAMESPACE = "gpu-operator"
EXPORTER_DAEMONSET = "nvidia-dcgm-exporter"
EXPORTER_LABELS = {"app": EXPORTER_DAEMONSET}


def exporter_pod_objects(
    scenario: Scenario, ports: dict[str, int], epoch_s: float, host: str = "127.0.0.1"
) -> list[dict[str, Any]]:
    """Each node's dcgm-exporter pod, as the GPU Operator's DaemonSet makes it: labelled
    ``app=nvidia-dcgm-exporter`` and controlled by that DaemonSet in the operator's namespace (the
    agent scrapes no other), its container port named ``metrics``, reached by pod IP (here
    every exporter double listens on ``host``, each on its own port). A node whose exporter is
    not deployed (``exporter = "none"``) has none; a deleted node's pod is gone with it; a node
    the GPU Operator manages has its operand pod instead (:mod:`sim.gpuoperator`)."""
    out = []
    for node in scenario.nodes:
        if node.exporter == "none" or node.name not in ports or node.operator is not None:
            continue
        name = f"nvidia-dcgm-exporter-{node.name}"
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": EXPORTER_NAMESPACE,
                    "uid": f"exporter-{node.name}",
                    "creationTimestamp": rfc3339(epoch_s),
                    "labels": dict(EXPORTER_LABELS),
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "DaemonSet",
                            "name": EXPORTER_DAEMONSET,
                            "uid": f"daemonset-{EXPORTER_DAEMONSET}",
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {
                    "nodeName": node.name,
                    "containers": [
                        {
                            "name": "nvidia-dcgm-exporter",
                            "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04",
                            "ports": [{"name": "metrics", "containerPort": ports[node.name]}],
                        }
                    ],
                },
                "status": {
                    "phase": "Running",
                    "podIP": host,
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
    return out
