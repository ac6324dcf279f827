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
