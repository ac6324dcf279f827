"""The GPU Operator's objects for a scenario at time ``t``, as the operator and the kubelet write
them (NVIDIA/gpu-operator main of 2026-08-21: ``assets/*/…daemonset.yaml``,
``controllers/state_manager.go``, ``api/nvidia/v1/clusterpolicy_types.go``). Pure given ``t``.

* Node labels: the operator labels every GPU node it manages ``nvidia.com/gpu.deploy.<operand>=
  true`` (and ``mig-manager`` where a GPU is MIG capable); a scenario overrides some
  (``driver=pre-installed`` for a host driver, ``false`` to keep an operand off the node), and
  sets ``nvidia.com/mig.config`` / ``nvidia.com/mig.config.state`` over time.
* Operand pods, in the operator's namespace: one per DaemonSet whose ``nodeSelector`` (its deploy
  label ``true``) matches and which the ClusterPolicy enables (``spec.<operand>.enabled``, unset
  = enabled); ``app=<DaemonSet name>``, owned by their DaemonSet, init containers in the
  manifests' order. A pod's state (:class:`sim.scenario.OperandStep`) is rendered as the
  kubelet reports it: all ready; its first container in ``CrashLoopBackOff`` with restarts; or
  stuck in one init container (running, e.g. waiting for ``toolkit-ready``, or failing) with
  the ones after it and the main containers ``PodInitializing``.
* The ``ClusterPolicy`` (cluster-scoped ``nvidia.com/v1``): its spec as the scenario writes it,
  its status as the operator writes it (``state``, ``namespace``, ``Ready``/``Error``).
* A DRA node (``dra = true``) is the ``GPUCluster``'s (``nvidia.com/v1alpha1``): labelled as its
  controller labels GPU nodes (``gpuClusterStateLabels``), running ``manifests/state-dra-*``'s
  operands — the DRA driver's kubelet plugin, DCGM only where the GPUCluster enables it (its
  controller's default is off), dcgm-exporter, the DRA validator — and none without a GPUCluster.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from sim.scenario import ClusterPolicySpec, GpuClusterSpec, NodeSpec, OperandStep, Scenario
from sim.timefmt import rfc3339

NAMESPACE = "gpu-operator"
DEPLOY = "nvidia.com/gpu.deploy."
MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"
VALIDATOR_IMAGE = "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.10.0"


@dataclass(frozen=True, slots=True)
class Operand:
    name: str  # its deploy label: nvidia.com/gpu.deploy.<name>; the scenario's key
    daemonset: str  # the DaemonSet's name, its pods' app label
    policy_key: str | None  # spec.<key>.enabled; None: always deployed (the validator)
    init: tuple[str, ...]
    containers: tuple[str, ...]
    image: str
    app: str = ""  # its pods' app label when not the DaemonSet's name

    @property
    def app_label(self) -> str:
        return self.app or self.daemonset


#: the operands of the device-plugin stack, in the operator's state order
OPERANDS: tuple[Operand, ...] = (
    Operand(
        "driver",
        "nvidia-driver-daemonset",
        "driver",
        ("k8s-driver-manager",),
        ("nvidia-driver-ctr",),
        "nvcr.io/nvidia/driver:580.95.05-ubuntu22.04",
    ),
    Operand(
        "container-toolkit",
        "nvidia-container-toolkit-daemonset",
        "toolkit",
        ("driver-validation",),
        ("nvidia-container-toolkit-ctr",),
        "nvcr.io/nvidia/k8s/container-toolkit:v1.18.0",
    ),
    Operand(
        "operator-validator",
        "nvidia-operator-validator",
        None,
        ("driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation"),
        ("nvidia-operator-validator",),
        VALIDATOR_IMAGE,
    ),
    Operand(
        "device-plugin",
        "nvidia-device-plugin-daemonset",
        "devicePlugin",
        ("toolkit-validation", "config-manager-init"),
        ("nvidia-device-plugin", "config-manager"),
        "nvcr.io/nvidia/k8s-device-plugin:v0.18.0",
    ),
    Operand(
        "dcgm",
        "nvidia-dcgm",
        "dcgm",
        ("toolkit-validation",),
        ("nvidia-dcgm-ctr",),
        "nvcr.io/nvidia/cloud-native/dcgm:4.4.1-1-ubuntu22.04",
    ),
    Operand(
        "dcgm-exporter",
        "nvidia-dcgm-exporter",
        "dcgmExporter",
        ("toolkit-validation",),
        ("nvidia-dcgm-exporter",),
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04",
    ),
    Operand(
        "gpu-feature-discovery",
        "gpu-feature-discovery",
        "gfd",
        ("toolkit-validation", "config-manager-init"),
        ("gpu-feature-discovery", "config-manager"),
        "nvcr.io/nvidia/k8s-device-plugin:v0.18.0",
    ),
    Operand(
        "mig-manager",
        "nvidia-mig-manager",
        "migManager",
        ("toolkit-validation",),
        ("nvidia-mig-manager",),
        "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.13.0",
    ),
)
BY_NAME = {o.name: o for o in OPERANDS}

#: the GPUCluster's operands (``manifests/state-dra-*``), in its controller's state order; the
#: driver is not one of them (an NVIDIADriver's, or the host's)
DRA_OPERANDS: tuple[Operand, ...] = (
    Operand(
        "dra-driver",
        "nvidia-dra-driver-kubelet-plugin",
        None,
        ("driver-validation",),
        ("gpus",),
        "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0",
    ),
    Operand(
        "dcgm-dra",
        "nvidia-dcgm-dra",
        "dcgm",
        (),
        ("nvidia-dcgm-ctr",),
        "nvcr.io/nvidia/cloud-native/dcgm:4.4.1-1-ubuntu22.04",
    ),
    Operand(
        "dcgm-exporter-dra",
        "nvidia-dcgm-exporter-dra",
        "dcgmExporter",
        (),
        ("nvidia-dcgm-exporter-dra",),
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04",
    ),
    Operand(
        "dra-validator",
        "nvidia-dra-validator",
        None,
        ("gpu-validation",),
        ("nvidia-dra-validator",),
        VALIDATOR_IMAGE,
        app="nvidia-operator-validator",  # the label the upgrade path waits on
    ),
)
DRA_BY_NAME = {o.name: o for o in DRA_OPERANDS}
#: what the controller labels a GPU node with when a GPUCluster exists
DRA_DEPLOY = ("driver", "dra-driver", "dra-validator", "dcgm-dra", "dcgm-exporter-dra")
#: a GPUCluster's ``spec.<key>.enabled`` when unset (its controller's defaults)
GPUCLUSTER_DEFAULTS = {"dcgm": False, "dcgmExporter": True}


def operands_of(node: NodeSpec) -> tuple[Operand, ...]:
    return DRA_OPERANDS if node.dra else OPERANDS


def exporter_of(node: NodeSpec) -> Operand:
    return DRA_BY_NAME["dcgm-exporter-dra"] if node.dra else BY_NAME["dcgm-exporter"]


#: what the operator labels a container-workload GPU node with (``gpuStateLabels``)
DEFAULT_DEPLOY = (
    "driver",
    "gpu-feature-discovery",
    "container-toolkit",
    "device-plugin",
    "dcgm",
    "dcgm-exporter",
    "node-status-exporter",
    "operator-validator",
)


def deploy_labels(node: NodeSpec) -> dict[str, str]:
    """The node's ``nvidia.com/gpu.deploy.*`` labels (none on a node the operator does not
    manage); ``mig-manager`` only where the GPUs are MIG capable."""
    if node.operator is None:
        return {}
    if node.dra:
        names = list(DRA_DEPLOY)
    elif node.mig is not None:
        names = [*DEFAULT_DEPLOY, "mig-manager"]
    else:
        names = list(DEFAULT_DEPLOY)
    labels = {DEPLOY + n: "true" for n in names}
    labels.update({DEPLOY + k: v for k, v in node.operator.deploy})
    return labels


def node_labels(node: NodeSpec, t: float) -> dict[str, str]:
    """Every label the operator's stack puts on the node at ``t``."""
    if node.operator is None:
        return {}
    labels = deploy_labels(node)
    if node.mig is not None:
        labels["nvidia.com/mig.capable"] = "true"
    step = node.operator.mig_at(t)
    if step is not None:
        labels[MIG_CONFIG] = step.config
        labels[MIG_STATE] = step.state
    return labels


