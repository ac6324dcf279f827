"""``gpuattr doctor``'s kubelet, API-server and exporter groups on the real node: the real
kubelet's PodResources socket, the real API server with the shipped RBAC's tokens, and the
exporter double serving the node's GPUs (or another node's). Each fault turns exactly its line
red."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuattr.doctor import api, exporter, kubelet
from gpuattr.doctor.lines import Line
from gpuattr.doctor.settings import DoctorSettings
from gpuattr.localkube.cluster import LocalCluster
from infra.settings import (
    ClusterSettings,
    DcgmSettings,
    InventorySettings,
    KafkaSettings,
    KubeletSettings,
    KubeSettings,
)
from sim.exporter_rows import ExporterRow
from sim.exporter_server import ExporterDouble
from tests.helpers import wait_for_async
from tests.kube_fixture import Rest
from tests.realkube.crds import CRDS, install_crds
from tests.realkube.deploy import apply_rbac
from tests.realnode.node import agent_pod, namespace
from tests.realnode.pipeline import Telemetry

pytestmark = pytest.mark.integration


GPU_OPERATOR = Path(__file__).parents[1] / "fixtures" / "gpu-operator"
INTENT = {
    "clusterpolicies.nvidia.com": (
        "nvidia.com_clusterpolicies.yaml",
        "/apis/nvidia.com/v1/clusterpolicies",
    ),
    "gpuclusters.nvidia.com": (
        "nvidia.com_gpuclusters.yaml",
        "/apis/nvidia.com/v1alpha1/gpuclusters",
    ),
}


def red(lines: list[Line]) -> list[str]:
    return [x.check for x in lines if x.status == "fail"]


def doctor(
    role: str,
    kube: KubeSettings,
    *,
    node: str | None = None,
    socket: Path | None = None,
    url: str = "http://127.0.0.1:1/metrics",
    inventory: Path | None = None,
) -> DoctorSettings:
    return DoctorSettings(
        role=role,  # type: ignore[arg-type]
        kafka=KafkaSettings(),
        kubelet=KubeletSettings(socket_path=socket or Path("/nonexistent")),
        dcgm=DcgmSettings(url=url),
        kube=kube,
        cluster=ClusterSettings(lease_namespace="gpuattr"),
        worker_app_id="w",
        sink_group="s",
        node=node,
        inventory=InventorySettings(file=inventory),
    )


async def token_kubeconfig(cluster: LocalCluster, role: str, tmp_path: Path) -> Path:
    """The shipped RBAC applied for real; a kubeconfig with the role's ServiceAccount token."""
    from tests.realkube.deploy import AGENT_NAMESPACE, NAMESPACE, cluster_token

    apply_rbac(cluster.kube)
    rest = Rest.admin(cluster.kube)
    if role == "cluster":
        token = await cluster_token(cluster.kube)
    else:
        token = await rest.token_for(
            AGENT_NAMESPACE if role == "agent" else NAMESPACE, f"gpuattr-{role}"
        )
    return cluster.kube.write_kubeconfig(tmp_path / f"{role}.kubeconfig", token=token, user=role)


