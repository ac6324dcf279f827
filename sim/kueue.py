"""Kueue's objects for a scenario at time ``t``, as the API server returns them at
``kueue.x-k8s.io/v1beta2`` (Kueue v0.19, the storage version; the vendored CRDs in
``tests/fixtures/kueue/``). Pure given ``t``.

A queued Workload stands for a Job Kueue keeps suspended, so it has no pods: its status has only
Kueue's ``QuotaReserved`` condition, False with Kueue's reason and message ("couldn't assign
flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor a100, 4 more
needed"); admitted, ``QuotaReserved`` and ``Admitted`` True with its ``admission``; finished,
``Finished`` True. Kueue names a Job's Workload ``job-<job name>-<5 hex>``.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sim.scenario import KueueSpec, KueueWorkloadSpec, Scenario
from sim.timefmt import rfc3339

API_VERSION = "kueue.x-k8s.io/v1beta2"


def _uid(kind: str, name: str) -> str:
    digest = hashlib.blake2b(f"{kind}/{name}".encode(), digest_size=16).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def workload_name(w: KueueWorkloadSpec) -> str:
    suffix = hashlib.blake2b(f"{w.namespace}/{w.job}".encode(), digest_size=3).hexdigest()[:5]
    return f"job-{w.job}-{suffix}"


def _meta(kind: str, name: str, epoch_s: float, namespace: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "uid": _uid(kind, f"{namespace}/{name}"),
        "generation": 1,
        "creationTimestamp": rfc3339(epoch_s),
    }
    if namespace:
        meta["namespace"] = namespace
    return meta


def _cluster_queue_of(kueue: KueueSpec, namespace: str, queue: str) -> str:
    return next((cq for ns, name, cq in kueue.local_queues if (ns, name) == (namespace, queue)), "")


def _flavor_of(kueue: KueueSpec, cluster_queue: str, resource: str) -> str:
    for name, resources in kueue.cluster_queues:
        if name == cluster_queue:
            return next((f for r, f, _ in resources if r == resource), "")
    return ""


def _workload(kueue: KueueSpec, w: KueueWorkloadSpec, t: float, epoch_s: float) -> dict[str, Any]:
    name = workload_name(w)
    meta = _meta("Workload", name, epoch_s + w.created_s, w.namespace)
    meta["labels"] = {"kueue.x-k8s.io/job-uid": _uid("Job", f"{w.namespace}/{w.job}")}
    meta["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": w.job,
            "uid": _uid("Job", f"{w.namespace}/{w.job}"),
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    pod_sets = [
        {
            "name": ps_name,
            "count": count,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "nvcr.io/nvidia/pytorch:25.08-py3",
                            "resources": {
                                "requests": {r: str(n) for r, n in requests},
                                "limits": {r: str(n) for r, n in requests},
                            },
                        }
                    ],
                }
            },
        }
        for ps_name, count, requests in w.pod_sets
    ]
    step = w.step(t)
    at = rfc3339(epoch_s + max(step.at_s, w.created_s))
    cluster_queue = _cluster_queue_of(kueue, w.namespace, w.queue)
    conditions: list[tuple[str, str, str, str]]
    status: dict[str, Any] = {}
    if step.state == "queued":
        conditions = [("QuotaReserved", "False", step.reason, step.message)]
    else:
        reserved = f"Quota reserved in ClusterQueue {cluster_queue}"
        conditions = [
            ("QuotaReserved", "True", "QuotaReserved", reserved),
            ("Admitted", "True", "Admitted", "The workload is admitted"),
        ]
        status["admission"] = {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [
                {
                    "name": ps_name,
                    "count": count,
                    "flavors": {r: _flavor_of(kueue, cluster_queue, r) for r, _ in requests},
                }
                for ps_name, count, requests in w.pod_sets
            ],
        }
        if step.state == "finished":
            conditions.append(("Finished", "True", "Succeeded", "Job finished successfully"))
    status["conditions"] = [
        {
            "type": kind,
            "status": ok,
            "reason": reason,
            "message": message,
            "lastTransitionTime": at,
            "observedGeneration": 1,
        }
        for kind, ok, reason, message in conditions
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": meta,
        "spec": {"queueName": w.queue, "priority": w.priority, "podSets": pod_sets},
        "status": status,
    }


def kueue_objects(scenario: Scenario, t: float, epoch_s: float) -> list[dict[str, Any]]:
    """Every Kueue object of the scenario at ``t``: its flavors and queues, and the Workloads
    created by then."""
    kueue = scenario.kueue
    if kueue is None:
        return []
    out: list[dict[str, Any]] = [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceFlavor",
            "metadata": _meta("ResourceFlavor", name, epoch_s),
            "spec": {"nodeLabels": dict(labels)},
        }
        for name, labels in kueue.flavors
    ]
    for name, resources in kueue.cluster_queues:
        covered = sorted({r for r, _, _ in resources})
        flavors: dict[str, list[dict[str, Any]]] = {}
        for resource, flavor, nominal in resources:
            flavors.setdefault(flavor, []).append({"name": resource, "nominalQuota": nominal})
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ClusterQueue",
                "metadata": _meta("ClusterQueue", name, epoch_s),
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": covered,
                            "flavors": [
                                {"name": f, "resources": rs} for f, rs in sorted(flavors.items())
                            ],
                        }
                    ],
                },
            }
        )
    out += [
        {
            "apiVersion": API_VERSION,
            "kind": "LocalQueue",
            "metadata": _meta("LocalQueue", name, epoch_s, ns),
            "spec": {"clusterQueue": cq},
        }
        for ns, name, cq in kueue.local_queues
    ]
    out += [_workload(kueue, w, t, epoch_s) for w in kueue.workloads if t >= w.created_s]
    return out
