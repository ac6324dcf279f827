"""The agent's DRA watchers against a real API server: ResourceSlices of its node and the
ResourceClaims allocated on it, created as the NVIDIA driver and the scheduler would, with the
shipped ClusterRole's ServiceAccount token."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents.kube.watch import ResourceClaimWatcher, ResourceSliceWatcher
from contract.inputs import ResourceClaimRecord, ResourceSliceRecord
from contract.records import replace
from gpuattr.localkube import LocalKube
from sim.apiserver import ApiServerDouble
from sim.cluster import Cluster
from sim.scenario import load
from tests.helpers import wait_for
from tests.kube_fixture import KubeError, Rest
from tests.realkube.cluster import running
from tests.realkube.deploy import AGENT_NAMESPACE, apply_rbac, ensure_namespace

DRIVER = "gpu.nvidia.com"
NODE, OTHER = "rk9-a", "rk9-b"
NS = "dra"
GPU0 = "GPU-4f6b2d3e-9a1c-4e8b-8d7f-0a1b2c3d4e5f"


def resource_slice(node: str, uuid: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "uuid": {"string": uuid},
                        "productName": {"string": "NVIDIA H100 80GB HBM3"},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                },
                {
                    "name": "gpu-0-mig-1g10gb-19-0",
                    "attributes": {
                        "type": {"string": "mig"},
                        "parentUUID": {"string": uuid},
                        "profile": {"string": "1g.10gb"},
                    },
                },
            ],
        },
    }


def resource_claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}],
                "config": [
                    {
                        "requests": ["gpu"],
                        "opaque": {
                            "driver": DRIVER,
                            "parameters": {
                                "apiVersion": "resource.nvidia.com/v1beta1",
                                "kind": "GpuConfig",
                                "sharing": {"strategy": "TimeSlicing"},
                            },
                        },
                    }
                ],
            }
        },
    }


def allocation(node: str, device: str, pods: list[tuple[str, str]]) -> dict[str, Any]:
    """What the scheduler writes: the allocation pinned to the node, and who reserves it."""
    return {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": node, "device": device}
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": n, "uid": u} for n, u in pods],
        }
    }


@contextlib.asynccontextmanager
async def dra_watching(kubeconfig: Path, out: list[Any]) -> AsyncIterator[None]:
    async with dra_watching_node(kubeconfig, out, NODE):
        yield


@contextlib.asynccontextmanager
async def dra_watching_node(kubeconfig: Path, out: list[Any], node: str) -> AsyncIterator[None]:
    async def emit(record: Any) -> None:
        out.append(record)

    async with running(node, kubeconfig, (ResourceSliceWatcher, ResourceClaimWatcher), emit):
        yield


def claims(out: list[Any]) -> dict[str, ResourceClaimRecord]:
    latest: dict[str, ResourceClaimRecord] = {}
    for rec in out:
        if isinstance(rec, ResourceClaimRecord):
            latest[rec.name] = rec
    return {name: rec for name, rec in latest.items() if not rec.deleted}


def slices(out: list[Any]) -> dict[str, ResourceSliceRecord]:
    latest: dict[str, ResourceSliceRecord] = {}
    for rec in out:
        if isinstance(rec, ResourceSliceRecord):
            latest[rec.name] = rec
    return {name: rec for name, rec in latest.items() if not rec.deleted}


async def test_agent_reads_its_slices_and_claims_with_the_shipped_role(
    real_kube: LocalKube, tmp_path: Path
) -> None:
    rest = Rest.admin(real_kube)
    apply_rbac(real_kube)
    token = await rest.token_for(AGENT_NAMESPACE, "gpuattr-agent")
    kubeconfig = real_kube.write_kubeconfig(
        tmp_path / "agent.kubeconfig", token=token, user="gpuattr-agent"
    )
    await rest.namespace(NS)
    with contextlib.suppress(KubeError):  # another test may have made it
        await rest.create(
            "/apis/resource.k8s.io/v1/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "gpu.nvidia.com"},
                "spec": {
                    "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]
                },
            },
        )
    slices_path = "/apis/resource.k8s.io/v1/resourceslices"
    claims_path = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims"
    await rest.create(slices_path, resource_slice(NODE, GPU0))
    await rest.create(
        slices_path, resource_slice(OTHER, "GPU-00000000-0000-4000-8000-000000000001")
    )
    for name in ("shared", "elsewhere", "later"):
        await rest.create(claims_path, resource_claim(name))
    pods = [("infer-a", "uid-a"), ("infer-b", "uid-b"), ("infer-c", "uid-c")]
    await rest.merge_patch(f"{claims_path}/shared/status", allocation(NODE, "gpu-0", pods))
    await rest.merge_patch(f"{claims_path}/elsewhere/status", allocation(OTHER, "gpu-0", pods[:1]))

    out: list[Any] = []
    async with dra_watching(kubeconfig, out):
        mine = await wait_for(lambda: slices(out), 30, what="the node's slice")
        assert list(mine) == [f"{NODE}-gpu.nvidia.com"]
        devices = {d.name: d for d in mine[f"{NODE}-gpu.nvidia.com"].devices}
        assert devices["gpu-0"].uuid == GPU0
        assert (
            devices["gpu-0-mig-1g10gb-19-0"].parent_uuid,
            devices["gpu-0-mig-1g10gb-19-0"].uuid,
        ) == (GPU0, None)

        shared = await wait_for(lambda: claims(out).get("shared"), 30, what="the shared claim")
        assert [(c.name, c.uid) for c in shared.reserved_for] == pods
        assert [(r.pool, r.device) for r in shared.results] == [(NODE, "gpu-0")]
        assert [c.sharing for c in shared.config] == ["time-slicing"]

        # the scheduler allocates another claim here; the first one is deallocated
        await rest.merge_patch(
            f"{claims_path}/later/status",
            allocation(NODE, "gpu-0-mig-1g10gb-19-0", [("mig-pod", "uid-m")]),
        )
        await wait_for(lambda: "later" in claims(out), 30, what="a claim allocated later")
        await rest.merge_patch(
            f"{claims_path}/shared/status", {"status": {"allocation": None, "reservedFor": None}}
        )
        await wait_for(lambda: "shared" not in claims(out), 30, what="deallocation as deletion")
        await rest.delete(f"{claims_path}/later")
        await wait_for(lambda: claims(out) == {}, 30, what="claim deletion")
        await rest.delete(f"{slices_path}/{NODE}-gpu.nvidia.com")
        await wait_for(lambda: slices(out) == {}, 30, what="slice deletion")

    assert {r.node for r in out} == {NODE}
    assert "elsewhere" not in {r.name for r in out if isinstance(r, ResourceClaimRecord)}


async def test_the_dra_scenario_objects_read_back_the_same_from_the_real_server(
    real_kube: LocalKube,
) -> None:
    """The ``dra`` scenario's ResourceSlices and ResourceClaims (what the API-server double
    serves the demo and the end-to-end test) are accepted by the real API server, and the
    agent's watchers read the same records back from both."""
    scenario = load("dra")
    cluster = Cluster(scenario, lambda: 20.0)
    objects = cluster.dra_objects(epoch_s=1_700_000_000)
    rest = Rest.admin(real_kube)
    for ns in sorted({o["metadata"]["namespace"] for o in objects if o["kind"] == "ResourceClaim"}):
        # adminAccess claims are allowed only in namespaces labelled for it (the real server
        # refuses them otherwise): where the GPU Operator runs dcgm-exporter
        await ensure_namespace(rest, ns, {"resource.kubernetes.io/admin-access": "true"})
    for obj in objects:
        body = {k: v for k, v in obj.items() if k != "status"}
        body["metadata"] = {"name": obj["metadata"]["name"]}
        if obj["kind"] == "ResourceSlice":
            await rest.create("/apis/resource.k8s.io/v1/resourceslices", body)
        else:
            ns = obj["metadata"]["namespace"]
            path = f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"
            await rest.create(path, body)  # then the scheduler's part: allocation, reservedFor
            await rest.merge_patch(
                f"{path}/{body['metadata']['name']}/status", {"status": obj["status"]}
            )

    def comparable(records: list[Any]) -> set[Any]:
        out = set()
        for r in records:
            if isinstance(r, ResourceClaimRecord):
                out.add(replace(r, ts_ms=0, uid="", resource_version=""))
            elif isinstance(r, ResourceSliceRecord):
                out.add(replace(r, ts_ms=0, resource_version=""))
        return out

    for node in (n.name for n in scenario.nodes):
        expected = {
            o["metadata"]["name"]
            for o in objects
            if o["kind"] == "ResourceClaim"
            and node in str(o["status"]["allocation"]["nodeSelector"])
        }
        real = await read_back(real_kube.kubeconfig, node, expected)
        async with ApiServerDouble(lambda: ([], []), dra_objects=lambda: objects) as api:
            config = real_kube.workdir / f"double-{node}.kubeconfig"
            config.write_text(
                "apiVersion: v1\nkind: Config\n"
                f"clusters: [{{name: d, cluster: {{server: '{api.url}'}}}}]\n"
                "users: [{name: u, user: {token: t}}]\n"
                "contexts: [{name: c, context: {cluster: d, user: u}}]\ncurrent-context: c\n"
            )
            double = await read_back(config, node, expected)
        assert comparable(real) == comparable(double)
        assert set(claims(real)) == expected


async def read_back(kubeconfig: Path, node: str, claim_names: set[str]) -> list[Any]:
    """The records the agent's DRA watchers publish for ``node`` once they have everything."""
    out: list[Any] = []
    async with dra_watching_node(kubeconfig, out, node):
        await wait_for(
            lambda: slices(out) and set(claims(out)) == claim_names,
            30,
            what=lambda: f"{node}: {sorted(claims(out))} != {sorted(claim_names)}",
        )
    return out
