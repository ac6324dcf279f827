"""Device health in the pod status → ``PodRecord.resource_health``: golden tests from pods as the
API server returns them (``tests/fixtures/kube``, read through the client library's deserializer
as the watch reads them), and the refusals (an undefined health, an entry without a device)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import (
    V1ContainerStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodStatus,
    V1ResourceHealth,
    V1ResourceStatus,
)
from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.client.configuration import Configuration
from prometheus_client import REGISTRY

from agents.kube import translate
from agents.kube.translate import can_hold_gpu, pod_record
from agents.kube.watch import PodWatcher, make_api_client
from agents.types import AgentRecord
from contract import codec
from contract.bounds import MAX_TEXT_CHARS
from contract.inputs import PodRecord, ResourceHealth
from infra.settings import KubeSettings
from sim.apiserver import ApiServerDouble
from tests.helpers import wait_for
from tests.kube_objects import from_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kube"
GPU_SICK = "GPU-352be23a-6364-5d8f-bbc0-aed1199d8362"
GPU_WELL = "GPU-1aece8ab-7cd2-5013-9101-557970663232"
CDI_ID = "k8s.gpu.nvidia.com/claim=3f9a1c2e-7b4d-4e8f-a0b1-c2d3e4f5a6b7-gpu-0"


def fixture(name: str) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return raw


def refused(what: str) -> float:
    value = REGISTRY.get_sample_value("gpuattr_agent_refused_values_total", {"what": what})
    return value or 0.0


@pytest.fixture
async def api() -> AsyncIterator[ApiClient]:
    async with ApiClient() as client:
        yield client


def health_of(api: ApiClient, raw: dict[str, Any]) -> tuple[ResourceHealth, ...]:
    rec = pod_record(from_json(api, raw, "V1Pod"), node="n", ts_ms=1)
    assert codec.decode(codec.encode(rec)) == rec  # valid on the wire
    return rec.resource_health


def devices(raw: dict[str, Any], container: str) -> list[dict[str, Any]]:
    """The device entries of ``container``'s first resource in ``raw`` (to edit a copy)."""
    status = next(c for c in raw["status"]["containerStatuses"] if c["name"] == container)
    found: list[dict[str, Any]] = status["allocatedResourcesStatus"][0]["resources"]
    return found


async def test_device_plugin_pod_one_replica_unhealthy(api: ApiClient) -> None:
    raw = fixture("pod-device-plugin-health.json")
    rec = pod_record(from_json(api, raw, "V1Pod"), node="gpu-a", ts_ms=5)
    assert (rec.namespace, rec.name, rec.resource_version) == (
        "ml",
        "train-llama-7b9c6d5f4-x2k4q",
        "1843270",
    )
    assert rec.resource_health == (  # sorted by device; the sidecar and init container: none
        ResourceHealth("trainer", "nvidia.com/gpu", f"{GPU_WELL}::3", "Healthy"),
        ResourceHealth("trainer", "nvidia.com/gpu", f"{GPU_SICK}::1", "Unhealthy"),
    )


async def test_dra_pod_carries_its_claims_health_and_message(api: ApiClient) -> None:
    raw = fixture("pod-dra-health.json")
    pod = from_json(api, raw, "V1Pod")
    assert can_hold_gpu(pod)  # published although it asks for no nvidia.com/ resource
    assert pod_record(pod, node="gh200-dra", ts_ms=5).resource_health == (
        ResourceHealth(
            "embedder",
            "claim:gpu/req-0",
            CDI_ID,
            "Unhealthy",
            "XID 79 on GPU-18c2e194-0a3f-5128-bcc2-d2da612bda00: GPU has fallen off the bus",
        ),
    )


async def test_two_containers_each_with_its_device(api: ApiClient) -> None:
    assert health_of(api, fixture("pod-two-containers-health.json")) == (
        ResourceHealth(
            "actor", "nvidia.com/mig-1g.10gb", "MIG-04b82808-acc6-5799-8115-9cde750bad78", "Healthy"
        ),
        ResourceHealth(
            "learner", "nvidia.com/gpu", "GPU-aaee343d-d422-5c42-bda0-8250f51ae4db", "Unhealthy"
        ),
    )


