"""The agent's DRA watchers against a real API server: ResourceSlices of its node and the
ResourceClaims allocated on it, created as the NVIDIA driver and the scheduler would, with the
shipped ClusterRole's ServiceAccount token."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents.kube.watch import ResourceClaimWatcher, ResourceSliceWatcher, make_api_client
from contract.inputs import ResourceClaimRecord, ResourceSliceRecord
from gpuattr.localkube import LocalKube
from infra.settings import KubeSettings
from tests.helpers import wait_for
from tests.kube_fixture import KubeError, Rest
from tests.realkube.cluster import now_ms
from tests.realkube.deploy import KUSTOMIZATIONS, NAMESPACE, apply, ensure_namespace, render

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
    settings = KubeSettings(kubeconfig=kubeconfig, max_backoff_s=0.5, dra=True)
    api = await make_api_client(settings)

    async def emit(record: Any) -> None:
        out.append(record)

    kw = {"node": NODE, "api": api, "emit": emit, "now_ms": now_ms, "settings": settings}
    tasks = [
        asyncio.create_task(ResourceSliceWatcher(**kw).run(), name="slice-watch"),
        asyncio.create_task(ResourceClaimWatcher(**kw).run(), name="claim-watch"),
    ]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await api.close()


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
    await ensure_namespace(rest, NAMESPACE)
    apply(
        real_kube,
        [
            d
            for d in render(real_kube, KUSTOMIZATIONS["base"])
            if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
        ],
        dry_run=False,
    )
    token = await rest.token_for(NAMESPACE, "gpuattr-agent")
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
