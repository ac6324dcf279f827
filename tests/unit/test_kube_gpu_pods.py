"""Which pods the agent publishes: only those that can hold a GPU (golden API-server JSON)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import V1Pod
from kubernetes_asyncio.client.api_client import ApiClient

from agents.kube.translate import can_hold_gpu
from sim.kube_objects import pod_objects
from sim.scenario import builtin_names, load


@pytest.fixture
async def api() -> AsyncIterator[ApiClient]:
    client = ApiClient()
    yield client
    await client.close()


def as_pod(api: ApiClient, raw: dict[str, Any]) -> V1Pod:
    return api._ApiClient__deserialize(raw, "V1Pod")  # type: ignore[no-any-return]


def pod_json(spec: dict[str, Any] | None) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "uid": "u"},
    }
    if spec is not None:
        raw["spec"] = {"nodeName": "gpu-a", **spec}
    return raw


def container(**resources: dict[str, str]) -> dict[str, Any]:
    return {"name": "c", "image": "img", "resources": resources}


@pytest.mark.parametrize(
    ("spec", "holds"),
    [
        pytest.param(
            {"containers": [container(limits={"nvidia.com/gpu": "1", "cpu": "2"})]},
            True,
            id="gpu-limit",
        ),
        pytest.param(
            {"containers": [container(requests={"nvidia.com/gpu": "1"})]}, True, id="gpu-request"
        ),
        pytest.param(
            {"containers": [container(limits={"nvidia.com/mig-1g.10gb": "1"})]}, True, id="mig"
        ),
        pytest.param(
            {"containers": [container(limits={"nvidia.com/gpu.shared": "2"})]},
            True,
            id="renamed-shared-resource",
        ),
        pytest.param(
            {
                "containers": [container(limits={"cpu": "1"})],
                "initContainers": [container(limits={"nvidia.com/gpu": "1"})],
            },
            True,
            id="init-container-gpu",
        ),
        pytest.param(
            {
                "containers": [
                    {"name": "c", "image": "img", "resources": {"claims": [{"name": "g"}]}}
                ],
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "one-gpu"}],
            },
            True,
            id="dra-resource-claims",
        ),
        pytest.param(
            {"containers": [container(limits={"cpu": "4", "memory": "8Gi"})]}, False, id="cpu-only"
        ),
        pytest.param({"containers": [{"name": "c", "image": "img"}]}, False, id="no-resources"),
        pytest.param(
            {"containers": [container(limits={"amd.com/gpu": "1"})]}, False, id="other-vendor"
        ),
        pytest.param(  # quantities are not parsed: declaring the resource is enough
            {"containers": [container(limits={"nvidia.com/gpu": "0"})]},
            True,
            id="declared-zero-still-published",
        ),
        pytest.param(None, False, id="no-spec"),
    ],
)
async def test_can_hold_gpu(api: ApiClient, spec: dict[str, Any] | None, holds: bool) -> None:
    assert can_hold_gpu(as_pod(api, pod_json(spec))) is holds


def test_partial_objects_are_not_gpu_pods() -> None:
    assert can_hold_gpu(None) is False
    assert can_hold_gpu(V1Pod()) is False


@pytest.mark.parametrize("name", builtin_names())
async def test_every_simulated_pod_can_hold_a_gpu(api: ApiClient, name: str) -> None:
    """The simulator's pods request nvidia.com resources, so scenarios still see all of them."""
    scenario = load(name)
    pods = {p.uid: p for p in scenario.pods}
    for t in sorted({0.0, *(p.start_s for p in pods.values())}):
        for raw in pod_objects(scenario, t, 0):
            assert can_hold_gpu(as_pod(api, raw)), raw["metadata"]["name"]
