"""The GPU Operator's ClusterPolicy as the API server holds it: the seed's lab (a driver on the
host, the operator's container toolkit, MIG ``single``, the MIG manager disabled), valid against
the vendored CRD (``tests/realkube/crds/``), for the watcher's tests on the double and on the
real API server."""

from __future__ import annotations

from typing import Any

#: the seed's ClusterPolicy status message: four states named, the toolkit one layer lower
NOT_READY = (
    "ClusterPolicy is not ready, states not ready: [state-operator-validation "
    "state-device-plugin state-dcgm-exporter gpu-feature-discovery]"
)


def seed_policy(name: str = "cluster-policy", *, uid: str | None = None) -> dict[str, Any]:
    """Spec only (the operator writes the status): every field the CRD requires is set."""
    meta: dict[str, Any] = {"name": name}
    if uid is not None:  # the double keys objects by UID; the real server assigns one
        meta["uid"] = uid
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": meta,
        "spec": {
            "operator": {"defaultRuntime": "containerd"},
            "daemonsets": {},
            "driver": {"enabled": False},  # the host's driver
            "toolkit": {"enabled": True},
            "devicePlugin": {"enabled": True, "config": {"name": "", "default": ""}},
            "dcgm": {"enabled": False},
            "dcgmExporter": {"enabled": True},
            "gfd": {"enabled": True},
            "mig": {"strategy": "single"},
            # the seed's "migManager defaulted to all-disabled": on, its default MIG layout none
            "migManager": {
                "enabled": True,
                "config": {"name": "default-mig-parted-config", "default": "all-disabled"},
            },
            "nodeStatusExporter": {"enabled": False},
        },
    }


def not_ready_status(namespace: str = "gpu-operator") -> dict[str, Any]:
    """What the operator writes while the toolkit is broken (through the status subresource; its
    ``internal/conditions/clusterpolicy.go``: ``Ready`` False with reason ``Error`` and no
    message, ``Error`` True with the states not ready)."""
    return {
        "state": "notReady",
        "namespace": namespace,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "Error",
                "message": "",
                "lastTransitionTime": "2026-08-21T10:00:00Z",
            },
            {
                "type": "Error",
                "status": "True",
                "reason": "OperandNotReady",
                "message": NOT_READY,
                "lastTransitionTime": "2026-08-21T10:00:00Z",
            },
        ],
    }


# --- the DRA stack: GPUCluster (a singleton) and NVIDIADriver, both nvidia.com/v1alpha1

GPU_CLUSTER = "gpu-cluster"  # the only name its CRD admits
#: the conditions' messages as ``controllers/gpucluster_controller.go`` writes them
WAITING_FOR_OPERANDS = "Waiting for operand pods to be ready"
RECONCILED = "All resources have been successfully reconciled"


def refused_message(policy: str = "cluster-policy") -> str:
    return (
        f'A ClusterPolicy CR "{policy}" exists; a ClusterPolicy CR and GPUCluster CR may not '
        "exist at the same time"
    )


def gpu_cluster(
    name: str = GPU_CLUSTER, *, dcgm: bool | None = None, exporter: bool | None = None
) -> dict[str, Any]:
    """Spec only, as its sample (``config/samples/nvidia_v1alpha1_gpucluster.yaml``): the DRA
    driver's image; DCGM and dcgm-exporter as given (unset: the controller's defaults)."""
    spec: dict[str, Any] = {
        "draDriver": {
            "repository": "nvcr.io/nvidia",
            "image": "k8s-dra-driver-gpu",
            "version": "v25.12.0",
        }
    }
    if dcgm is not None:
        spec["dcgm"] = {"enabled": dcgm}
    if exporter is not None:
        spec["dcgmExporter"] = {"enabled": exporter}
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "GPUCluster",
        "metadata": {"name": name},
        "spec": spec,
    }


def gpu_cluster_status(
    ready: bool, reason: str = "OperandNotReady", message: str = WAITING_FOR_OPERANDS
) -> dict[str, Any]:
    """What the controller writes: ``ready`` with ``Ready`` True (``Reconciled``), or
    ``notReady`` with ``Error`` True and its reason (``OperandNotReady``, ``ReconcileFailed``,
    ``PrerequisiteNotMet``)."""
    at = "2026-08-21T10:00:00Z"
    if ready:
        conditions = [
            {"type": "Ready", "status": "True", "reason": "Reconciled", "message": RECONCILED},
            {"type": "Error", "status": "False", "reason": "Ready", "message": ""},
        ]
    else:
        conditions = [
            {"type": "Ready", "status": "False", "reason": "Error", "message": ""},
            {"type": "Error", "status": "True", "reason": reason, "message": message},
        ]
    return {
        "state": "ready" if ready else "notReady",
        "namespace": "gpu-operator",
        "conditions": [{**c, "lastTransitionTime": at} for c in conditions],
    }


def nvidia_driver(name: str = "default") -> dict[str, Any]:
    """The default NVIDIADriver (every GPU node not claimed by another): its required fields."""
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": name},
        "spec": {
            "default": True,
            "driverType": "gpu",
            "repository": "nvcr.io/nvidia",
            "image": "driver",
            "version": "580.95.05",
        },
    }