def _enabled(policy: ClusterPolicySpec | None, key: str | None) -> bool:
    if policy is None or key is None:
        return True
    stanza = policy.spec.get(key)
    return not (isinstance(stanza, dict) and stanza.get("enabled") is False)


def _cluster_enables(cluster: GpuClusterSpec | None, key: str | None) -> bool:
    if cluster is None:
        return False  # no GPUCluster: nothing deploys the DRA stack's operands
    if key is None:
        return True
    stanza = cluster.spec.get(key)
    enabled = stanza.get("enabled") if isinstance(stanza, dict) else None
    return enabled if isinstance(enabled, bool) else GPUCLUSTER_DEFAULTS.get(key, True)


def deployed(scenario: Scenario, node: NodeSpec, operand: Operand, t: float) -> bool:
    """Whether the operand's DaemonSet has a pod on the node at ``t``."""
    if node.operator is None:
        return False
    if deploy_labels(node).get(DEPLOY + operand.name) != "true":
        return False  # the DaemonSet's nodeSelector does not match
    if node.dra:
        if not _cluster_enables(scenario.gpu_cluster, operand.policy_key):
            return False
    elif not _enabled(scenario.cluster_policy, operand.policy_key):
        return False  # no DaemonSet at all
    return node.operator.step(operand.name, t).state != "absent"


