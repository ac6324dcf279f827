"""DRA watchers against the API-server double: slices and claims of the node, and an API server
that does not serve resource.k8s.io/v1 (before 1.34): the watcher stops after one warning."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from agents.kube.watch import ResourceClaimWatcher, ResourceSliceWatcher, make_api_client
from agents.selfmetrics import SOURCE_ERRORS
from contract.inputs import ResourceClaimRecord, ResourceSliceRecord
from infra.httpserve import start_site
from infra.settings import KubeSettings
from sim.apiserver import ApiServerDouble
from tests.helpers import wait_for

NODE = "gpu-a"


def not_served() -> float:
    return sum(
        s.value
        for s in SOURCE_ERRORS.collect()[0].samples
        if s.name.endswith("_total") and s.labels == {"source": "apiserver", "error": "not_served"}
    )


def dra_objects(allocated_to: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-gpu.nvidia.com", "uid": "slice-1"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": NODE,
                "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-1"}}}],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ml", "uid": "claim-1"},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": "gpu.nvidia.com",
                                "pool": NODE,
                                "device": "gpu-0",
                            }
                        ]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {
                                        "key": "metadata.name",
                                        "operator": "In",
                                        "values": [allocated_to],
                                    }
                                ]
                            }
                        ]
                    },
                },
                "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
            },
        },
    ]


async def run_watchers(url: str, out: list[Any]) -> list[asyncio.Task[None]]:
    settings = KubeSettings(api_url=url, max_backoff_s=0.2)
    api = await make_api_client(settings)

    async def emit(record: Any) -> None:
        out.append(record)

    kw = {"node": NODE, "api": api, "emit": emit, "now_ms": lambda: 1, "settings": settings}
    tasks = [
        asyncio.create_task(ResourceSliceWatcher(**kw).run()),
        asyncio.create_task(ResourceClaimWatcher(**kw).run()),
    ]
    out.append(api)  # closed by the caller
    return tasks


async def stop(tasks: list[asyncio.Task[None]], out: list[Any]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await out.pop(0).close()


async def test_slices_and_claims_of_the_node_and_a_claim_moving_away() -> None:
    where = {"node": NODE}
    async with ApiServerDouble(
        lambda: ([], []), dra_objects=lambda: dra_objects(where["node"]), tick_s=0.02
    ) as api:
        out: list[Any] = []
        tasks = await run_watchers(api.url, out)
        try:
            await wait_for(
                lambda: {type(r) for r in out} >= {ResourceSliceRecord, ResourceClaimRecord}, 10
            )
            claim = next(r for r in out if isinstance(r, ResourceClaimRecord))
            assert (claim.name, claim.reserved_for[0].uid, claim.deleted) == ("c", "u", False)
            where["node"] = "gpu-b"  # re-allocated elsewhere: gone from this node
            await wait_for(
                lambda: any(isinstance(r, ResourceClaimRecord) and r.deleted for r in out), 10
            )
        finally:
            await stop(tasks, out)


async def test_an_api_server_without_dra_ends_the_watchers_after_a_warning() -> None:
    app = web.Application()  # answers 404 to everything, like a 1.33 server for resource.k8s.io
    runner, _site, port = await start_site(app, "127.0.0.1", 0, 0.5)
    before = not_served()
    out: list[Any] = []
    tasks = await run_watchers(f"http://127.0.0.1:{port}", out)
    try:
        done, _ = await asyncio.wait(tasks, timeout=10)
        assert done == set(tasks)  # both ended by themselves
        assert all(t.exception() is None for t in tasks)
        assert not_served() == before + 2
        assert out[1:] == []  # nothing published
    finally:
        await stop(tasks, out)
        await runner.cleanup()
