"""The deploy manifests applied to a real API server, and the shipped RBAC proven with real tokens.

Manifests: ``kubectl apply --server-side --dry-run=server`` of the kustomize base and every
overlay (rendered by kubectl's own kustomize) is accepted: schema, defaulting, admission and
field ownership, by the server itself. The Strimzi and Prometheus Operator objects too: their
genuine CRDs (tests/fixtures/strimzi, tests/fixtures/prometheus-operator) are installed first.

RBAC: the base's Namespaces, ServiceAccounts, ClusterRole and binding are applied for real; the
agent's ServiceAccount gets a token from the TokenRequest API and runs the agent's watchers with
it; the same token may only list and watch (no get), is denied secrets — the sink's Secret, applied
for real, above all — configmaps and every write; the worker's and the sink's ServiceAccounts can
do nothing with pods, nodes, Secrets, ConfigMaps or events (the worker only reviews its query
API's callers: tests/realkube/test_query_api_auth_real.py).

Pod Security: each workload's pod, as its template makes it, is admitted in its own namespace
(`restricted` for the worker and the sink, `privileged` for the agent alone); the agent's pod is
refused in the restricted namespace, so the admission check is real.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agents.kube.watch import OperandWatcher, make_api_client
from agents.types import AgentRecord
from contract.inputs import OperandPods
from gpuattr.localkube import LocalKube
from infra.settings import KubeSettings
from tests.helpers import wait_for
from tests.kube_fixture import Rest
from tests.kustomize_render import ROOT, base_docs, microk8s_docs
from tests.realkube.cluster import create_node, gpu_pod, watching
from tests.realkube.deploy import (
    AGENT_NAMESPACE,
    KAFKA_NAMESPACE,
    KUSTOMIZATIONS,
    NAMESPACE,
    apply,
    apply_namespaces,
    apply_rbac,
    ensure_namespace,
    install_operator_crds,
    render,
)
from tests.unit.test_dashboard import COMMITTED

WRITES = ("create", "update", "patch", "delete", "deletecollection")


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
async def test_server_side_dry_run_accepts_every_manifest(real_kube: LocalKube, name: str) -> None:
    docs = render(real_kube, KUSTOMIZATIONS[name])
    ours = {"base": base_docs, "microk8s": microk8s_docs}[name]()

    def key(d: dict[str, Any]) -> tuple[str, str, str]:
        return d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]

    # kubectl's kustomize orders by kind; the objects must be the same
    assert sorted(docs, key=key) == sorted(ours, key=key), "kubectl's kustomize disagrees"
    admin = Rest.admin(real_kube)
    await install_operator_crds(admin)
    # the namespaces must exist for the namespaced objects to pass admission in a dry run
    apply_namespaces(real_kube)
    await ensure_namespace(admin, KAFKA_NAMESPACE)
    out = apply(real_kube, docs, dry_run=True)
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == len(docs), out
    assert all(line.endswith("serverside-applied (server dry run)") for line in lines), out
    kinds = {d["kind"] for d in docs}
    assert kinds >= {"DaemonSet", "Deployment", "ClusterRole", "ClusterRoleBinding", "Secret"}
    assert kinds >= {"KafkaTopic", "KafkaUser", "PodMonitor", "PrometheusRule"}


ACCOUNTS = {
    "agent": (AGENT_NAMESPACE, "gpuattr-agent"),
    "worker": (NAMESPACE, "gpuattr-worker"),
    "sink": (NAMESPACE, "gpuattr-sink"),
    "cluster": (NAMESPACE, "gpuattr-cluster"),
}


async def _tokens(kube: LocalKube) -> dict[str, str]:
    """Apply the base's RBAC for real; a TokenRequest token for each role's ServiceAccount."""
    rest = Rest.admin(kube)
    rbac = apply_rbac(kube)
    accounts = {
        (d["metadata"]["namespace"], d["metadata"]["name"])
        for d in rbac
        if d["kind"] == "ServiceAccount"
    }
    assert accounts == set(ACCOUNTS.values())  # one per role
    return {role: await rest.token_for(*account) for role, account in ACCOUNTS.items()}


async def test_agent_token_watches_with_the_shipped_cluster_role(
    real_kube: LocalKube, tmp_path: Path
) -> None:
    agent_token = (await _tokens(real_kube))["agent"]
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
    agent_token = (await _tokens(real_kube))["agent"]
    agent = Rest.admin(real_kube).as_token(agent_token)
    readable = [("", "pods"), ("", "nodes")]
    readable += [("resource.k8s.io", "resourceslices"), ("resource.k8s.io", "resourceclaims")]
    for group, resource in readable:
        for verb in ("list", "watch"):
            assert await agent.allowed(verb, resource, group=group), (verb, resource)
        # the agent lists and watches; it never gets a single object: no unused verb
        for verb in ("get", *WRITES):
            assert not await agent.allowed(verb, resource, group=group), (verb, resource)
    for resource in ("deviceclasses", "resourceclaimtemplates"):
        assert not await agent.allowed("list", resource, group="resource.k8s.io"), resource
    for resource in ("secrets", "configmaps"):
        for ns in (NAMESPACE, AGENT_NAMESPACE):
            for verb in ("get", "list", "watch", *WRITES):
                assert not await agent.allowed(verb, resource, ns=ns), (verb, resource, ns)
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
    status, _ = await agent.call("GET", "/api/v1/nodes/rk7-a")  # a get: not the agent's
    assert status == 403


async def test_worker_and_sink_tokens_can_do_nothing(real_kube: LocalKube) -> None:
    tokens = await _tokens(real_kube)
    for role in ("worker", "sink"):
        stream = Rest.admin(real_kube).as_token(tokens[role])
        for resource in ("pods", "nodes", "secrets", "configmaps", "events"):
            for verb in ("get", "list", "watch", *WRITES):
                assert not await stream.allowed(verb, resource, ns=NAMESPACE), (role, verb)
        for path in ("/api/v1/pods", "/api/v1/nodes", f"/api/v1/namespaces/{NAMESPACE}/secrets"):
            status, _ = await stream.call("GET", path)
            assert status == 403, (role, path)


async def test_the_agents_token_cannot_read_the_sinks_secret(real_kube: LocalKube) -> None:
    """The base's Secrets applied for real: the sink's (Slack, webhook URL and signing key) is
    there, and the agent's token — on every GPU node — cannot read it, nor list it, nor any other
    role's Secret, nor its own; the worker's token cannot either."""
    tokens = await _tokens(real_kube)
    secrets = [d for d in render(real_kube, KUSTOMIZATIONS["base"]) if d["kind"] == "Secret"]
    apply(real_kube, secrets, dry_run=False)
    admin = Rest.admin(real_kube)
    sink_secret = f"/api/v1/namespaces/{NAMESPACE}/secrets/gpuattr-sink-secrets"
    held = await admin.get(sink_secret)  # it exists: a 403 below is RBAC, not a missing object
    assert "GPUATTR_SINK_WEBHOOK_SECRET" in held["data"]
    for role in ("agent", "worker"):
        caller = admin.as_token(tokens[role])
        for secret in secrets:
            meta = secret["metadata"]
            path = f"/api/v1/namespaces/{meta['namespace']}/secrets/{meta['name']}"
            status, _ = await caller.call("GET", path)
            assert status == 403, (role, path)
        for ns in (NAMESPACE, AGENT_NAMESPACE):
            status, _ = await caller.call("GET", f"/api/v1/namespaces/{ns}/secrets")
            assert status == 403, (role, ns)


def pod_of(workload: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    """The pod a workload's template makes (what Pod Security admission judges)."""
    template = workload["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{workload['metadata']['name']}-psa-probe",
            "namespace": namespace or workload["metadata"]["namespace"],
            "labels": template["metadata"]["labels"],
        },
        "spec": template["spec"],
    }


