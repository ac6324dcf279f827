"""The simulator's GPU Operator (sim/gpuoperator.py, scenario ``operator-lab``): its objects are
shaped as the operator's DaemonSet pods and ClusterPolicy, so the agent's translator
(agents/kube/gpuoperator.py) reads them back, and the pure verdict gives the lab's story at each
scenario time. Scenarios without an operator stay as they were: no deploy labels, no operand
pods, no ClusterPolicy."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from agents.kube.gpuoperator import cluster_policy, operand_pods
from contract.outputs import NodeStatus
from sim.gpuoperator import (
    NAMESPACE,
    cluster_policy_objects,
    exporter_answers,
    operand_pod_objects,
)
from sim.kube_objects import exporter_pod_objects, node_objects, pod_objects
from sim.scenario import builtin_names, load
from streams.core.stack.operatorstack import node_status

EPOCH = 1_780_000_000.0
LAB = load("operator-lab")
VALIDATIONS = ("driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation")


def pods_at(t: float) -> list[dict[str, Any]]:
    return operand_pod_objects(LAB, t, EPOCH, exporter_ports={"lab-c": 40123})


def status_at(node: str, t: float) -> NodeStatus:
    labels = next(n for n in node_objects(LAB, t) if n["metadata"]["name"] == node)["metadata"][
        "labels"
    ]
    policy = cluster_policy(cluster_policy_objects(LAB, EPOCH)[0], ts_ms=0)
    record = operand_pods(pods_at(t), node=node, namespace=NAMESPACE, ts_ms=0)
    return node_status(node, 0, labels, policy, record)


def test_operand_pods_look_like_the_operators_daemonset_pods() -> None:
    pods = [p for p in pods_at(5) if p["spec"]["nodeName"] == "lab-a"]
    apps = {p["metadata"]["labels"]["app"] for p in pods}
    # host driver (pre-installed) and standalone DCGM off by the ClusterPolicy: no pods; no MIG
    # manager on a GPU that is not MIG capable
    assert apps == {
        "nvidia-container-toolkit-daemonset",
        "nvidia-operator-validator",
        "nvidia-device-plugin-daemonset",
        "nvidia-dcgm-exporter",
        "gpu-feature-discovery",
    }
    for pod in pods:
        meta, app = pod["metadata"], pod["metadata"]["labels"]["app"]
        assert meta["namespace"] == NAMESPACE
        assert meta["name"].startswith(f"{app}-")
        assert len(meta["name"]) == len(app) + 6
        (owner,) = meta["ownerReferences"]
        assert (owner["apiVersion"], owner["kind"], owner["name"]) == ("apps/v1", "DaemonSet", app)
        assert owner["controller"] is True
        assert {"controller-revision-hash", "pod-template-generation"} <= set(meta["labels"])
        # init container statuses in the spec's order, one per init container
        spec_inits = [c["name"] for c in pod["spec"]["initContainers"]]
        assert [s["name"] for s in pod["status"]["initContainerStatuses"]] == spec_inits
    validator = next(
        p for p in pods if p["metadata"]["labels"]["app"] == "nvidia-operator-validator"
    )
    assert tuple(c["name"] for c in validator["spec"]["initContainers"]) == VALIDATIONS


@pytest.mark.parametrize("t", [5, 60, 125])
async def test_the_client_library_reads_every_object_as_the_agent_does(t: float) -> None:
    """The agent's watches hand the API server's JSON to the client's models first (V1Pod
    validates required fields such as a container status's image)."""
    async with ApiClient() as api:
        for obj in [*pod_objects(LAB, t, EPOCH), *pods_at(t)]:
            response: Any = SimpleNamespace(data=json.dumps(obj))
            pod = api.deserialize(response, "V1Pod")
            assert pod.metadata.name == obj["metadata"]["name"]
        for obj in node_objects(LAB, t):
            api.deserialize(SimpleNamespace(data=json.dumps(obj)), "V1Node")


