"""Kueue objects shaped as Kueue writes them (its ``site/static/examples`` setups, the Workload
its batch/Job integration makes, and the conditions its scheduler and controllers set:
``pkg/workload/workload.go``, ``pkg/scheduler/flavorassigner``, ``pkg/workload/evict``), for
both served versions."""

from __future__ import annotations

from typing import Any

GROUP = "kueue.x-k8s.io"
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
GPU = "nvidia.com/gpu"
T0 = "2026-12-07T10:00:00Z"
T0_MS = 1_796_637_600_000


def flavor(name: str, product: str | None = None, version: str = "v1beta2") -> dict[str, Any]:
    labels = {"nvidia.com/gpu.product": product} if product else {}
    spec: dict[str, Any] = {"nodeLabels": labels} if labels else {}
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": spec,
    }


def cluster_queue(
    name: str, gpu_flavors: dict[str, int], version: str = "v1beta2", resource: str = GPU
) -> dict[str, Any]:
    """A ClusterQueue with a cpu/memory group on ``default-flavor`` and a GPU group."""
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "default-flavor",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 9},
                                {"name": "memory", "nominalQuota": "36Gi"},
                            ],
                        }
                    ],
                },
                {
                    "coveredResources": [resource],
                    "flavors": [
                        {"name": f, "resources": [{"name": resource, "nominalQuota": n}]}
                        for f, n in gpu_flavors.items()
                    ],
                },
            ],
        },
    }


def local_queue(
    namespace: str, name: str, cluster: str, version: str = "v1beta2"
) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "LocalQueue",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"clusterQueue": cluster},
    }


def pod_template(gpus: int | str | None, *, init_gpus: int = 0, **spec: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "200Mi"}}
    if gpus is not None:
        resources["limits"] = {GPU: gpus}
    containers = [{"name": "trainer", "image": "registry.k8s.io/e2e-test-images/agnhost:2.53"}]
    containers[0]["resources"] = resources
    out: dict[str, Any] = {"restartPolicy": "Never", "containers": containers, **spec}
    if init_gpus:
        out["initContainers"] = [
            {"name": "warmup", "image": "busybox", "resources": {"limits": {GPU: init_gpus}}}
        ]
    return {"spec": out}


def podset(name: str, count: int, gpus: int | str | None, **spec: Any) -> dict[str, Any]:
    return {"name": name, "count": count, "template": pod_template(gpus, **spec)}


def workload(
    name: str,
    podsets: list[dict[str, Any]],
    *,
    namespace: str = "research",
    queue: str = "user-queue",
    version: str = "v1beta2",
    priority_class: str = "",
    priority: int | None = None,
    uid: str = "0b4f6a2e-1c9d-4e57-9a0b-3f2d1e6c8a71",
    status: dict[str, Any] | None = None,
    job: str = "sample-job",
) -> dict[str, Any]:
    """A Workload as Kueue's batch/Job integration makes it (``job-<job>-<hash>``, owned by the
    Job), in ``version``'s field names."""
    spec: dict[str, Any] = {"podSets": podsets, "queueName": queue}
    if priority_class and version == "v1beta2":
        spec["priorityClassRef"] = {
            "group": GROUP,
            "kind": "WorkloadPriorityClass",
            "name": priority_class,
        }
    elif priority_class:
        spec["priorityClassName"] = priority_class
        spec["priorityClassSource"] = f"{GROUP}/workloadpriorityclass"
    if priority is not None:
        spec["priority"] = priority
    out: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": "4711",
            "creationTimestamp": T0,
            "labels": {"kueue.x-k8s.io/job-uid": "7f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job,
                    "uid": "7f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }
    if status is not None:
        out["status"] = status
    return out


def condition(kind: str, status: str, reason: str, message: str, at: str = T0) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
        "observedGeneration": 1,
    }


def pending_message(podset: str, flavor_name: str, more: int) -> str:
    """The flavor assigner's message (``pkg/scheduler/flavorassigner``)."""
    return (
        f"couldn't assign flavors to pod set {podset}: insufficient unused quota for "
        f"{GPU} in flavor {flavor_name}, {more} more needed"
    )


def pending(message: str, at: str = T0) -> dict[str, Any]:
    """Not admitted: ``QuotaReserved`` False, ``Pending``."""
    return {"conditions": [condition("QuotaReserved", "False", "Pending", message, at)]}


def admission(cluster: str, assignments: dict[str, tuple[int, str]]) -> dict[str, Any]:
    """``status.admission``: podSet → (count, GPU flavor)."""
    return {
        "clusterQueue": cluster,
        "podSetAssignments": [
            {
                "name": name,
                "count": count,
                "flavors": {"cpu": "default-flavor", "memory": "default-flavor", GPU: fl},
            }
            for name, (count, fl) in assignments.items()
        ],
    }


def admitted(cluster: str, assignments: dict[str, tuple[int, str]], at: str = T0) -> dict[str, Any]:
    """Quota reserved and every admission check ready: ``Admitted`` True."""
    return {
        "admission": admission(cluster, assignments),
        "conditions": [
            condition(
                "QuotaReserved",
                "True",
                "QuotaReserved",
                f"Quota reserved in ClusterQueue {cluster}",
                at,
            ),
            condition("Admitted", "True", "Admitted", "The workload is admitted", at),
        ],
    }


def evicted(message: str, at: str, requeued_at: str) -> dict[str, Any]:
    """Preempted and requeued: admission cleared, ``Evicted``/``Preempted`` True, ``Requeued``."""
    return {
        "conditions": [
            condition("QuotaReserved", "False", "Preempted", message, at),
            condition("Admitted", "False", "NoReservation", "The workload has no reservation", at),
            condition("Evicted", "True", "Preempted", message, at),
            condition("Preempted", "True", "InClusterQueue", message, at),
            condition("Requeued", "True", "Preempted", message, requeued_at),
        ]
    }


def finished(reason: str, message: str, at: str) -> dict[str, Any]:
    return {"conditions": [condition("Finished", "True", reason, message, at)]}
