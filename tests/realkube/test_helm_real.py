"""The chart installed by ``helm install`` on a real API server, every option on.

On an API server of its own (a release owns its Namespaces and cluster-wide RBAC; the session's
server holds the kustomize base's): the genuine Strimzi and Prometheus Operator CRDs are
installed, then ``helm install`` with tests/fixtures/helm/full-values.yaml, as a user runs it
with a kubeconfig. The server accepts every object (a strict server-side dry run of the same
render agrees, and no field of an operator's object was pruned: each is in the genuine schema);
Pod Security admits each workload's pod in its namespace (the agent's with hostPID), and each
``helm test`` doctor Pod with its role's ServiceAccount (a server-side dry run: this API server
has no kubelet, so the doctor Pods are admitted, never run, and ``helm test``, which waits for
them to finish, is not run); and the agent's, the cluster role's, the workers' and the sink's
ServiceAccounts, with real tokens, may do what their role needs and nothing more. ``helm
uninstall`` removes the release.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from gpuattr.localkafka.jars import default_cache_dir
from gpuattr.localkube import LocalKube
from gpuattr.localkube.binaries import resolve_helm
from tests.kube_fixture import Rest
from tests.realkube.deploy import apply, install_operator_crds, kubectl
from tests.realkube.test_deploy_real import WRITES, pod_of
from tests.unit.test_helm_chart import CHART, FULL_VALUES, doctor_pods

AGENT_NS, APP_NS = "gpuattr-agent", "gpuattr"  # full-values.yaml's (the Kafka's too: APP_NS)
RELEASE = "gpuattr"
OPERATOR_KINDS = {"Kafka", "KafkaNodePool", "KafkaTopic", "KafkaUser", "PodMonitor"}
OPERATOR_KINDS |= {"PrometheusRule"}


@pytest.fixture(scope="module")
def helm_kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    kube = LocalKube(tmp_path_factory.mktemp("helm-kube"), default_cache_dir())
    asyncio.run(kube.start())
    try:
        yield kube
    finally:
        kube.stop_sync()


def helm(kube: LocalKube, *args: str) -> str:
    binary = resolve_helm(default_cache_dir()) / "helm"
    done = subprocess.run(
        [str(binary), "--kubeconfig", str(kube.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def contains(stored: Any, sent: Any) -> bool:
    """Every field sent is stored as sent (the server may add defaults, never drop a field)."""
    if isinstance(sent, dict):
        return isinstance(stored, dict) and all(
            k in stored and contains(stored[k], v) for k, v in sent.items()
        )
    if isinstance(sent, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(sent)
            and all(contains(a, b) for a, b in zip(stored, sent, strict=True))
        )
    return bool(stored == sent)


async def installed(kube: LocalKube) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The genuine CRDs, then the chart with every option on: the documents it rendered that
    ``helm install`` applies, and its ``helm test`` doctor Pods (which it does not)."""
    await install_operator_crds(Rest.admin(kube))
    values = ["-f", str(FULL_VALUES)]
    docs = [
        d for d in yaml.safe_load_all(helm(kube, "template", RELEASE, str(CHART), *values)) if d
    ]
    helm(kube, "install", RELEASE, str(CHART), *values, "--namespace", "default")
    doctors = list(doctor_pods(docs).values())
    return [d for d in docs if d not in doctors], doctors


async def test_helm_install_with_every_option_and_least_privilege(helm_kube: LocalKube) -> None:
    docs, doctors = await installed(helm_kube)
    status = json.loads(helm(helm_kube, "status", RELEASE, "--namespace", "default", "-o", "json"))
    assert status["info"]["status"] == "deployed"
    assert {d["kind"] for d in docs} >= OPERATOR_KINDS
    # the same render, strictly validated by the server (unknown fields refused); the fields helm
    # owns are taken over in this dry run only (nothing is changed)
    out = kubectl(
        helm_kube,
        *("apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-"),
        stdin=yaml.safe_dump_all(docs),
    )
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == len(docs), out
    assert all(line.endswith("serverside-applied (server dry run)") for line in lines), out
    # every object is there; an operator's object kept every field (none pruned by its schema)
    stored = json.loads(
        kubectl(helm_kube, "get", "-f", "-", "-o", "json", stdin=yaml.safe_dump_all(docs))
    )
    assert len(stored["items"]) == len(docs)
    for sent, got in zip(docs, stored["items"], strict=True):
        assert (got["kind"], got["metadata"]["name"]) == (sent["kind"], sent["metadata"]["name"])
        if sent["kind"] in OPERATOR_KINDS:
            assert contains(got["spec"], sent["spec"]), (sent["kind"], sent["metadata"]["name"])

    # Pod Security: each workload's pod in its own namespace (the agent's with nvmlProcesses asks
    # for the GPU Operator's RuntimeClass, which the operator makes)
    nvidia = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "handler": "nvidia"}
    apply(helm_kube, [{**nvidia, "metadata": {"name": "nvidia"}}], dry_run=False)
    workloads = [d for d in docs if d["kind"] in ("DaemonSet", "Deployment")]
    assert len(workloads) == 4
    for workload in workloads:
        out = apply(helm_kube, [pod_of(workload)], dry_run=True)
        assert out.strip().endswith("serverside-applied (server dry run)"), out
    # `helm test`'s doctor Pods, each as its role in its role's namespace: Pod Security admits
    # them, their ServiceAccounts exist, no field is unknown
    assert len(doctors) == 4
    out = apply(helm_kube, doctors, dry_run=True)
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == len(doctors), out
    assert all(line.endswith("serverside-applied (server dry run)") for line in lines), out
    # ...which this server judges: the worker's doctor as root is refused in its namespace
    doctor = {d["metadata"]["name"]: d for d in doctors}["gpuattr-doctor-worker"]
    (ctr,) = doctor["spec"]["containers"]
    root = {**ctr, "securityContext": {**ctr["securityContext"], "runAsNonRoot": False}}
    del root["securityContext"]["runAsUser"]
    refused = {**doctor, "spec": {**doctor["spec"], "containers": [root]}}
    with pytest.raises(AssertionError, match="violates PodSecurity"):
        apply(helm_kube, [refused], dry_run=True)

    admin = Rest.admin(helm_kube)
    tokens = {
        role: await admin.token_for(AGENT_NS if role == "agent" else APP_NS, f"gpuattr-{role}")
        for role in ("agent", "cluster", "worker", "sink")
    }
    await agent_may_only_read_its_sources(admin.as_token(tokens["agent"]))
    await cluster_role_may_only_read_and_lead(admin.as_token(tokens["cluster"]))
    await worker_may_only_review_its_callers(admin.as_token(tokens["worker"]))
    await nothing_else(admin.as_token(tokens["sink"]), "sink")
    sink_account = await admin.get(f"/api/v1/namespaces/{APP_NS}/serviceaccounts/gpuattr-sink")
    assert sink_account["automountServiceAccountToken"] is False

    helm(helm_kube, "uninstall", RELEASE, "--namespace", "default")
    left = kubectl(helm_kube, "get", "clusterroles", "-o", "name")
    assert "gpuattr-agent" not in left


