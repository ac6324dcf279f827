"""The deploy manifests rendered by kubectl's own kustomize and applied with kubectl."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from gpuattr.localkube import LocalKube
from tests.kube_fixture import KubeError, Rest
from tests.kustomize_render import BASE, MICROK8S, ROOT
from tests.realkube.crds import install_crds

KUSTOMIZATIONS = {"base": BASE, "microk8s": MICROK8S}
FIXTURES = ROOT / "tests" / "fixtures"
#: the operators' genuine CRDs (vendored: PROVENANCE.md beside them) for the kinds we ship:
#: Strimzi's Kafka, KafkaNodePool, KafkaTopic, KafkaUser; the Prometheus Operator's PodMonitor
#: and PrometheusRule
OPERATOR_CRDS = (
    *sorted((FIXTURES / "strimzi").glob("*.yaml")),
    *sorted((FIXTURES / "prometheus-operator").glob("*.yaml")),
)
KAFKA_NAMESPACE = "kafka"  # the base's KafkaTopics and KafkaUsers
NAMESPACE = "gpuattr"  # the worker's and the sink's (Pod Security restricted)
AGENT_NAMESPACE = "gpuattr-agent"  # the agent's alone (privileged: its hostPath)


def kubectl(kube: LocalKube, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(kube.kubectl()), "--kubeconfig", str(kube.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def render(kube: LocalKube, directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize``: the manifests exactly as ``kubectl apply -k`` would send them."""
    return [d for d in yaml.safe_load_all(kubectl(kube, "kustomize", str(directory))) if d]


async def install_operator_crds(admin: Rest) -> None:
    """Strimzi's and the Prometheus Operator's CRDs, served: their objects are then validated by
    the server against the genuine schemas."""
    await install_crds(admin, *OPERATOR_CRDS)


async def ensure_namespace(rest: Rest, name: str, labels: dict[str, str] | None = None) -> None:
    try:
        await rest.namespace(name, labels)
    except KubeError as err:
        if err.status != 409:  # already there (another test made it)
            raise


def apply(kube: LocalKube, docs: list[dict[str, Any]], *, dry_run: bool) -> str:
    args = ["apply", "--server-side", "--field-manager=gpuattr-tests", "-f", "-"]
    if dry_run:
        args.append("--dry-run=server")
    return kubectl(kube, *args, stdin=yaml.safe_dump_all(docs))


def apply_namespaces(kube: LocalKube) -> list[dict[str, Any]]:
    """The base's Namespaces, applied for real (their Pod Security labels included)."""
    namespaces = [d for d in render(kube, KUSTOMIZATIONS["base"]) if d["kind"] == "Namespace"]
    apply(kube, namespaces, dry_run=False)
    return namespaces


def apply_rbac(kube: LocalKube) -> list[dict[str, Any]]:
    """The base's ServiceAccounts, ClusterRole and binding, applied for real (namespaces first)."""
    apply_namespaces(kube)
    rbac = [
        d
        for d in render(kube, KUSTOMIZATIONS["base"])
        if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
    ]
    apply(kube, rbac, dry_run=False)
    return rbac


async def cluster_token(kube: LocalKube) -> str:
    """The cluster role's shipped RBAC (ServiceAccount, ClusterRole, Lease Role, bindings)
    applied for real; a TokenRequest token of its ServiceAccount."""
    rest = Rest.admin(kube)
    await ensure_namespace(rest, NAMESPACE)
    names = {"gpuattr-cluster", "gpuattr-cluster-lease"}
    rbac = [
        d
        for d in render(kube, KUSTOMIZATIONS["base"])
        if d["kind"]
        in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
        and d["metadata"]["name"] in names
    ]
    assert {d["kind"] for d in rbac} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    }
    apply(kube, rbac, dry_run=False)
    return await rest.token_for(NAMESPACE, "gpuattr-cluster")