async def test_the_agents_lines_are_green_on_the_real_node_and_each_fault_turns_one_red(
    real_node: LocalCluster, tmp_path: Path
) -> None:
    node = real_node.node
    await agent_pod(Rest.admin(real_node.kube))
    kube = KubeSettings(kubeconfig=await token_kubeconfig(real_node, "agent", tmp_path))
    inventory = tmp_path / "inventory.json"
    node.write_inventory(inventory)
    async with ExporterDouble(Telemetry(real_node).rows) as double:
        settings = doctor(
            "agent",
            kube,
            node=node.name,
            socket=node.podresources_socket,
            url=double.url,
            inventory=inventory,
        )
        lines = [
            *await kubelet.check(settings),
            *await api.check(settings),
            *await exporter.check(settings),
        ]
        assert {x.check: x.status for x in lines} == {
            "kubelet.socket": "ok",
            "kubelet.list": "ok",
            "kubelet.allocatable": "ok",
            "api.server": "ok",
            "api.pods": "ok",
            "api.nodes": "ok",
            "api.dra": "ok",
            "exporter.reach": "ok",
            "exporter.local": "ok",
            "exporter.mode": "ok",
        }, [x for x in lines if x.status != "ok"]

        # a socket path that does not exist: exactly kubelet.socket red, the others skipped
        gone = doctor("agent", kube, node=node.name, socket=tmp_path / "none.sock", url=double.url)
        lines = await kubelet.check(gone)
        assert [x.status for x in lines] == ["fail", "skip", "skip"]

    # an exporter of another node: its GPUs are not this node's
    foreign = [
        ExporterRow(
            gpu=0,
            uuid="GPU-0badc0de-0000-4000-8000-000000000001",
            model="H100",
            hostname=node.name,
            values=(("DCGM_FI_DEV_GPU_UTIL", 5.0),),
        )
    ]
    async with ExporterDouble(lambda: foreign) as double:
        other = doctor(
            "agent",
            kube,
            node=node.name,
            socket=node.podresources_socket,
            url=double.url,
            inventory=inventory,
        )
        lines = await exporter.check(other)
        assert red(lines) == ["exporter.local"], lines
        assert "GPU-0badc0de-0000-4000-8000-000000000001" in lines[1].said


async def test_a_service_account_without_watch_pods_turns_api_pods_red(
    real_node: LocalCluster, tmp_path: Path
) -> None:
    rest = Rest.admin(real_node.kube)
    ns = "doctor-narrow"
    status, _ = await rest.call("GET", f"/api/v1/namespaces/{ns}")
    if status == 404:
        await namespace(rest, ns)
        await rest.create(
            f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "narrow"}}
        )
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "doctor-narrow"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
            {
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceslices", "resourceclaims"],
                "verbs": ["list", "watch"],
            },
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "doctor-narrow"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "doctor-narrow",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "narrow", "namespace": ns}],
    }
    for path, obj in (("clusterroles", role), ("clusterrolebindings", binding)):
        status, body = await rest.call("POST", f"/apis/rbac.authorization.k8s.io/v1/{path}", obj)
        assert status in (201, 409), body
    token = await rest.token_for(ns, "narrow")
    config = real_node.kube.write_kubeconfig(
        tmp_path / "narrow.kubeconfig", token=token, user="narrow"
    )
    settings = doctor("agent", KubeSettings(kubeconfig=config), node=real_node.node.name)

    async def pods_red() -> bool:  # RBAC reaches the authorizer's cache shortly after
        return red(await api.check(settings)) == ["api.pods"]

    await wait_for_async(pods_red, timeout_s=30, what="only api.pods red")
    line = next(x for x in await api.check(settings) if x.check == "api.pods")
    assert "watch pods" in line.said


async def _remove(rest: Rest, crd: str, path: str) -> None:
    status, body = await rest.call("DELETE", f"{CRDS}/{crd}")
    assert status in (200, 404), body

    async def gone() -> bool:
        return (await rest.call("GET", path))[0] == 404

    await wait_for_async(gone, timeout_s=60, what=f"{crd} no longer served")


async def test_the_cluster_role_without_the_operators_crds_turns_api_intent_red(
    real_node: LocalCluster, tmp_path: Path
) -> None:
    rest = Rest.admin(real_node.kube)
    for crd, (_, path) in INTENT.items():
        await _remove(rest, crd, path)
    config = await token_kubeconfig(real_node, "cluster", tmp_path)
    settings = doctor("cluster", KubeSettings(kubeconfig=config))
    lines = await api.check(settings)
    assert red(lines) == ["api.intent"], lines
    assert (
        "the GPU Operator's CRDs are not installed"
        in lines[[x.check for x in lines].index("api.intent")].said
    )
    await install_crds(rest, *(GPU_OPERATOR / file for file, _ in INTENT.values()))
    lines = await api.check(settings)
    assert red(lines) == [], lines
    intent = next(x for x in lines if x.check == "api.intent")
    assert "clusterpolicies.nvidia.com/v1" in intent.said
