"""GPU Operator objects (API server JSON) → records (agents/kube/gpuoperator.py).

The objects are shaped as the operator and the kubelet write them (NVIDIA/gpu-operator main,
2026-08-21: app labels, init container names and order; pod status as the kubelet reports an
init container crash looping): the seed's lab (001) — host driver, toolkit broken, the validator
crash looping in toolkit-validation, the device plugin waiting for toolkit-ready. Read through
the pure core, they give the one-boundary verdict.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.kube.gpuoperator import cluster_policy, ms, operand_pod, operand_pods
from agents.kube.gpuoperator import gpu_cluster as gpu_cluster_record
from agents.kube.gpuoperator import nvidia_driver as nvidia_driver_record
from contract import codec
from contract.inputs import ContainerProgress, OperandPods, OperandSpec, PolicyCondition
from streams.core.stack.operatorstack import node_status
from tests.fuzz_strategies import json_values
from tests.gpuoperator_objects import gpu_cluster, gpu_cluster_status, nvidia_driver

NS = "gpu-operator-resources"  # microk8s' GPU addon namespace (the seed's lab)
NODE = "gpu-a"
T0 = "2026-05-23T10:00:00Z"
T0_MS = 1779530400000
NOT_READY = (
    "ClusterPolicy is not ready, states not ready: [state-operator-validation "
    "state-device-plugin state-dcgm-exporter gpu-feature-discovery]"
)


def meta(name: str, app: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": NS,
        "labels": {"app": app, "controller-revision-hash": "5d8f7b9c6"},
        "resourceVersion": "4711",
        "creationTimestamp": T0,
    }


def cond(kind: str, status: str, reason: str = "") -> dict[str, Any]:
    c = {"type": kind, "status": status, "lastTransitionTime": T0}
    return {**c, "reason": reason} if reason else c


def completed(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "ready": True,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": T0}},
    }


def waiting(name: str, reason: str, restarts: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "ready": False,
        "restartCount": restarts,
        "state": {"waiting": {"reason": reason, "message": "back-off 5m0s restarting"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
    }


def running(name: str, ready: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "ready": ready,
        "restartCount": 0,
        "state": {"running": {"startedAt": T0}},
    }


def pod(
    name: str,
    app: str,
    inits: list[str],
    mains: list[str],
    status: dict[str, Any],
) -> dict[str, Any]:
    return {
        "metadata": meta(name, app),
        "spec": {
            "nodeName": NODE,
            "initContainers": [{"name": n, "image": "nvcr.io/nvidia/x"} for n in inits],
            "containers": [{"name": n, "image": "nvcr.io/nvidia/x"} for n in mains],
        },
        "status": status,
    }


VALIDATIONS = ["driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation"]

VALIDATOR = pod(
    "nvidia-operator-validator-7xq2m",
    "nvidia-operator-validator",
    VALIDATIONS,
    ["nvidia-operator-validator"],
    {
        "phase": "Pending",
        "conditions": [
            cond("Initialized", "False", "ContainersNotInitialized"),
            cond("Ready", "False", "ContainersNotReady"),
            cond("PodScheduled", "True"),
        ],
        "initContainerStatuses": [
            completed("driver-validation"),
            waiting("toolkit-validation", "CrashLoopBackOff", 7),
            waiting("cuda-validation", "PodInitializing"),
            waiting("plugin-validation", "PodInitializing"),
        ],
        "containerStatuses": [waiting("nvidia-operator-validator", "PodInitializing")],
    },
)


def in_toolkit_wait(name: str, app: str, main: str) -> dict[str, Any]:
    return pod(
        name,
        app,
        ["toolkit-validation"],
        [main],
        {
            "phase": "Pending",
            "conditions": [
                cond("Initialized", "False", "ContainersNotInitialized"),
                cond("Ready", "False", "ContainersNotReady"),
                cond("PodScheduled", "True"),
            ],
            "initContainerStatuses": [running("toolkit-validation")],
            "containerStatuses": [waiting(main, "PodInitializing")],
        },
    )


TOOLKIT = pod(
    "nvidia-container-toolkit-daemonset-4kq9z",
    "nvidia-container-toolkit-daemonset",
    ["driver-validation"],
    ["nvidia-container-toolkit-ctr"],
    {
        "phase": "Running",
        "conditions": [cond("Ready", "True"), cond("PodScheduled", "True")],
        "initContainerStatuses": [completed("driver-validation")],
        "containerStatuses": [running("nvidia-container-toolkit-ctr", ready=True)],
    },
)

SEED_PODS = [
    VALIDATOR,
    TOOLKIT,
    in_toolkit_wait(
        "nvidia-device-plugin-daemonset-b7r5t",
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin",
    ),
    in_toolkit_wait("nvidia-dcgm-exporter-n2m8c", "nvidia-dcgm-exporter", "nvidia-dcgm-exporter"),
    in_toolkit_wait(
        "gpu-feature-discovery-x9d4w", "gpu-feature-discovery", "gpu-feature-discovery"
    ),
]

SEED_POLICY = {
    "apiVersion": "nvidia.com/v1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "cluster-policy", "generation": 3, "resourceVersion": "9001"},
    "spec": {
        "operator": {"defaultRuntime": "containerd"},
        "driver": {"enabled": False},
        "toolkit": {"enabled": True, "version": "v1.17.5-ubuntu20.04"},
        "devicePlugin": {"enabled": True, "config": {"name": "", "default": ""}},
        "dcgm": {"enabled": False},
        "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": False}},
        "gfd": {"enabled": True},
        "mig": {"strategy": "single"},
        "migManager": {"enabled": True, "config": {"default": "all-disabled"}},
        "nodeStatusExporter": {"enabled": False},
        "validator": {"plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "false"}]}},
    },
    "status": {
        "state": "notReady",
        "namespace": NS,
        "conditions": [
            {**cond("Ready", "False", "Error"), "message": ""},
            {**cond("Error", "True", "OperandNotReady"), "message": NOT_READY},
        ],
    },
}

#: a microk8s GPU node as the operator labels it (host driver: no driver DaemonSet pod)
LABELS = {
    "nvidia.com/gpu.present": "true",
    **{
        f"nvidia.com/gpu.deploy.{x}": "true"
        for x in (
            "driver",
            "container-toolkit",
            "device-plugin",
            "dcgm",
            "dcgm-exporter",
            "gpu-feature-discovery",
            "node-status-exporter",
            "operator-validator",
        )
    },
}


def test_validator_init_progress_in_order() -> None:
    got = operand_pod(VALIDATOR)
    assert got is not None
    assert (got.app, got.phase, got.ready, got.restarts) == (
        "nvidia-operator-validator",
        "Pending",
        False,
        0,
    )
    assert got.init == (
        ContainerProgress("driver-validation", "terminated", True, 0, "Completed", 0),
        ContainerProgress("toolkit-validation", "waiting", False, 7, "CrashLoopBackOff"),
        ContainerProgress("cuda-validation", "waiting", False, 0, "PodInitializing"),
        ContainerProgress("plugin-validation", "waiting", False, 0, "PodInitializing"),
    )
    assert got.reason == "PodInitializing"
    assert got.ready_since_ms == T0_MS


def test_crash_looping_exporter_and_unscheduled_pod() -> None:
    exporter = pod(
        "nvidia-dcgm-exporter-n2m8c",
        "nvidia-dcgm-exporter",
        ["toolkit-validation"],
        ["nvidia-dcgm-exporter"],
        {
            "phase": "Running",
            "conditions": [cond("Ready", "False", "ContainersNotReady")],
            "initContainerStatuses": [completed("toolkit-validation")],
            "containerStatuses": [waiting("nvidia-dcgm-exporter", "CrashLoopBackOff", 12)],
        },
    )
    got = operand_pod(exporter)
    assert got is not None
    assert (got.ready, got.restarts, got.reason) == (False, 12, "CrashLoopBackOff")
    unscheduled = pod(
        "gpu-feature-discovery-x9d4w",
        "gpu-feature-discovery",
        ["toolkit-validation"],
        ["gpu-feature-discovery"],
        {"phase": "Pending", "conditions": [cond("PodScheduled", "False", "Unschedulable")]},
    )
    got = operand_pod(unscheduled)
    assert got is not None
    assert (got.phase, got.reason) == ("Pending", "Unschedulable")
    assert got.init == (ContainerProgress("toolkit-validation", "unknown"),)  # not started yet


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"metadata": 5, "status": "x"},
        {"metadata": {"name": "no-app", "labels": {}}},
        {"metadata": {"labels": {"app": "nvidia-dcgm-exporter"}}},
    ],
    ids=["empty", "wrong types", "no app label", "no name"],
)
def test_unusable_pods_give_no_record(obj: dict[str, Any]) -> None:
    assert operand_pod(obj) is None


def test_partial_pod_is_unknown_not_a_crash() -> None:
    got = operand_pod(
        {
            "metadata": {"name": "p", "labels": {"app": "nvidia-dcgm"}, "deletionTimestamp": T0},
            "spec": {"initContainers": "x", "containers": [7, {"name": 3}]},
            "status": {"phase": "Exploded", "containerStatuses": [{"restartCount": -4}]},
        }
    )
    assert got is not None
    assert (got.phase, got.ready, got.restarts, got.init, got.containers) == (
        "Unknown",
        False,
        0,
        (),
        (),
    )
    assert got.deleting


def test_node_filter_and_order() -> None:
    elsewhere = {**TOOLKIT, "spec": {**TOOLKIT["spec"], "nodeName": "gpu-b"}}
    other_ns = {**TOOLKIT, "metadata": {**TOOLKIT["metadata"], "namespace": "kube-system"}}
    got = operand_pods(
        [*reversed(SEED_PODS), elsewhere, other_ns], node=NODE, namespace=NS, ts_ms=5
    )
    assert [p.name for p in got.pods] == sorted(p["metadata"]["name"] for p in SEED_PODS)
    assert codec.decode(codec.encode(got)) == got


def test_cluster_policy_as_written() -> None:
    got = cluster_policy(SEED_POLICY, ts_ms=5)
    assert got is not None
    assert got.operands == (
        OperandSpec("dcgm", False),
        OperandSpec("dcgmExporter", True),
        OperandSpec("devicePlugin", True),
        OperandSpec("driver", False),
        OperandSpec("gfd", True),
        OperandSpec("migManager", True),
        OperandSpec("nodeStatusExporter", False),
        OperandSpec("toolkit", True),
    )  # validator and operator have no `enabled`: left out
    assert (got.mig_strategy, got.state, got.namespace, got.generation) == (
        "single",
        "notReady",
        NS,
        3,
    )
    assert got.conditions[1] == PolicyCondition(
        "Error", "True", "OperandNotReady", NOT_READY, T0_MS
    )
    assert codec.decode(codec.encode(got)) == got


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({}, None),
        ({"metadata": {"name": "p"}, "spec": [], "status": {"state": "exploded"}}, ""),
        (
            {"metadata": {"name": "p"}, "status": {"state": "ignored", "conditions": [{}]}},
            "ignored",
        ),
    ],
    ids=["no name", "odd spec and state", "ignored"],
)
def test_cluster_policy_partial(obj: dict[str, Any], expected: str | None) -> None:
    got = cluster_policy(obj, ts_ms=1)
    if expected is None:
        assert got is None
    else:
        assert got is not None
        assert (got.state, got.operands, got.conditions) == (expected, (), ())


@pytest.mark.parametrize(
    ("value", "expected"),
    [(T0, T0_MS), ("2026-05-23T10:00:00.5+00:00", T0_MS + 500), ("soon", None), (None, None)],
)
def test_times(value: object, expected: int | None) -> None:
    assert ms(value) == expected


def test_seed_through_the_core_names_the_toolkit() -> None:
    """The seed's objects, translated and judged: one boundary, not four operands."""
    pods = operand_pods(SEED_PODS, node=NODE, namespace=NS, ts_ms=5)
    policy = cluster_policy(SEED_POLICY, ts_ms=5)
    got = node_status(NODE, 5, LABELS, policy, pods)
    assert got.state == "broken"
    assert got.first_broken == "container-toolkit"
    assert got.summary == (
        "container toolkit not ready on gpu-a (the validator's toolkit-validation "
        "CrashLoopBackOff, 7 restarts); device plugin, dcgm-exporter and GFD wait on it"
    )
    assert got.policy is not None
    assert got.policy.message == NOT_READY


