"""Security properties of the deployment: an agent that needs no write access — its DaemonSet
(base and microk8s renders) cannot write to the node, and its service account can only read pods
and nodes.
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
READ_VERBS = {"get", "list", "watch"}


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


#: what the agent may read, by API group: pods and nodes; DRA slices and claims (issue 18)
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
        # role's election: its own Lease (tests/unit/test_deploy.py pins those rules)
        for rule in doc.get("rules", []) if doc["kind"] in ("Role", "ClusterRole") else []:
            if (
                rule["resources"] == ["leases"]
                and doc["metadata"]["name"] == "gpuattr-cluster-lease"
            ):
                continue
            assert set(rule["verbs"]) <= READ_VERBS, (doc["metadata"]["name"], rule)