@pytest.mark.parametrize(
    "name",
    ["pod-device-plugin-health.json", "pod-dra-health.json", "pod-two-containers-health.json"],
)
async def test_the_same_status_in_another_order_is_the_same_record(
    api: ApiClient, name: str
) -> None:
    """An unchanged status must make an equal record, whatever order the lists come in."""
    raw = fixture(name)
    shuffled = copy.deepcopy(raw)
    statuses = shuffled["status"]["containerStatuses"]
    statuses.reverse()
    for status in statuses:
        for resource in status.get("allocatedResourcesStatus", []):
            resource["resources"].reverse()
    assert health_of(api, shuffled) == health_of(api, raw)


async def test_a_health_change_changes_the_record(api: ApiClient) -> None:
    raw = fixture("pod-device-plugin-health.json")
    healed = copy.deepcopy(raw)
    healed["metadata"]["resourceVersion"] = "1843391"
    devices(healed, "trainer")[0]["health"] = "Healthy"
    before, after = health_of(api, raw), health_of(api, healed)
    assert before != after
    assert {h.health for h in after} == {"Healthy"}


async def test_the_pod_watch_publishes_a_health_change() -> None:
    """The kubelet's status write is a MODIFIED event like any other: the watcher publishes the
    pod again, now with the new health (nothing between the watch and Kafka drops it)."""
    served = [fixture("pod-dra-health.json")]
    out: list[AgentRecord] = []

    async def emit(record: AgentRecord) -> None:
        out.append(record)

    def records() -> list[PodRecord]:
        return [r for r in out if isinstance(r, PodRecord)]

    async with ApiServerDouble(lambda: (served, []), tick_s=0.02, bookmark_s=0.2) as server:
        settings = KubeSettings(api_url=server.url, watch_timeout_s=30, max_backoff_s=0.05)
        client = await make_api_client(settings)
        watcher = PodWatcher(
            node="gh200-dra", api=client, emit=emit, now_ms=lambda: 1, settings=settings
        )
        task = asyncio.create_task(watcher.run())
        try:
            await wait_for(lambda: records(), timeout_s=5, what="the listed pod")
            assert [h.health for h in records()[0].resource_health] == ["Unhealthy"]
            healed = copy.deepcopy(served[0])  # the double keeps what it served: a new object
            entry = devices(healed, "embedder")[0]
            entry["health"] = "Healthy"
            entry.pop("message")  # omitempty: a healthy report carries none
            served[0] = healed
            await wait_for(lambda: len(records()) > 1, timeout_s=5, what="the modified pod")
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            await client.close()
    last = records()[-1]
    assert [(h.health, h.message) for h in last.resource_health] == [("Healthy", "")]
    assert last.resource_version != records()[0].resource_version


async def test_no_allocated_resources_status_gives_none(api: ApiClient) -> None:
    """The gate off (or a kubelet before 1.31): no field at all, the pod published as before."""
    raw = fixture("pod-device-plugin-health.json")
    for status in raw["status"]["containerStatuses"]:
        status.pop("allocatedResourcesStatus", None)
    assert health_of(api, raw) == ()
    raw.pop("status")
    assert health_of(api, raw) == ()


