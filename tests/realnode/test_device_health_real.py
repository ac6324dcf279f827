"""Device health end to end on the real node (KEP-4680, gate ``ResourceHealthStatus``): our device
plugin reports a held GPU Unhealthy in ``ListAndWatch``; the real kubelet writes it into the
holder's ``status.containerStatuses[].allocatedResourcesStatus`` on the real API server; ``gpuattr
agent`` publishes the pod with its ``resource_health``; ``gpuattr worker`` judges the device
unhealthy in its attribution events and raises a ``device-unhealthy`` alert naming the holder
with its UID — and resolves it when the plugin reports the device Healthy again. The kubelet
also drops the unhealthy ID from ``GetAllocatableResources`` while the pod keeps it: the agent's
next snapshot carries the shorter list, and the events' ``allocatable`` word says unhealthy, then
healthy once the ID is listed again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from contract.inputs import DeviceAssignment
from contract.outputs import Alert, AttributionEvent, HealthSaid
from gpuattr.localkube.cluster import LocalCluster
from gpuattr.localkube.devices import WHOLE
from gpuattr.localkube.node import DeviceHealth, LocalNode
from tests.helpers import wait_for, wait_for_async
from tests.kube_fixture import Rest
from tests.realnode.node import (
    DeviceMap,
    agent_pod,
    delete_namespace,
    kubelet_rows,
    namespace,
    pod,
    running,
    uids,
)
from tests.realnode.pipeline import RealPipeline, real_pipeline

pytestmark = pytest.mark.integration

NS, POD = "rn-health", "sick"
KIND = "device-unhealthy"


@dataclass(frozen=True, slots=True)
class Held:
    """The test pod's one ``nvidia.com/gpu`` device: its ID as allocated, the device key events
    name, and the holder's UID."""

    device_id: str
    key: str
    uid: str


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def held_device(cluster: LocalCluster, rest: Rest) -> Held:
    rows: frozenset[DeviceAssignment] = await kubelet_rows(cluster.node.podresources_socket)
    mine = [r for r in rows if (r.namespace, r.pod) == (NS, POD)]
    assert len(mine) == 1, f"one device for {NS}/{POD}: {sorted(map(str, mine))}"
    uid = (await uids(rest))[f"{NS}/{POD}"]
    device_id = mine[0].device_id
    return Held(device_id, DeviceMap.of(cluster).plugin_ids[device_id], uid)


async def kubelet_says(rest: Rest, device_id: str) -> str | None:
    """The health the kubelet wrote for ``device_id`` in the pod's status, read from the API."""
    status: dict[str, Any] = (await rest.get(f"/api/v1/namespaces/{NS}/pods/{POD}"))["status"]
    for container in status.get("containerStatuses", []):
        for resource in container.get("allocatedResourcesStatus") or []:
            if resource.get("name") != WHOLE:
                continue
            for entry in resource.get("resources") or []:
                if entry.get("resourceID") == device_id:
                    health: str = entry.get("health", "")
                    return health
    return None


async def status_shows(rest: Rest, device_id: str, health: DeviceHealth) -> None:
    async def written() -> bool:
        return await kubelet_says(rest, device_id) == health

    await wait_for_async(
        written,
        timeout_s=90,
        every_s=0.2,
        what=f"the kubelet's {health} for {device_id} in {NS}/{POD}'s status",
    )


def holder_named(e: AttributionEvent | Alert, held: Held) -> bool:
    return any((h.namespace, h.pod, h.uid) == (NS, POD, held.uid) for h in e.holders)


def said(e: AttributionEvent, source: str, state: str) -> list[HealthSaid]:
    return [w for w in e.health.sources if (w.source, w.state) == (source, state)]


def event_saying(p: RealPipeline, held: Held, since_ms: int, state: str) -> AttributionEvent | None:
    """The first event since ``since_ms`` of the held device in which the kubelet (the holder's
    status) and its allocatable list both say ``state``."""
    for e in p.attribution(since_ms):
        if e.device_uuid != held.key or not holder_named(e, held):
            continue
        kubelet = [w for w in said(e, "kubelet", state) if w.holder == f"{NS}/{POD}"]
        if kubelet and said(e, "allocatable", state):
            return e
    return None


def lately(p: RealPipeline, held: Held, since_ms: int) -> str:
    """What the last events of the held device said of its health (for a failure's message)."""
    events = [e for e in p.attribution(since_ms) if e.device_uuid == held.key][-3:]
    return "\n".join(
        f"{e.ts_ms} {e.origin}: "
        + "; ".join(f"{w.source} {w.state} {w.detail}" for w in e.health.sources)
        for e in events
    )


def same_gpu(node: LocalNode, device_id: str) -> list[str]:
    """Every ID the plugin advertises for the GPU of ``device_id``: NVIDIA's plugin checks health
    per GPU, so all of a GPU's time-slicing replicas turn unhealthy together."""
    base = device_id.partition("::")[0]
    return sorted(i for gpu in node.layout for _, i in gpu.ids() if i.partition("::")[0] == base)


