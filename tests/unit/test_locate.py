"""Which dcgm-exporter the agent scrapes: the operator's DaemonSet pod on its node, no other."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from kubernetes_asyncio.client import (
    ApiClient,
    V1Container,
    V1ContainerPort,
    V1ObjectMeta,
    V1OwnerReference,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
)

from agents.kube.translate import exporter_pod
from agents.locate import ExporterLocator, ExporterPod, NotFound, Target, refusal
from contract.records import replace
from infra.settings import DcgmSettings
from sim.gpuoperator import operand_pod_objects
from sim.kube_objects import exporter_pod_objects
from sim.scenario import load

NS, DS = "gpu-operator", "nvidia-dcgm-exporter"


def pod(
    name: str = "nvidia-dcgm-exporter-abcde",
    namespace: str = NS,
    owner: tuple[str, str] | None = ("DaemonSet", DS),
    ip: str = "10.0.0.7",
    created_ms: int = 1_000,
) -> ExporterPod:
    kind, owner_name = owner if owner is not None else ("", "")
    return ExporterPod(
        namespace=namespace,
        name=name,
        ip=ip,
        port=9400,
        phase="Running",
        ready=True,
        terminating=False,
        created_ms=created_ms,
        owner_kind=kind,
        owner_name=owner_name,
    )


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        pytest.param(pod(), None, id="operator-daemonset-pod"),
        pytest.param(pod(namespace="tenant"), "other-namespace", id="tenant-namespace"),
        pytest.param(
            pod(namespace="tenant", owner=("DaemonSet", DS)),
            "other-namespace",
            id="tenant-daemonset-of-the-same-name",
        ),
        pytest.param(pod(owner=None), "no-daemonset-owner", id="bare-pod-in-operator-namespace"),
        pytest.param(
            pod(owner=("ReplicaSet", "dcgm-exporter-5d8f")),
            "no-daemonset-owner",
            id="replicaset-in-operator-namespace",
        ),
        pytest.param(
            pod(owner=("DaemonSet", "dcgm-exporter")),
            "other-daemonset",
            id="another-daemonset",
        ),
        pytest.param(
            pod(owner=("DaemonSet", f"{DS}-dra")), None, id="the-gpuclusters-dra-stack-exporter"
        ),
        pytest.param(
            pod(namespace="tenant", owner=("DaemonSet", f"{DS}-dra")),
            "other-namespace",
            id="tenant-daemonset-named-like-the-dra-stacks",
        ),
        pytest.param(
            pod(owner=("DaemonSet", f"{DS}-dra-x")), "other-daemonset", id="a-longer-name"
        ),
    ],
)
def test_refusal(candidate: ExporterPod, expected: str | None) -> None:
    assert refusal(candidate, NS, DS) == expected


def locator() -> ExporterLocator:
    return ExporterLocator("app=nvidia-dcgm-exporter", namespace=NS, daemonset=DS)


def test_newer_ready_impostors_are_never_chosen() -> None:
    loc = locator()
    own = pod(ip="10.0.0.7", created_ms=1_000)
    tenant = pod(name="fake", namespace="tenant", ip="10.0.9.9", created_ms=9_000)
    unowned = pod(name="fake", owner=None, ip="10.0.9.8", created_ms=9_000)
    news = loc.relisted([tenant, unowned, own])
    assert sorted(why for _, why in news) == ["no-daemonset-owner", "other-namespace"]
    assert loc.target() == Target("http://10.0.0.7:9400/metrics", own.key)
    assert loc.refused == {tenant.key: "other-namespace", unowned.key: "no-daemonset-owner"}


def test_only_impostors_is_no_exporter() -> None:
    loc = locator()
    loc.relisted([pod(namespace="tenant")])
    found = loc.target()
    assert isinstance(found, NotFound)
    assert found.reason == "no-exporter-pod"
    assert "1 other pod(s) labelled so refused" in found.detail
    assert f"DaemonSet {NS}/{DS}" in found.detail


def test_a_refusal_is_reported_once() -> None:
    loc = locator()
    tenant = pod(name="fake", namespace="tenant")
    assert loc.seen(tenant, deleted=False) == "other-namespace"
    assert loc.seen(replace(tenant, ready=False), deleted=False) is None
    assert loc.relisted([tenant]) == []  # a relist repeats nothing it already said
    assert loc.seen(tenant, deleted=True) is None
    assert loc.refused == {}
    assert loc.seen(tenant, deleted=False) == "other-namespace"  # a new pod of that name


def test_a_pod_that_loses_its_owner_is_dropped() -> None:
    loc = locator()
    own = pod()
    loc.seen(own, deleted=False)
    assert isinstance(loc.target(), Target)
    assert loc.seen(replace(own, owner_kind="", owner_name=""), False) == ("no-daemonset-owner")
    assert isinstance(loc.target(), NotFound)


def _v1pod(namespace: str, owners: list[V1OwnerReference] | None) -> V1Pod:
    return V1Pod(
        metadata=V1ObjectMeta(name="e", namespace=namespace, owner_references=owners),
        spec=V1PodSpec(
            containers=[
                V1Container(name="c", ports=[V1ContainerPort(name="metrics", container_port=9400)])
            ]
        ),
        status=V1PodStatus(phase="Running", pod_ip="10.0.0.7"),
    )


def _ref(kind: str, name: str, controller: bool | None) -> V1OwnerReference:
    return V1OwnerReference(
        api_version="apps/v1", kind=kind, name=name, uid="u", controller=controller
    )


@pytest.mark.parametrize(
    ("owners", "kind", "name"),
    [
        pytest.param([_ref("DaemonSet", DS, True)], "DaemonSet", DS, id="controller"),
        pytest.param([_ref("DaemonSet", DS, None)], "", "", id="owner-not-controller"),
        pytest.param([_ref("DaemonSet", DS, False)], "", "", id="controller-false"),
        pytest.param(
            [_ref("DaemonSet", DS, False), _ref("ReplicaSet", "r", True)],
            "ReplicaSet",
            "r",
            id="the-controller-among-owners",
        ),
        pytest.param(None, "", "", id="no-owners"),
    ],
)
def test_exporter_pod_reads_its_controller(
    owners: list[V1OwnerReference] | None, kind: str, name: str
) -> None:
    got = exporter_pod(_v1pod(NS, owners), port_name="metrics", default_port=1)
    assert (got.owner_kind, got.owner_name, got.port) == (kind, name, 9400)


@pytest.mark.parametrize("scenario", ["exclusive", "operator-lab"])
async def test_the_sims_exporter_pods_are_the_operators(scenario: str) -> None:
    """The simulator's exporter pods (its own, and the GPU Operator lab's operand pods) pass the
    rule with the default settings, read as the agent reads them."""
    sim = load(scenario)
    ports = {n.name: 40_000 + i for i, n in enumerate(sim.nodes)}
    objects = [
        *exporter_pod_objects(sim, ports, 1_780_000_000.0),
        *operand_pod_objects(sim, 60.0, 1_780_000_000.0, exporter_ports=ports),
    ]
    dcgm = DcgmSettings()
    found = []
    async with ApiClient() as api:
        for obj in objects:
            if obj["metadata"]["labels"].get("app") != "nvidia-dcgm-exporter":
                continue
            v1 = api.deserialize(SimpleNamespace(data=json.dumps(obj)), "V1Pod")
            got = exporter_pod(v1, port_name=dcgm.port_name, default_port=dcgm.port)
            found.append(refusal(got, dcgm.exporter_namespace, dcgm.exporter_daemonset))
    assert found
    assert set(found) == {None}
