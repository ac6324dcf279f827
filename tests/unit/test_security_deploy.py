"""Security properties of the deployment: an agent that needs no write access — its DaemonSet
(base and microk8s renders) cannot write to the node, and its service account can only list and
watch pods, nodes and DRA objects; one identity per role — its own ServiceAccount,
Secret and Kafka user, the Slack and webhook secrets in the sink's Secret alone; Pod Security
`restricted` for every namespace but the agent's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.kustomize_render import base_docs, microk8s_docs

# --- the agent needs no write access ----------------------------------------------------------


RENDERS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "base": base_docs,
    "microk8s": microk8s_docs,
}
READ_VERBS = {"list", "watch"}  # the agent never gets one object: it lists and watches


@pytest.mark.parametrize("render", sorted(RENDERS))
def test_agent_daemonset_cannot_write_to_the_node(render: str) -> None:
    docs = RENDERS[render]()
    (agent,) = [d for d in docs if d["kind"] == "DaemonSet" and "agent" in d["metadata"]["name"]]
    pod = agent["spec"]["template"]["spec"]
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    host_volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert any(path.endswith("/pod-resources") for path in host_volumes.values())
    for ctr in [*pod["containers"], *pod.get("initContainers", [])]:
        sec = ctr["securityContext"]
        assert sec["readOnlyRootFilesystem"] is True
        assert sec["allowPrivilegeEscalation"] is False
        assert not sec.get("privileged", False)
        assert sec["capabilities"]["drop"] == ["ALL"]
        assert not sec["capabilities"].get("add")
        mounts = {m["name"]: m for m in ctr.get("volumeMounts", [])}
        for name, path in host_volumes.items():
            if name in mounts:
                assert mounts[name].get("readOnly") is True, f"{path} mounted writable"
        pod_resources = [
            m for n, m in mounts.items() if host_volumes.get(n, "").endswith("/pod-resources")
        ]
        assert pod_resources
        assert all(m["readOnly"] is True for m in pod_resources)


#: what the agent may read, by API group: pods and nodes; DRA slices and claims
AGENT_READS = {"": {"pods", "nodes"}, "resource.k8s.io": {"resourceslices", "resourceclaims"}}


def test_agent_service_account_can_only_read_pods_nodes_and_dra_objects() -> None:
    docs = base_docs()
    (agent,) = [d for d in docs if d["kind"] == "DaemonSet" and "agent" in d["metadata"]["name"]]
    account = agent["spec"]["template"]["spec"]["serviceAccountName"]
    namespace = agent["metadata"]["namespace"]
    roles = {
        (d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("Role", "ClusterRole")
    }
    bound = [
        (d["roleRef"]["kind"], d["roleRef"]["name"])
        for d in docs
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(
            s["kind"] == "ServiceAccount"
            and s["name"] == account
            and s.get("namespace", d["metadata"].get("namespace")) == namespace
            for s in d.get("subjects", [])
        )
    ]
    assert bound, "the agent's service account is bound to no role"
    for ref in bound:
        rules = roles[ref]["rules"]
        assert rules
        for rule in rules:
            assert set(rule["verbs"]) <= READ_VERBS, rule
            assert "*" not in rule.get("resources", [])
            assert "*" not in rule.get("apiGroups", [])
            for group in rule["apiGroups"]:
                assert set(rule["resources"]) <= AGENT_READS.get(group, set()), rule
            assert "nonResourceURLs" not in rule
            assert "resourceNames" not in rule
    for doc in docs:  # no other role in the base may write anything either, but the cluster
        # role's election (its own Lease: tests/unit/test_deploy.py pins those rules) and the
        # worker's reviews of its callers (pinned below); the readers only get the query API
        for rule in doc.get("rules", []) if doc["kind"] in ("Role", "ClusterRole") else []:
            name = doc["metadata"]["name"]
            if rule.get("resources") == ["leases"] and name == "gpuattr-cluster-lease":
                continue
            if name in ("gpuattr-worker-reviews", "gpuattr-reader"):
                continue
            assert set(rule["verbs"]) <= READ_VERBS, (name, rule)


def test_the_worker_may_only_review_its_callers_and_read_its_peers() -> None:
    """The query API checks each caller's token with the API server (TokenReview, then
    SubjectAccessReview of get on queryapi.gpuattr.io); the workers' own account may read each
    other's listings, and the reader role grants nothing but the query API."""
    docs = base_docs()
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    assert roles["gpuattr-worker-reviews"]["rules"] == [
        {
            "apiGroups": ["authentication.k8s.io"],
            "resources": ["tokenreviews"],
            "verbs": ["create"],
        },
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["subjectaccessreviews"],
            "verbs": ["create"],
        },
    ]
    assert roles["gpuattr-reader"]["rules"] == [
        {"apiGroups": ["gpuattr.io"], "resources": ["queryapi"], "verbs": ["get"]}
    ]
    bound = {
        d["roleRef"]["name"]
        for d in docs
        if d["kind"] == "ClusterRoleBinding"
        and {"kind": "ServiceAccount", "name": "gpuattr-worker", "namespace": "gpuattr"}
        in d["subjects"]
    }
    assert bound == {"gpuattr-worker-reviews", "gpuattr-reader"}
    worker = workload(docs, "worker")
    (ctr,) = worker["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["GPUATTR_API_KUBE_AUTH"] == "true"
    assert env["GPUATTR_API_TOKEN_FILE"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"


# --- one identity per role --------------------------------------------------------------------

ROLES = {
    "agent": "DaemonSet",
    "cluster": "Deployment",
    "worker": "Deployment",
    "sink": "Deployment",
}
KAFKA_IDENTITY = {"GPUATTR_KAFKA_SASL_USERNAME", "GPUATTR_KAFKA_SASL_PASSWORD"}
SINK_SECRETS = {
    "GPUATTR_SINK_SLACK_WEBHOOK_URL",
    "GPUATTR_SINK_WEBHOOK_URL",
    "GPUATTR_SINK_WEBHOOK_SECRET",
}


def workload(docs: list[dict[str, Any]], role: str) -> dict[str, Any]:
    (doc,) = [
        d for d in docs if d["kind"] == ROLES[role] and d["metadata"]["name"] == f"gpuattr-{role}"
    ]
    return doc


def secrets_of(docs: list[dict[str, Any]], doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The Secrets a workload's containers read (envFrom, env, volumes), from its namespace."""
    namespace = doc["metadata"]["namespace"]
    pod = doc["spec"]["template"]["spec"]
    names = {
        ref["secretRef"]["name"]
        for ctr in pod["containers"]
        for ref in ctr.get("envFrom", [])
        if "secretRef" in ref
    }
    names |= {
        e["valueFrom"]["secretKeyRef"]["name"]
        for ctr in pod["containers"]
        for e in ctr.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    mounted = {v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
    assert mounted <= {"my-cluster-cluster-ca-cert"}  # the Kafka cluster's CA: public
    shipped = {
        d["metadata"]["name"]: d
        for d in docs
        if d["kind"] == "Secret" and d["metadata"]["namespace"] == namespace
    }
    assert names <= set(shipped), names - set(shipped)
    return [shipped[n] for n in sorted(names)]


@pytest.mark.parametrize("render", sorted(RENDERS))
def test_each_role_has_its_own_account_secret_and_kafka_user(render: str) -> None:
    docs = RENDERS[render]()
    users = {d["metadata"]["name"] for d in docs if d["kind"] == "KafkaUser"}
    seen_accounts, seen_secrets = set(), set()
    for role in ROLES:
        doc = workload(docs, role)
        pod = doc["spec"]["template"]["spec"]
        account = (doc["metadata"]["namespace"], pod["serviceAccountName"])
        assert account[1] == f"gpuattr-{role}"
        (secret,) = secrets_of(docs, doc)
        keys = set(secret["stringData"])
        assert secret["stringData"]["GPUATTR_KAFKA_SASL_USERNAME"] == f"gpuattr-{role}"
        assert f"gpuattr-{role}" in users  # a KafkaUser with that role's ACLs
        if role == "sink":  # the sink alone holds the Slack and webhook secrets
            assert keys == KAFKA_IDENTITY | SINK_SECRETS
        elif role in ("cluster", "worker"):  # and the key the cluster role signs its ticks with
            assert keys == KAFKA_IDENTITY | {"GPUATTR_CLUSTER_SIGNING_KEY"}
        else:  # the agent: its Kafka credentials, nothing else
            assert keys == KAFKA_IDENTITY
        assert account not in seen_accounts
        assert secret["metadata"]["name"] not in seen_secrets
        seen_accounts.add(account)
        seen_secrets.add(secret["metadata"]["name"])
    # no shipped Secret carries a value: placeholders are refused at start, values stay out of git
    for doc in docs:
        if doc["kind"] == "Secret":
            assert set(doc["stringData"].values()) <= {
                "",
                "gpuattr-agent",
                "gpuattr-cluster",
                "gpuattr-worker",
                "gpuattr-sink",
            }


def test_the_kafka_settings_are_the_same_in_both_namespaces() -> None:
    maps = [
        d
        for d in base_docs()
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gpuattr-kafka"
    ]
    assert {d["metadata"]["namespace"] for d in maps} == {"gpuattr", "gpuattr-agent"}
    assert maps[0]["data"] == maps[1]["data"]
    assert not [k for k in maps[0]["data"] if "PASSWORD" in k or "USERNAME" in k or "SINK" in k]


def pod_security(docs: list[dict[str, Any]]) -> dict[str, str]:
    return {
        d["metadata"]["name"]: d["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        for d in docs
        if d["kind"] == "Namespace"
    }


@pytest.mark.parametrize("render", sorted(RENDERS))
def test_only_the_agents_namespace_is_privileged(render: str) -> None:
    docs = RENDERS[render]()
    levels = pod_security(docs)
    assert levels == {"gpuattr": "restricted", "gpuattr-agent": "privileged"}
    namespaced = [d for d in docs if d["metadata"].get("namespace") in levels]
    in_agent_ns = {
        (d["kind"], d["metadata"]["name"])
        for d in namespaced
        if d["metadata"]["namespace"] == "gpuattr-agent"
    }
    assert in_agent_ns == {
        ("DaemonSet", "gpuattr-agent"),
        ("ServiceAccount", "gpuattr-agent"),
        ("Secret", "gpuattr-agent-secrets"),
        ("ConfigMap", "gpuattr-kafka"),
    }
    for role in ("worker", "sink"):  # what `restricted` asks of a pod, checked here too
        doc = workload(docs, role)
        assert doc["metadata"]["namespace"] == "gpuattr"
        pod = doc["spec"]["template"]["spec"]
        assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
        assert not [v for v in pod.get("volumes", []) if "hostPath" in v]
        for ctr in pod["containers"]:
            sec = ctr["securityContext"]
            assert sec["runAsNonRoot"] is True
            assert sec["allowPrivilegeEscalation"] is False
            assert sec["capabilities"] == {"drop": ["ALL"]}
            assert sec["seccompProfile"] == {"type": "RuntimeDefault"}