def test_the_translator_reads_the_seeds_lab_back() -> None:
    record = operand_pods(pods_at(5), node="lab-a", namespace=NAMESPACE, ts_ms=0)
    by_app = {p.app: p for p in record.pods}
    validator = by_app["nvidia-operator-validator"]
    assert validator.phase == "Pending"
    assert not validator.ready
    assert [(c.name, c.state, c.ready) for c in validator.init] == [
        ("driver-validation", "terminated", True),
        ("toolkit-validation", "waiting", False),
        ("cuda-validation", "waiting", False),
        ("plugin-validation", "waiting", False),
    ]
    assert (validator.init[1].reason, validator.init[1].restarts) == ("CrashLoopBackOff", 7)
    plugin = by_app["nvidia-device-plugin-daemonset"]
    assert [(c.name, c.state) for c in plugin.init] == [
        ("toolkit-validation", "running"),  # waits for toolkit-ready
        ("config-manager-init", "waiting"),
    ]
    assert by_app["nvidia-container-toolkit-daemonset"].ready  # its pod is Ready: the trap


def test_the_crash_looping_exporter_reads_back_with_its_restarts_then_ready() -> None:
    def exporter(t: float) -> Any:
        record = operand_pods(pods_at(t), node="lab-c", namespace=NAMESPACE, ts_ms=0)
        return next(p for p in record.pods if p.app == "nvidia-dcgm-exporter")

    early, later, recovered = exporter(5), exporter(60), exporter(110)
    assert (early.ready, early.reason, early.restarts) == (False, "CrashLoopBackOff", 11)
    assert (later.reason, later.restarts) == ("CrashLoopBackOff", 12)
    assert recovered.ready
    assert recovered.restarts == 12
    lab_c = LAB.node("lab-c")
    assert [exporter_answers(LAB, lab_c, t) for t in (5, 60, 110)] == [False, False, True]
    # its pod is where the agent scrapes: pod IP and the port named metrics
    pod = next(p for p in pods_at(110) if p["metadata"]["name"] == recovered.name)
    (port,) = pod["spec"]["containers"][0]["ports"]
    assert (port["name"], port["containerPort"], pod["status"]["podIP"]) == (
        "metrics",
        40123,
        "127.0.0.1",
    )


def test_the_cluster_policy_reads_back() -> None:
    (obj,) = cluster_policy_objects(LAB, EPOCH)
    assert (obj["apiVersion"], obj["kind"]) == ("nvidia.com/v1", "ClusterPolicy")
    assert "namespace" not in obj["metadata"]  # cluster-scoped
    record = cluster_policy(obj, ts_ms=0)
    assert record is not None
    enabled = {o.operand: o.enabled for o in record.operands}
    assert enabled["driver"] is False
    assert enabled["dcgm"] is False
    assert enabled["toolkit"]
    assert enabled["dcgmExporter"]
    assert enabled["migManager"]
    assert (record.state, record.mig_strategy, record.namespace) == (
        "notReady",
        "mixed",
        NAMESPACE,
    )
    error = next(c for c in record.conditions if c.type == "Error")
    assert "states not ready: [state-operator-validation state-device-plugin" in error.message


@pytest.mark.parametrize(
    ("node", "t", "state", "first_broken", "blocked"),
    [
        pytest.param(
            "lab-a",
            5,
            "broken",
            "container-toolkit",
            ("device-plugin", "dcgm-exporter", "gpu-feature-discovery", "operator-validator"),
            id="toolkit-one-boundary-four-waiting",
        ),
        pytest.param("lab-b", 5, "ready", None, (), id="exporter-off-by-label"),
        pytest.param("lab-c", 5, "broken", "dcgm-exporter", (), id="exporter-crashloop"),
        pytest.param("lab-c", 110, "ready", None, (), id="exporter-recovered"),
        pytest.param("lab-d", 5, "ready", None, (), id="mig-applied"),
        pytest.param("lab-d", 60, "reconciling", None, (), id="mig-pending"),
        pytest.param("lab-d", 125, "broken", "mig-manager", (), id="mig-failed"),
    ],
)
def test_the_lab_through_the_verdict(
    node: str, t: float, state: str, first_broken: str | None, blocked: tuple[str, ...]
) -> None:
    status = status_at(node, t)
    assert (status.state, status.first_broken, status.blocked) == (state, first_broken, blocked)