async def test_an_undefined_health_is_unknown_and_counted(
    api: ApiClient, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(translate, "_logged_refusals", set())  # as if first seen here
    raw = fixture("pod-device-plugin-health.json")
    devices(raw, "trainer")[0]["health"] = "Degraded"
    devices(raw, "trainer")[1].pop("health")  # omitempty: a kubelet that wrote none
    before = refused("resource_health")
    assert [h.health for h in health_of(api, raw)] == ["Unknown", "Unknown"]
    assert refused("resource_health") == before + 2
    health_of(api, raw)  # the same pod again: counted again, logged once per value
    assert refused("resource_health") == before + 4
    said = [r.getMessage() for r in caplog.records if "is not Healthy" in r.getMessage()]
    assert sum("'Degraded'" in m for m in said) == 1
    assert sum("None" in m for m in said) == 1


async def test_an_entry_without_a_device_is_dropped_and_counted(api: ApiClient) -> None:
    raw = fixture("pod-device-plugin-health.json")
    devices(raw, "trainer")[0]["resourceID"] = ""  # the field is required: empty, not absent
    before = refused("resource_health_id")
    assert health_of(api, raw) == (
        ResourceHealth("trainer", "nvidia.com/gpu", f"{GPU_WELL}::3", "Healthy"),
    )
    assert refused("resource_health_id") == before + 1


def test_partial_models_never_crash() -> None:
    """Models the client library would refuse (no resourceID, no name) still translate."""
    loose = Configuration()
    loose.client_side_validation = False
    status = V1PodStatus(
        container_statuses=[
            V1ContainerStatus(
                name=None,
                image=None,
                image_id=None,
                ready=None,
                restart_count=None,
                allocated_resources_status=[
                    V1ResourceStatus(name=None, resources=None, local_vars_configuration=loose),
                    V1ResourceStatus(
                        name="nvidia.com/gpu",
                        resources=[
                            V1ResourceHealth(resource_id=None, local_vars_configuration=loose),
                            V1ResourceHealth(resource_id="GPU-0", health="Healthy", message=None),
                        ],
                        local_vars_configuration=loose,
                    ),
                ],
                local_vars_configuration=loose,
            )
        ]
    )
    rec = pod_record(V1Pod(metadata=V1ObjectMeta(name="p"), status=status), node="n", ts_ms=1)
    assert rec.resource_health == (ResourceHealth("", "nvidia.com/gpu", "GPU-0", "Healthy"),)


def test_init_and_ephemeral_containers_are_not_read() -> None:
    """The kubelet writes no device health for them; should one carry some, it is not a
    holder's (the pod's running containers are)."""
    entry = V1ResourceStatus(
        name="nvidia.com/gpu", resources=[V1ResourceHealth(resource_id="GPU-0", health="Healthy")]
    )
    side = V1ContainerStatus(
        name="init",
        image="i",
        image_id="",
        ready=True,
        restart_count=0,
        allocated_resources_status=[entry],
    )
    status = V1PodStatus(init_container_statuses=[side], ephemeral_container_statuses=[side])
    rec = pod_record(V1Pod(metadata=V1ObjectMeta(name="p"), status=status), node="n", ts_ms=1)
    assert rec.resource_health == ()


def test_a_long_message_is_cut() -> None:
    entry = V1ResourceStatus(
        name="claim:gpu",
        resources=[V1ResourceHealth(resource_id="gpu.nvidia.com/n/gpu-0", message="x" * 5000)],
    )
    status = V1PodStatus(
        container_statuses=[
            V1ContainerStatus(
                name="c",
                image="i",
                image_id="",
                ready=True,
                restart_count=0,
                allocated_resources_status=[entry],
            )
        ]
    )
    rec = pod_record(V1Pod(metadata=V1ObjectMeta(name="p"), status=status), node="n", ts_ms=1)
    (health,) = rec.resource_health
    assert len(health.message) == MAX_TEXT_CHARS
    assert health.health == "Unknown"  # no health given: a timed-out DRA report reads the same


def test_one_device_listed_twice_keeps_the_worse_news() -> None:
    twice = V1ResourceStatus(
        name="nvidia.com/gpu",
        resources=[
            V1ResourceHealth(resource_id="GPU-0", health="Healthy"),
            V1ResourceHealth(resource_id="GPU-0", health="Unhealthy"),
        ],
    )
    status = V1PodStatus(
        container_statuses=[
            V1ContainerStatus(
                name="c",
                image="i",
                image_id="",
                ready=True,
                restart_count=0,
                allocated_resources_status=[twice],
            )
        ]
    )
    rec = pod_record(V1Pod(metadata=V1ObjectMeta(name="p"), status=status), node="n", ts_ms=1)
    assert rec.resource_health == (ResourceHealth("c", "nvidia.com/gpu", "GPU-0", "Unhealthy"),)
