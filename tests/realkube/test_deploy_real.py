"""The deploy manifests applied to a real API server, and the shipped RBAC proven with real tokens.

Manifests: ``kubectl apply --server-side --dry-run=server`` of the kustomize base and every
overlay (rendered by kubectl's own kustomize) is accepted: schema, defaulting, admission and
field ownership, by the server itself. KafkaTopic objects are left out: their CRD belongs to
Strimzi's operator and is not installed here (tests/unit/test_deploy.py checks them against our
topic specs).

RBAC: the base's ServiceAccounts, ClusterRole and binding are applied for real; the agent's
ServiceAccount gets a token from the TokenRequest API and runs the agent's watchers with it; the
same token is denied secrets, configmaps and every write; the worker's and sink's ServiceAccount
can do nothing at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuattr.localkube import LocalKube
from tests.helpers import wait_for
from tests.kube_fixture import Rest
from tests.kustomize_render import ROOT, base_docs, microk8s_docs
from tests.realkube.cluster import create_node, gpu_pod, watching
from tests.realkube.deploy import (
    KUSTOMIZATIONS,
    NAMESPACE,
    NOT_SERVED,
    apply,
    ensure_namespace,
    render,
    served,
)
from tests.unit.test_dashboard import COMMITTED

WRITES = ("create", "update", "patch", "delete", "deletecollection")


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
async def test_server_side_dry_run_accepts_every_manifest(real_kube: LocalKube, name: str) -> None:
    docs = render(real_kube, KUSTOMIZATIONS[name])
    ours = {"base": base_docs, "microk8s": microk8s_docs}[name]()

    def key(d: dict[str, Any]) -> tuple[str, str]:
        return d["kind"], d["metadata"]["name"]

    # kubectl's kustomize orders by kind; the objects must be the same
    assert sorted(docs, key=key) == sorted(ours, key=key), "kubectl's kustomize disagrees"
    left_out = [d for d in docs if (d["apiVersion"], d["kind"]) in NOT_SERVED]
    assert left_out, "the base ships Strimzi KafkaTopics"
    # the namespace must exist for the namespaced objects to pass admission in a dry run
    await ensure_namespace(Rest.admin(real_kube), NAMESPACE)
    out = apply(real_kube, served(docs), dry_run=True)
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == len(served(docs)), out
    assert all(line.endswith("serverside-applied (server dry run)") for line in lines), out
    kinds = {d["kind"] for d in served(docs)}
    assert kinds >= {"DaemonSet", "Deployment", "ClusterRole", "ClusterRoleBinding", "Secret"}


async def _tokens(kube: LocalKube) -> tuple[str, str]:
    """Apply the base's RBAC for real; a TokenRequest token for the agent and for the stream."""
    rest = Rest.admin(kube)
    await ensure_namespace(rest, NAMESPACE)
    rbac = [
        d
        for d in render(kube, KUSTOMIZATIONS["base"])
        if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
    ]
    assert {d["metadata"]["name"] for d in rbac if d["kind"] == "ServiceAccount"} == {
        "gpuattr-agent",
        "gpuattr-cluster",
        "gpuattr-stream",
    }
    apply(kube, rbac, dry_run=False)
    return (
        await rest.token_for(NAMESPACE, "gpuattr-agent"),
        await rest.token_for(NAMESPACE, "gpuattr-stream"),
    )


async def test_agent_token_watches_with_the_shipped_cluster_role(
    real_kube: LocalKube, tmp_path: Path
) -> None:
    agent_token, _ = await _tokens(real_kube)
    rest = Rest.admin(real_kube)
    ns = "rbac-watch"
    await rest.namespace(ns)
    await create_node(rest, "rk7-a", {"nvidia.com/gpu.sharing-strategy": "none"}, 2)
    pod = await rest.create(f"/api/v1/namespaces/{ns}/pods", gpu_pod("train-0", "rk7-a"))
    config = real_kube.write_kubeconfig(
        tmp_path / "agent.kubeconfig", token=agent_token, user="gpuattr-agent"
    )
    async with watching("rk7-a", config) as w:
        await wait_for(lambda: pod["metadata"]["uid"] in w.believed(), 30)
        await wait_for(lambda: w.node_records(), 30, what="the node record")
        second = await rest.create(f"/api/v1/namespaces/{ns}/pods", gpu_pod("train-1", "rk7-a"))
        await wait_for(lambda: second["metadata"]["uid"] in w.believed(), 30, what="watch")


async def test_agent_token_reads_pods_nodes_and_dra_objects_and_nothing_else(
    real_kube: LocalKube,
) -> None:
    agent_token, _ = await _tokens(real_kube)
    agent = Rest.admin(real_kube).as_token(agent_token)
    readable = [("", "pods"), ("", "nodes")]
    readable += [("resource.k8s.io", "resourceslices"), ("resource.k8s.io", "resourceclaims")]
    for group, resource in readable:
        for verb in ("get", "list", "watch"):
            assert await agent.allowed(verb, resource, group=group), (verb, resource)
        for verb in WRITES:
            assert not await agent.allowed(verb, resource, group=group), (verb, resource)
    for resource in ("deviceclasses", "resourceclaimtemplates"):
        assert not await agent.allowed("list", resource, group="resource.k8s.io"), resource
    for resource in ("secrets", "configmaps"):
        for verb in ("get", "list", "watch", *WRITES):
            assert not await agent.allowed(verb, resource, ns=NAMESPACE), (verb, resource)
    assert not await agent.allowed("create", "pods/eviction", ns="default")
    assert not await agent.allowed("list", "deployments", group="apps")
    # and real requests, not only reviews
    status, _ = await agent.call("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets")
    assert status == 403
    status, _ = await agent.call("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps")
    assert status == 403
    status, _ = await agent.call(
        "POST", "/api/v1/namespaces/default/pods", gpu_pod("sneaky", "rk7-a")
    )
    assert status == 403
    status, _ = await agent.call("DELETE", "/api/v1/nodes/rk7-a")
    assert status == 403
    status, body = await agent.call("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Drk7-a")
    assert status == 200
    assert body["kind"] == "PodList"


async def test_worker_and_sink_token_can_do_nothing(real_kube: LocalKube) -> None:
    _, stream_token = await _tokens(real_kube)
    stream = Rest.admin(real_kube).as_token(stream_token)
    for resource in ("pods", "nodes", "secrets", "configmaps", "events"):
        for verb in ("get", "list", "watch", *WRITES):
            assert not await stream.allowed(verb, resource, ns=NAMESPACE), (verb, resource)
    for path in ("/api/v1/pods", "/api/v1/nodes", f"/api/v1/namespaces/{NAMESPACE}/secrets"):
        status, _ = await stream.call("GET", path)
        assert status == 403, path


async def test_the_dashboard_configmap_carries_the_committed_json(real_kube: LocalKube) -> None:
    """``kubectl apply -k deploy/grafana``: one ConfigMap for Grafana's sidecar, the committed
    dashboard byte for byte, accepted by the server."""
    (doc,) = render(real_kube, ROOT / "deploy" / "grafana")
    assert (doc["kind"], doc["metadata"]["name"]) == ("ConfigMap", "gpuattr-grafana-dashboard")
    assert doc["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert doc["data"] == {"gpuattr.json": COMMITTED.read_text()}
    await ensure_namespace(Rest.admin(real_kube), NAMESPACE)
    out = apply(real_kube, [doc], dry_run=True)
    assert out.strip().endswith("serverside-applied (server dry run)"), out