OPENSHIFT = "nvidia-gpu-operator"  # where OpenShift's OperatorHub install runs the operator


@pytest.mark.parametrize("node", ["lab-a", "lab-b", "lab-c", "lab-d"])
def test_the_lab_in_another_namespace_than_the_agent_watches_is_unknown_never_broken(
    node: str,
) -> None:
    """The operator runs its operands in ``nvidia-gpu-operator`` (its ClusterPolicy's
    ``status.namespace`` says so); the agent watches the default ``gpu-operator`` and finds none
    of them there: no plane is judged from pods it cannot see, so nothing pages."""
    (obj,) = cluster_policy_objects(LAB, EPOCH)
    policy = cluster_policy({**obj, "status": {**obj["status"], "namespace": OPENSHIFT}}, ts_ms=0)
    assert policy is not None
    assert policy.namespace == OPENSHIFT
    moved = [{**p, "metadata": {**p["metadata"], "namespace": OPENSHIFT}} for p in pods_at(5)]
    record = operand_pods(moved, node=node, namespace=NAMESPACE, ts_ms=0)
    assert record.pods == ()
    labels = next(n for n in node_objects(LAB, 5) if n["metadata"]["name"] == node)["metadata"][
        "labels"
    ]
    status = node_status(node, 0, labels, policy, record)
    assert (status.state, status.first_broken) == ("unknown", None)
    assert f"ClusterPolicy cluster-policy runs them in {OPENSHIFT}" in status.summary
    # the agent set to the policy's namespace reads them, and the lab's story is back
    found = operand_pods(moved, node=node, namespace=OPENSHIFT, ts_ms=0)
    assert node_status(node, 0, labels, policy, found).state == status_at(node, 5).state


def test_the_verdicts_words() -> None:
    assert status_at("lab-a", 5).summary.startswith("container toolkit not ready on lab-a")
    off = status_at("lab-b", 5)
    assert off.telemetry_disabled
    assert off.telemetry_reason == (
        "dcgm-exporter disabled on this node by nvidia.com/gpu.deploy.dcgm-exporter=false"
    )
    assert "11 restarts" in status_at("lab-c", 5).summary
    assert status_at("lab-d", 60).mig.state == "pending"
    assert status_at("lab-d", 125).mig.state == "failed"


def test_no_exporter_pod_where_it_is_disabled_and_no_plain_exporter_pod_on_operator_nodes() -> None:
    apps = {(p["spec"]["nodeName"], p["metadata"]["labels"]["app"]) for p in pods_at(5)}
    assert ("lab-b", "nvidia-dcgm-exporter") not in apps
    ports = {n.name: 9400 + i for i, n in enumerate(LAB.nodes)}
    assert exporter_pod_objects(LAB, ports, EPOCH) == []  # the operand pods are the exporters


@pytest.mark.parametrize(
    "name", [n for n in builtin_names() if n not in ("operator-lab", "dra-stack")]
)
def test_scenarios_without_an_operator_are_unchanged(name: str) -> None:
    scenario = load(name)
    assert scenario.cluster_policy is None
    assert operand_pod_objects(scenario, 5, EPOCH) == []
    assert cluster_policy_objects(scenario, EPOCH) == []
    for node in node_objects(scenario, 5):
        labels = node["metadata"]["labels"]
        assert not [k for k in labels if k.startswith("nvidia.com/gpu.deploy.")]
        assert "nvidia.com/mig.config.state" not in labels
    assert all(exporter_answers(scenario, n, 5) for n in scenario.nodes)