async def test_pod_security_restricted_for_all_but_the_agent(real_kube: LocalKube) -> None:
    docs = render(real_kube, KUSTOMIZATIONS["base"])
    namespaces = apply_namespaces(real_kube)
    levels = {
        d["metadata"]["name"]: d["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        for d in namespaces
    }
    assert levels == {NAMESPACE: "restricted", AGENT_NAMESPACE: "privileged"}
    apply(real_kube, [d for d in docs if d["kind"] == "ServiceAccount"], dry_run=False)
    workloads = {d["metadata"]["name"]: d for d in docs if d["kind"] in ("DaemonSet", "Deployment")}
    assert set(workloads) == {"gpuattr-agent", "gpuattr-cluster", "gpuattr-worker", "gpuattr-sink"}
    for name, workload in workloads.items():
        out = apply(real_kube, [pod_of(workload)], dry_run=True)
        assert out.strip().endswith("serverside-applied (server dry run)"), (name, out)
    # the agent's pod where the worker and sink run: refused by the real admission plugin
    misplaced = pod_of(workloads["gpuattr-agent"], NAMESPACE)
    misplaced["spec"] = {**misplaced["spec"], "serviceAccountName": "gpuattr-sink"}  # exists here
    with pytest.raises(AssertionError, match="violates PodSecurity") as refused:
        apply(real_kube, [misplaced], dry_run=True)
    assert "restricted" in str(refused.value)
    assert "hostPath" in str(refused.value)


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


async def test_agent_token_watches_its_nodes_operand_pods_with_the_shipped_cluster_role(
    real_kube: LocalKube, tmp_path: Path
) -> None:
    """The operand-pod watcher with the agent's own token and no new rule: the GPU
    Operator's pods on its node only, driven through their states by the status subresource as a
    kubelet would — crash looping, ready, deleted."""
    agent_token = (await _tokens(real_kube))["agent"]
    rest = Rest.admin(real_kube)
    operator_ns, other_ns = "rk-gpu-operator", "rk-operands-other"
    await rest.namespace(operator_ns)
    await rest.namespace(other_ns)
    for node in ("opw-a", "opw-b"):
        await create_node(rest, node, {"nvidia.com/gpu.deploy.dcgm-exporter": "true"}, 1)
    pods = f"/api/v1/namespaces/{operator_ns}/pods"

    def operand(name: str, node: str, app: str) -> dict[str, Any]:
        return gpu_pod(name, node, gpus=0, labels={"app": app})

    await rest.create(pods, operand("toolkit-a", "opw-a", "nvidia-container-toolkit-daemonset"))
    await rest.create(pods, operand("exporter-a", "opw-a", "nvidia-dcgm-exporter"))
    await rest.create(pods, operand("exporter-b", "opw-b", "nvidia-dcgm-exporter"))
    await rest.create(
        f"/api/v1/namespaces/{other_ns}/pods", operand("lookalike", "opw-a", "nvidia-dcgm-exporter")
    )
    config = real_kube.write_kubeconfig(
        tmp_path / "agent.kubeconfig", token=agent_token, user="gpuattr-agent"
    )
    out: list[AgentRecord] = []

    async def emit(rec: AgentRecord) -> None:
        out.append(rec)

    def latest() -> dict[str, tuple[bool, int, str]]:
        records = [r for r in out if isinstance(r, OperandPods)]
        return (
            {p.name: (p.ready, p.restarts, p.reason) for p in records[-1].pods} if records else {}
        )

    def status(ready: bool, restarts: int) -> dict[str, Any]:
        state: dict[str, Any] = (
            {"running": {"startedAt": "2026-08-21T10:00:00Z"}}
            if ready
            else {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}}
        )
        return {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                "containerStatuses": [
                    {
                        "name": "main",
                        "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                        "imageID": "",
                        "ready": ready,
                        "restartCount": restarts,
                        "state": state,
                    }
                ],
            }
        }

    settings = KubeSettings(kubeconfig=config, watch_timeout_s=300, max_backoff_s=0.5)
    api = await make_api_client(settings)
    watcher = OperandWatcher(
        node="opw-a", api=api, emit=emit, now_ms=lambda: 1, settings=settings, namespace=operator_ns
    )
    task = asyncio.create_task(watcher.run())
    try:
        await wait_for(lambda: set(latest()) == {"toolkit-a", "exporter-a"}, 30, what="the list")
        assert latest()["exporter-a"] == (False, 0, "")  # Pending: no status yet
        await rest.merge_patch(f"{pods}/exporter-a/status", status(False, 12))
        await wait_for(
            lambda: latest().get("exporter-a") == (False, 12, "CrashLoopBackOff"), 30, what="crash"
        )
        await rest.merge_patch(f"{pods}/exporter-a/status", status(True, 12))
        await wait_for(lambda: latest().get("exporter-a") == (True, 12, ""), 30, what="ready")
        await rest.merge_patch(f"{pods}/exporter-b/status", status(False, 3))  # not this node's
        await rest.delete(f"{pods}/exporter-a", grace_s=0)
        await wait_for(lambda: set(latest()) == {"toolkit-a"}, 30, what="deleted")
        records = [r for r in out if isinstance(r, OperandPods)]
        assert {r.node for r in records} == {"opw-a"}
        assert all(p.namespace == operator_ns for r in records for p in r.pods)
        # published on change only: list, crash, ready, (terminating,) gone
        assert 4 <= len(records) <= 5, records
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