def set_health(node: LocalNode, device_id: str, health: DeviceHealth) -> None:
    for each in same_gpu(node, device_id):
        node.set_device_health(each, health)


def alert(p: RealPipeline, held: Held, status: str) -> Alert | None:
    found = [
        a
        for a in p.alert_records()
        if a.kind == KIND and a.status == status and a.device_uuid == held.key
    ]
    return found[0] if found else None


async def test_an_unhealthy_device_fires_for_its_holder_and_resolves_when_healthy(
    real_node: LocalCluster, kafka_bootstrap: str, tmp_path: Path
) -> None:
    rest = Rest.admin(real_node.kube)
    own = await agent_pod(rest)
    node = real_node.node
    await namespace(rest, NS)
    sick_id: str | None = None
    try:
        await rest.create(f"/api/v1/namespaces/{NS}/pods", pod(POD, resource=WHOLE))
        await running(rest, NS, [POD])
        held = await held_device(real_node, rest)
        async with real_pipeline(kafka_bootstrap, real_node, tmp_path, own_pod=own) as p:
            await wait_for(
                lambda: any(
                    e.device_uuid == held.key and holder_named(e, held) for e in p.attribution()
                ),
                timeout_s=120,
                every_s=0.2,
                what=lambda: f"an event for {held.key} naming {NS}/{POD}\n{p.logs()}",
            )
            assert await kubelet_says(rest, held.device_id) == "Healthy"

            sick_since, sick_id = now_ms(), held.device_id
            set_health(node, held.device_id, "Unhealthy")
            await status_shows(rest, held.device_id, "Unhealthy")
            firing = await wait_for(
                lambda: alert(p, held, "firing"),
                timeout_s=90,
                every_s=0.2,
                what=lambda: f"the {KIND} alert firing for {held.key}\n{p.logs()}",
            )
            assert holder_named(firing, held), firing.holders
            assert f"uid {held.uid}" in firing.summary, firing.summary
            # the pod status and the allocatable list reach the worker on separate paths: the
            # alert fires on whichever comes first, and an event soon carries both
            first = {w.source for w in firing.figures.health if w.state == "unhealthy"}
            assert first & {"kubelet", "allocatable"}, firing.figures.health
            both = await wait_for(
                lambda: event_saying(p, held, sick_since, "unhealthy"),
                timeout_s=90,
                every_s=0.2,
                what=lambda: (
                    f"an event of {held.key} ({held.device_id}) with the kubelet's and its "
                    f"allocatable list's unhealthy; lately:\n{lately(p, held, sick_since)}\n"
                    f"{p.logs()}"
                ),
            )
            kubelet = said(both, "kubelet", "unhealthy")
            assert [w.holder for w in kubelet] == [f"{NS}/{POD}"]
            assert held.device_id in kubelet[0].detail, kubelet[0].detail
            (dropped,) = said(both, "allocatable", "unhealthy")
            assert dropped.detail == (
                f"the kubelet no longer lists {held.device_id} of {WHOLE} as allocatable: "
                "its device plugin reports it unhealthy"
            )
            sick = [
                e
                for e in p.attribution(sick_since)
                if e.device_uuid == held.key and e.health.verdict == "unhealthy"
            ]
            assert sick, f"no attribution event judged {held.key} unhealthy"
            assert all(holder_named(e, held) for e in sick)

            well_since = now_ms()
            set_health(node, held.device_id, "Healthy")
            await status_shows(rest, held.device_id, "Healthy")
            resolved = await wait_for(
                lambda: alert(p, held, "resolved"),
                timeout_s=90,
                every_s=0.2,
                what=lambda: f"the {KIND} alert resolved for {held.key}\n{p.logs()}",
            )
            assert resolved.id == firing.id, "one episode: fired, then resolved"
            assert "healthy again" in resolved.summary, resolved.summary
            # resolved only once neither says unhealthy: the ID is listed again by then
            words = {(w.source, w.state) for w in resolved.figures.health}
            assert {("kubelet", "healthy"), ("allocatable", "healthy")} <= words, words
            assert await wait_for(
                lambda: event_saying(p, held, well_since, "healthy"),
                timeout_s=90,
                every_s=0.2,
                what=lambda: (
                    f"an event of {held.key} with both healthy again; lately:\n"
                    f"{lately(p, held, well_since)}\n{p.logs()}"
                ),
            )
            episode = [(a.status, a.device_uuid) for a in p.alert_records() if a.kind == KIND]
            assert episode == [("firing", held.key), ("resolved", held.key)]
    finally:
        if sick_id is not None:
            set_health(node, sick_id, "Healthy")
        await delete_namespace(rest, NS)
        await node.settled()  # every device allocatable again: the node is the session's