async def nothing_else(rest: Rest, role: str) -> None:
    """No read of pods, nodes, Secrets, ConfigMaps or events and no write, in either namespace."""
    for ns in (APP_NS, AGENT_NS):
        for resource in ("pods", "nodes", "secrets", "configmaps", "events"):
            for verb in ("get", "list", "watch", *WRITES):
                assert not await rest.allowed(verb, resource, ns=ns), (role, verb, resource, ns)
    for verb in ("get", "list", "create"):
        assert not await rest.allowed(verb, "leases", group="coordination.k8s.io", ns=APP_NS)
    assert not await rest.allowed("list", "deployments", group="apps")


async def agent_may_only_read_its_sources(agent: Rest) -> None:
    for group, resource in [("", "pods"), ("", "nodes")] + [
        ("resource.k8s.io", r) for r in ("resourceslices", "resourceclaims")
    ]:
        for verb in ("list", "watch"):
            assert await agent.allowed(verb, resource, group=group), (verb, resource)
        for verb in ("get", *WRITES):
            assert not await agent.allowed(verb, resource, group=group), (verb, resource)
    for ns in (APP_NS, AGENT_NS):
        for resource in ("secrets", "configmaps"):
            for verb in ("get", "list", "watch", *WRITES):
                assert not await agent.allowed(verb, resource, ns=ns), (verb, resource, ns)
    assert not await agent.allowed("list", "kafkausers", group="kafka.strimzi.io", ns=APP_NS)
    status, _ = await agent.call("GET", f"/api/v1/namespaces/{APP_NS}/secrets/gpuattr-cluster")
    assert status == 403  # the User Operator's Secrets are out of its reach


CLUSTER_READS = {
    "": ("nodes", "pods"),
    "nvidia.com": ("clusterpolicies", "gpuclusters", "nvidiadrivers"),
    "resource.k8s.io": ("devicetaintrules",),
    "kueue.x-k8s.io": ("workloads", "localqueues", "clusterqueues", "resourceflavors"),
}


async def cluster_role_may_only_read_and_lead(cluster: Rest) -> None:
    for group, resources in CLUSTER_READS.items():
        for resource in resources:
            for verb in ("list", "watch"):
                assert await cluster.allowed(verb, resource, group=group), (verb, resource)
            for verb in ("get", *WRITES):
                assert not await cluster.allowed(verb, resource, group=group), (verb, resource)
    for resource in ("resourceclaims", "resourceclaimtemplates"):
        assert await cluster.allowed("list", resource, group="resource.k8s.io")
        for verb in ("get", "watch", *WRITES):
            assert not await cluster.allowed(verb, resource, group="resource.k8s.io"), verb
    lease = {"group": "coordination.k8s.io", "ns": APP_NS}
    assert await cluster.allowed("create", "leases", **lease)
    for verb in ("get", "update"):
        assert await cluster.allowed(verb, "leases", name="gpuattr-cluster", **lease), verb
        assert not await cluster.allowed(verb, "leases", name="another", **lease), verb
    for verb in ("list", "watch", "delete", "patch"):
        assert not await cluster.allowed(verb, "leases", **lease), verb
    for ns in (APP_NS, AGENT_NS):
        for resource in ("secrets", "configmaps"):
            for verb in ("get", "list", "watch", *WRITES):
                assert not await cluster.allowed(verb, resource, ns=ns), (verb, resource, ns)


async def worker_may_only_review_its_callers(worker: Rest) -> None:
    assert await worker.allowed("create", "tokenreviews", group="authentication.k8s.io")
    assert await worker.allowed("create", "subjectaccessreviews", group="authorization.k8s.io")
    assert await worker.allowed("get", "queryapi", group="gpuattr.io")
    await nothing_else(worker, "worker")
