"""Deploy manifests: valid against the Kubernetes schemas, least privilege, topics in sync."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from infra.settings import KafkaSettings
from infra.topics import topic_specs
from tests.kustomize_render import base_docs, microk8s_docs, nvml_processes_docs

K8S_VERSION = "1.34.0"


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize(
    "render",
    [base_docs, microk8s_docs, nvml_processes_docs],
    ids=["base", "microk8s", "nvml-processes"],
)
def test_manifests_validate_strictly(render: Any) -> None:
    # operators' CRDs (Strimzi topics, Prometheus Operator monitors and rules) have no schema
    # here: topics are checked against our specs below, rules by promtool
    crds = ("kafka.strimzi.io/v1", "monitoring.coreos.com/v1")
    docs = [d for d in render() if d["apiVersion"] not in crds]
    assert {d["kind"] for d in docs} >= {
        "DaemonSet",
        "Deployment",
        "ClusterRole",
        "ServiceAccount",
        "ConfigMap",
        "Secret",
    }
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_microk8s_overlay_mounts_its_kubelet_root() -> None:
    (agent,) = by_kind(microk8s_docs(), "DaemonSet")
    paths = [
        v["hostPath"]["path"]
        for v in agent["spec"]["template"]["spec"]["volumes"]
        if "hostPath" in v
    ]
    assert paths == ["/var/snap/microk8s/common/var/lib/kubelet/pod-resources"]


def test_nvml_processes_overlay_adds_the_host_pid_namespace_and_nvml_only() -> None:
    """The opt-in NVML source's overlay: the host's PID namespace (NVML names host PIDs), NVML
    in the container and the setting; no mount, no capability, no other change to the pod."""
    (base,) = by_kind(base_docs(), "DaemonSet")
    (agent,) = by_kind(nvml_processes_docs(), "DaemonSet")
    pod, base_pod = agent["spec"]["template"]["spec"], base["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert pod["runtimeClassName"] == "nvidia"
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["GPUATTR_AGENT_NVML_PROCESSES"] == "true"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert pod["volumes"] == base_pod["volumes"]
    (container,), (base_container,) = pod["containers"], base_pod["containers"]
    assert container["securityContext"] == base_container["securityContext"]
    assert container["volumeMounts"] == base_container["volumeMounts"]
    rest = {k: v for k, v in pod.items() if k not in ("hostPID", "runtimeClassName", "containers")}
    assert rest == {k: v for k, v in base_pod.items() if k != "containers"}


def test_agent_is_least_privileged() -> None:
    docs = base_docs()
    (role,) = [r for r in by_kind(docs, "ClusterRole") if r["metadata"]["name"] == "gpuattr-agent"]
    assert role["rules"] == [  # list and watch: the agent never gets a single object
        {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["list", "watch"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices", "resourceclaims"],
            "verbs": ["list", "watch"],
        },
    ]
    (agent,) = by_kind(docs, "DaemonSet")
    pod = agent["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    sec = ctr["securityContext"]
    assert sec["readOnlyRootFilesystem"] is True
    assert sec["capabilities"] == {"drop": ["ALL"]}
    assert all(m.get("readOnly") for m in ctr["volumeMounts"] if m["name"] != "tmp")
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in ctr[
        "env"
    ]
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    assert "limits" in ctr["resources"]
    assert "requests" in ctr["resources"]


def test_strimzi_topics_match_gpuattr_topics() -> None:
    topics = {d["spec"]["topicName"]: d["spec"] for d in by_kind(base_docs(), "KafkaTopic")}
    specs = topic_specs(KafkaSettings(partitions=8, replication=3), "gpuattr-worker")
    assert set(topics) == {s.name for s in specs}
    for s in specs:
        t = topics[s.name]
        assert (t["partitions"], t["replicas"]) == (s.partitions, s.replication)
        assert t["config"] == dict(s.config)
    assert all(
        t["config"]["cleanup.policy"] == "compact"
        for n, t in topics.items()
        if n.endswith("-changelog")
    )


def test_the_validator_rejects_a_typo() -> None:
    (agent,) = by_kind(base_docs(), "DaemonSet")
    agent["spec"]["template"]["spec"]["tolerationz"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(agent, K8S_VERSION, strict=True)


def test_every_workload_has_probes_on_its_health_endpoints() -> None:
    for doc in base_docs():
        if doc["kind"] not in ("DaemonSet", "Deployment"):
            continue
        (ctr,) = doc["spec"]["template"]["spec"]["containers"]
        assert ctr["livenessProbe"]["httpGet"]["path"] == "/healthz", doc["metadata"]["name"]
        assert ctr["readinessProbe"]["httpGet"]["path"] == "/readyz", doc["metadata"]["name"]


def test_cluster_role_reads_nodes_pending_pods_policies_taint_rules_kueue_and_only_its_lease() -> (
    None
):
    docs = base_docs()
    (role,) = [
        r for r in by_kind(docs, "ClusterRole") if r["metadata"]["name"] == "gpuattr-cluster"
    ]
    assert role["rules"] == [  # list and watch: it never gets, and never writes, a single object
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims", "resourceclaimtemplates"],
            "verbs": ["list"],
        },
        {
            "apiGroups": ["nvidia.com"],
            "resources": ["clusterpolicies", "gpuclusters", "nvidiadrivers"],
            "verbs": ["list", "watch"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["devicetaintrules"],
            "verbs": ["list", "watch"],
        },
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["workloads", "localqueues", "clusterqueues", "resourceflavors"],
            "verbs": ["list", "watch"],
        },
    ]
    (lease,) = [
        r for r in by_kind(docs, "Role") if r["metadata"]["name"] == "gpuattr-cluster-lease"
    ]
    assert lease["metadata"]["namespace"] == "gpuattr"
    assert lease["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["gpuattr-cluster"],
            "verbs": ["get", "update"],
        },
    ]
    (deployment,) = [
        d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "gpuattr-cluster"
    ]
    spec = deployment["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "gpuattr-cluster"
    (ctr,) = spec["containers"]
    assert ctr["args"] == ["cluster"]
    assert ctr["securityContext"]["runAsNonRoot"] is True