def exporter_answers(scenario: Scenario, node: NodeSpec, t: float) -> bool:
    """Whether the node's dcgm-exporter listens at ``t``: always on a node the operator does not
    manage (the scenario's ``exporter`` says the rest); on one it does, only while its operand
    pod runs (not crash looping, not waiting in an init container)."""
    if node.operator is None:
        return True
    exporter = exporter_of(node)
    return deployed(scenario, node, exporter, t) and node.operator.step(exporter.name, t).state == (
        "ready"
    )


VALIDATIONS = frozenset(
    {"driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation"}
)


def image_of(operand: Operand, container: str) -> str:
    """The validations run the validator's image, in every operand's pod."""
    return VALIDATOR_IMAGE if container in VALIDATIONS else operand.image


def _suffix(node: str, daemonset: str) -> str:
    """A DaemonSet pod's 5-character name suffix (the API server's alphabet), stable."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    digest = hashlib.blake2b(f"{node}/{daemonset}".encode(), digest_size=5).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest)


def _image_id(image: str) -> str:
    digest = hashlib.sha256(image.encode()).hexdigest()
    return f"{image.rsplit(':', 1)[0]}@sha256:{digest}"


def _done(name: str, image: str, at: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imageID": _image_id(image),
        "ready": True,
        "restartCount": 0,
        "started": False,
        "state": {
            "terminated": {
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": at,
                "finishedAt": at,
            }
        },
    }


def _running(name: str, image: str, at: str, ready: bool, restarts: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imageID": _image_id(image),
        "ready": ready,
        "restartCount": restarts,
        "started": True,
        "state": {"running": {"startedAt": at}},
    }


def _waiting(name: str, image: str, reason: str, pod: str, restarts: int = 0) -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": name,
        "image": image,
        "imageID": _image_id(image) if restarts else "",  # never started: no image ID yet
        "ready": False,
        "restartCount": restarts,
        "started": False,
        "state": {"waiting": {"reason": reason}},
    }
    if reason == "CrashLoopBackOff":
        status["state"]["waiting"]["message"] = (
            f"back-off 5m0s restarting failed container={name} pod={pod}_{NAMESPACE}"
        )
        status["lastState"] = {"terminated": {"exitCode": 1, "reason": "Error"}}
    return status


def _condition(kind: str, ok: bool, at: str, reason: str = "") -> dict[str, Any]:
    c: dict[str, Any] = {"type": kind, "status": "True" if ok else "False"}
    c["lastProbeTime"] = None
    c["lastTransitionTime"] = at
    if reason:
        c["reason"] = reason
    return c


def _status(operand: Operand, step: OperandStep, pod: str, at: str, host: str) -> dict[str, Any]:
    """The pod's status as the kubelet reports it in ``step``'s state."""
    inits: list[dict[str, Any]] = []
    mains: list[dict[str, Any]]
    stuck = operand.init.index(step.init) if step.state == "init" else len(operand.init)
    for i, name in enumerate(operand.init):
        image = image_of(operand, name)
        if i < stuck:
            inits.append(_done(name, image, at))
        elif i == stuck and step.reason:
            inits.append(_waiting(name, image, step.reason, pod, step.restarts))
        elif i == stuck:
            inits.append(_running(name, image, at, False, step.restarts))
        else:
            inits.append(_waiting(name, image, "PodInitializing", pod))
    image = operand.image
    if step.state == "init":
        mains = [_waiting(c, image, "PodInitializing", pod) for c in operand.containers]
    elif step.state == "crashloop":
        first, *rest = operand.containers
        mains = [
            _waiting(first, image, step.reason or "CrashLoopBackOff", pod, step.restarts),
            *(_running(c, image, at, True) for c in rest),
        ]
    else:  # running; a count of restarts from an earlier crash loop stays
        mains = [
            _running(c, image, at, True, step.restarts if i == 0 else 0)
            for i, c in enumerate(operand.containers)
        ]
    initialized = step.state != "init"
    ready = step.state == "ready"
    not_ready = "" if ready else "ContainersNotReady"
    return {
        "phase": "Running" if initialized else "Pending",
        "hostIP": host,
        "podIP": host,
        "podIPs": [{"ip": host}],
        "startTime": at,
        "qosClass": "BestEffort",
        "conditions": [
            _condition("PodReadyToStartContainers", True, at),
            _condition(
                "Initialized", initialized, at, "" if initialized else "ContainersNotInitialized"
            ),
            _condition("Ready", ready, at, not_ready),
            _condition("ContainersReady", ready, at, not_ready),
            _condition("PodScheduled", True, at),
        ],
        "initContainerStatuses": inits,
        "containerStatuses": mains,
    }


def operand_pod(
    node: NodeSpec,
    operand: Operand,
    step: OperandStep,
    epoch_s: float,
    *,
    host: str = "127.0.0.1",
    exporter_port: int = 9400,
) -> dict[str, Any]:
    """The operand's pod on ``node`` in ``step``'s state, as the API server returns it."""
    name = f"{operand.daemonset}-{_suffix(node.name, operand.daemonset)}"
    since = rfc3339(epoch_s + step.at_s)

    def container(c: str, image: str) -> dict[str, Any]:
        spec: dict[str, Any] = {"name": c, "image": image, "imagePullPolicy": "IfNotPresent"}
        if c.startswith("nvidia-dcgm-exporter"):  # scraped by pod IP at its port named metrics
            spec["ports"] = [{"name": "metrics", "containerPort": exporter_port, "protocol": "TCP"}]
        return spec

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": f"{operand.daemonset}-",
            "namespace": NAMESPACE,
            "uid": f"operand-{node.name}-{operand.daemonset}",
            "creationTimestamp": rfc3339(epoch_s),
            "labels": {
                "app": operand.app_label,
                "app.kubernetes.io/part-of": "gpu-operator",
                "controller-revision-hash": _suffix("revision", operand.daemonset),
                "pod-template-generation": "1",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": operand.daemonset,
                    "uid": f"daemonset-{operand.daemonset}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": node.name,
            "nodeSelector": {DEPLOY + operand.name: "true"},
            "serviceAccountName": operand.daemonset,
            "priorityClassName": "system-node-critical",
            "initContainers": [container(c, image_of(operand, c)) for c in operand.init],
            "containers": [container(c, operand.image) for c in operand.containers],
        },
        "status": _status(operand, step, name, since, host),
    }


def operand_pod_objects(
    scenario: Scenario,
    t: float,
    epoch_s: float,
    *,
    host: str = "127.0.0.1",
    exporter_ports: dict[str, int] | None = None,
) -> list[dict[str, Any]]:
    """Every operand pod of every node the operator manages, at ``t``; a node gone (deleted, or
    without an exporter port yet) has none."""
    out = []
    for node in scenario.nodes:
        if node.operator is None or (node.deleted_s is not None and t >= node.deleted_s):
            continue
        port = (exporter_ports or {}).get(node.name, 9400)
        for operand in operands_of(node):
            if deployed(scenario, node, operand, t):
                step = node.operator.step(operand.name, t)
                out.append(operand_pod(node, operand, step, epoch_s, host=host, exporter_port=port))
    return out


def cluster_policy_objects(scenario: Scenario, epoch_s: float) -> list[dict[str, Any]]:
    """The scenario's ClusterPolicy (none without one): its status as the operator writes it —
    ``state``, ``namespace``, and ``Ready``/``Error`` conditions (``SetConditionsReady`` /
    ``SetConditionsError``)."""
    policy = scenario.cluster_policy
    if policy is None:
        return []
    at = rfc3339(epoch_s)
    status: dict[str, Any] = {}
    if policy.state:
        status = {"state": policy.state, "namespace": NAMESPACE}
        if policy.state == "notReady":
            status["conditions"] = [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "Error",
                    "message": "",
                    "lastTransitionTime": at,
                    "observedGeneration": 1,
                },
                {
                    "type": "Error",
                    "status": "True",
                    "reason": "OperandNotReady",
                    "message": policy.message,
                    "lastTransitionTime": at,
                    "observedGeneration": 1,
                },
            ]
        else:
            status["conditions"] = [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Reconciled",
                    "message": policy.message
                    or "ClusterPolicy is ready as all resources have been successfully reconciled",
                    "lastTransitionTime": at,
                    "observedGeneration": 1,
                },
                {
                    "type": "Error",
                    "status": "False",
                    "reason": "Ready",
                    "message": "",
                    "lastTransitionTime": at,
                    "observedGeneration": 1,
                },
            ]
    return [
        {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {
                "name": policy.name,
                "uid": f"clusterpolicy-{policy.name}",
                "generation": 1,
                "creationTimestamp": at,
            },
            "spec": policy.spec,
            "status": status,
        }
    ]


def gpu_cluster_objects(scenario: Scenario, epoch_s: float) -> list[dict[str, Any]]:
    """The scenario's GPUCluster (none without one), its status as its controller writes it
    (``controllers/gpucluster_controller.go``: ``Ready`` True and ``Error`` False when
    reconciled, else ``Ready`` False and ``Error`` True with the reason)."""
    cluster = scenario.gpu_cluster
    if cluster is None:
        return []
    at = rfc3339(epoch_s)
    status: dict[str, Any] = {}
    if cluster.state:
        ready = cluster.state == "ready"
        reason = cluster.reason or ("Reconciled" if ready else "OperandNotReady")
        message = cluster.message or (
            "All resources have been successfully reconciled"
            if ready
            else "Waiting for operand pods to be ready"
        )
        said = [
            ("Ready", ready, reason if ready else "Error", message if ready else ""),
            ("Error", not ready, "Ready" if ready else reason, "" if ready else message),
        ]
        status = {
            "state": cluster.state,
            "namespace": NAMESPACE,
            "conditions": [
                {
                    "type": kind,
                    "status": "True" if ok else "False",
                    "reason": why,
                    "message": text,
                    "lastTransitionTime": at,
                    "observedGeneration": 1,
                }
                for kind, ok, why, text in said
            ],
        }
    return [
        {
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "GPUCluster",
            "metadata": {
                "name": "gpu-cluster",
                "uid": "gpucluster-gpu-cluster",
                "generation": 1,
                "creationTimestamp": at,
            },
            "spec": cluster.spec,
            "status": status,
        }
    ]
