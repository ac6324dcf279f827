"""The simulator's GPU Operator DRA stack (scenario ``dra-stack``): the GPUCluster and its
operands (``manifests/state-dra-*``) are shaped as the operator writes them, so the agent's
translators read them back, and the pure verdict tells the scenario's story: dra-a's DRA driver
crash looping from 30 s (the host's driver validated in the plugin's own ``driver-validation``),
dra-b ready, the GPUCluster's own word beside them."""

from __future__ import annotations

from typing import Any

import pytest

from agents.kube.gpuoperator import gpu_cluster, operand_pods
from agents.locate import refusal
from contract.outputs import NodeStatus
from sim.gpuoperator import NAMESPACE, exporter_answers, gpu_cluster_objects, operand_pod_objects
from sim.kube_objects import node_objects
from sim.scenario import load
from streams.core.stack.operatorstack import node_status
from tests.unit.test_locate import pod as exporter_pod

EPOCH = 1_780_000_000.0
STACK = load("dra-stack")


def pods_at(t: float) -> list[dict[str, Any]]:
    return operand_pod_objects(STACK, t, EPOCH, exporter_ports={"dra-a": 40123, "dra-b": 40124})


def status_at(node: str, t: float) -> NodeStatus:
    (obj,) = [n for n in node_objects(STACK, t) if n["metadata"]["name"] == node]
    cluster = gpu_cluster(gpu_cluster_objects(STACK, EPOCH)[0], ts_ms=0)
    record = operand_pods(pods_at(t), node=node, namespace=NAMESPACE, ts_ms=0)
    return node_status(node, 0, obj["metadata"]["labels"], None, record, cluster=cluster)


def test_the_gpucluster_as_its_controller_writes_it() -> None:
    (obj,) = gpu_cluster_objects(STACK, EPOCH)
    assert obj["metadata"]["name"] == "gpu-cluster"  # the CRD's singleton rule
    record = gpu_cluster(obj, ts_ms=0)
    assert record is not None
    assert (record.state, record.namespace, record.unknown_fields) == ("notReady", NAMESPACE, ())
    error = next(c for c in record.conditions if c.type == "Error")
    assert (error.status, error.reason) == ("True", "OperandNotReady")


def test_the_dra_nodes_run_the_gpuclusters_operands_and_no_device_plugin() -> None:
    apps = {p["metadata"]["labels"]["app"] for p in pods_at(5) if p["spec"]["nodeName"] == "dra-a"}
    # DCGM off by the controller's default; the driver is the host's
    assert apps == {
        "nvidia-dra-driver-kubelet-plugin",
        "nvidia-dcgm-exporter-dra",
        "nvidia-operator-validator",
    }
    (validator,) = [
        p
        for p in pods_at(5)
        if p["spec"]["nodeName"] == "dra-a"
        and p["metadata"]["labels"]["app"] == "nvidia-operator-validator"
    ]
    assert validator["metadata"]["ownerReferences"][0]["name"] == "nvidia-dra-validator"


def test_the_dra_exporter_is_one_the_agent_trusts() -> None:
    (exporter,) = [
        p
        for p in pods_at(5)
        if p["spec"]["nodeName"] == "dra-a"
        and p["metadata"]["labels"]["app"] == "nvidia-dcgm-exporter-dra"
    ]
    owner = exporter["metadata"]["ownerReferences"][0]["name"]
    candidate = exporter_pod(owner=("DaemonSet", owner))
    assert refusal(candidate, NAMESPACE, "nvidia-dcgm-exporter") is None
    assert exporter_answers(STACK, STACK.node("dra-a"), 60)


@pytest.mark.parametrize(
    ("node", "t", "state", "summary"),
    [
        ("dra-a", 10, "ready", "GPU stack ready on dra-a"),
        ("dra-a", 60, "broken", "DRA driver not ready on dra-a (CrashLoopBackOff, 3 restarts)"),
        ("dra-a", 120, "broken", "DRA driver not ready on dra-a (CrashLoopBackOff, 6 restarts)"),
        ("dra-b", 120, "ready", "GPU stack ready on dra-b"),
    ],
)
def test_the_story(node: str, t: float, state: str, summary: str) -> None:
    got = status_at(node, t)
    assert (got.state, got.summary.split("; GPUCluster")[0]) == (state, summary)
    assert got.policy is not None
    assert (got.policy.kind, got.policy.ready) == ("GPUCluster", False)
    planes = {p.name: p for p in got.planes}
    assert (planes["driver"].state, planes["driver"].intent.decided_by) == ("ready", "gpu-cluster")
    assert (planes["dcgm"].state, planes["dcgm"].intent.decided_by) == (
        "disabled",
        "operator-default",
    )
    assert planes["dcgm-exporter"].state == "ready"