# --- bad input: a record or nothing, never a crash (Hypothesis)


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*path, i))
    return out


def _replace(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        return {**node, head: _replace(node[head], rest, value)}
    copy = list(node)
    copy[head] = _replace(copy[head], rest, value)
    return copy


@st.composite
def mangled(draw: st.DrawFn, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with one value anywhere in it replaced by any JSON value."""
    path = draw(st.sampled_from(_paths(obj)[1:]))
    return _replace(obj, path, draw(json_values))  # type: ignore[no-any-return]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(SEED_PODS).flatmap(mangled))
def test_any_mangled_pod_is_a_record_or_none(obj: dict[str, Any]) -> None:
    got = operand_pod(obj)
    if got is not None:
        record = OperandPods(NODE, 1, NS, (got,))
        assert codec.decode(codec.encode(record)) == record
    pods = operand_pods([obj], node=NODE, namespace=NS, ts_ms=1)
    assert codec.decode(codec.encode(pods)) == pods


@settings(max_examples=300, deadline=None)
@given(mangled(SEED_POLICY))
def test_any_mangled_policy_is_a_record_or_none(obj: dict[str, Any]) -> None:
    got = cluster_policy(obj, ts_ms=1)
    if got is not None:
        assert codec.decode(codec.encode(got)) == got


@pytest.mark.parametrize(
    ("generation", "expected"),
    [(3, 3), (False, None), (True, None), (2**63, None), ("3", None)],
    ids=["int", "false", "true", "beyond-int64", "string"],
)
def test_a_policy_generation_is_an_int64_or_none(generation: object, expected: int | None) -> None:
    meta = {**SEED_POLICY["metadata"], "generation": generation}
    got = cluster_policy({**SEED_POLICY, "metadata": meta}, ts_ms=1)
    assert got is not None
    assert got.generation == expected
    assert codec.decode(codec.encode(got)) == got


def test_restart_counts_beyond_int32_are_not_counts() -> None:
    status = {**VALIDATOR["status"], "containerStatuses": [waiting("v", "CrashLoopBackOff", 2**62)]}
    got = operand_pod({**VALIDATOR, "status": status})
    assert got is not None
    assert got.restarts == 0


# --- the DRA stack's GPUCluster and NVIDIADriver


def test_gpu_cluster_as_written() -> None:
    obj = {
        **gpu_cluster(dcgm=True, exporter=False),
        "status": gpu_cluster_status(False),
    }
    obj["metadata"] = {**obj["metadata"], "generation": 2, "resourceVersion": "41"}
    obj["spec"]["draDriver"]["computeDomains"] = {"enabled": True}
    got = gpu_cluster_record(obj, ts_ms=5)
    assert got is not None
    assert got.operands == (
        OperandSpec("computeDomains", True),
        OperandSpec("dcgm", True),
        OperandSpec("dcgmExporter", False),
    )
    assert (got.state, got.namespace, got.generation, got.unknown_fields) == (
        "notReady",
        "gpu-operator",
        2,
        (),
    )
    assert [(c.type, c.status, c.reason) for c in got.conditions] == [
        ("Ready", "False", "Error"),
        ("Error", "True", "OperandNotReady"),
    ]
    assert codec.decode(codec.encode(got)) == got


def test_a_gpu_cluster_with_fields_we_do_not_know_names_them() -> None:
    obj = {**gpu_cluster(), "status": {"state": "degraded"}}
    obj["spec"] = {**obj["spec"], "sandboxWorkloads": {"enabled": True}, "dcgm": "on"}
    got = gpu_cluster_record(obj, ts_ms=1)
    assert got is not None
    assert (got.unknown_fields, got.operands, got.state) == (("sandboxWorkloads",), (), "")


def test_unusable_gpu_operator_objects_give_no_record() -> None:
    assert gpu_cluster_record({"spec": {}}, ts_ms=1) is None
    assert nvidia_driver_record({"metadata": {"name": ""}}, ts_ms=1) is None


def test_nvidia_driver_as_written() -> None:
    got = nvidia_driver_record(
        {**nvidia_driver(), "status": {"state": "ignored", "namespace": "gpu-operator"}}, ts_ms=3
    )
    assert got is not None
    assert (got.name, got.driver_type, got.version, got.state) == (
        "default",
        "gpu",
        "580.95.05",
        "ignored",
    )
