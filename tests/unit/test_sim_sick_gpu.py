"""The ``sick-gpu`` demo scenario: a GPU turns unhealthy through the kubelet while its exporter is
down.

The doubles first: the node's kubelet runs with ``ResourceHealthStatus``, so the API-server
double serves each holder's ``allocatedResourcesStatus`` — every held device ID exactly as the
kubelet double allocated it, Healthy, Unhealthy from the device plugin's step at 60 s (a
MODIFIED watch event over real HTTP), Healthy again from 150 s — and GPU 0 leaves the node's
allocatable count and the kubelet's allocatable list meanwhile. Then the story through the
worker's core on the demo's settings (:func:`tests.golden.record.generate`, as
``test_sim_tenants_scenario`` replays its scenario): one ``device-unhealthy`` episode naming the
trainer with its UID, fired and resolved while the exporter is down, and nothing for GPU 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from functools import cache
from typing import Any

import aiohttp
import orjson
import pytest

from agents.kube.translate import pod_record
from contract.inputs import AllocatableDevice, DeviceAssignment, ResourceHealth
from gpuattr.demo import DEMO_SPINE
from sim.apiserver import ApiServerDouble
from sim.cluster import Cluster
from sim.kube_objects import node_objects, pod_objects
from sim.scenario import gpu_uuid, load, parse
from tests.golden.record import generate
from tests.golden.scripted import EPOCH_S, Models
from tests.kube_objects import from_json

SCENARIO = load("sick-gpu")
NODE = "sick-a"
SICK = gpu_uuid(NODE, 0)
WELL = gpu_uuid(NODE, 1)
TRAINER = "llm-pretrain-0"
SERVER = "embedder-6d9f8b7c5-h2k7p"
UNHEALTHY_S, HEALTHY_S, EXPORTER_DOWN_S = 60.0, 150.0, 40.0
HEARTBEAT_S = float(DEMO_SPINE["GPUATTR_SPINE_HEARTBEAT_S"])
Value = dict[str, Any]


def pod_at(name: str, t: float) -> Value:
    return next(p for p in pod_objects(SCENARIO, t, EPOCH_S) if p["metadata"]["name"] == name)


def health_status(pod: Value) -> dict[str, list[Value]]:
    """container → its ``allocatedResourcesStatus``, as served."""
    return {
        c["name"]: c.get("allocatedResourcesStatus", [])
        for c in pod["status"].get("containerStatuses", [])
    }


def kubelet_at(t: float) -> tuple[tuple[DeviceAssignment, ...], tuple[AllocatableDevice, ...]]:
    """What the kubelet double answers at ``t``: ``List`` and ``GetAllocatableResources``."""
    return Cluster(SCENARIO, lambda: t).podresources(NODE)


def allocated_id(pod: str) -> str:
    """The device ID the kubelet double allocated to ``pod`` (its PodResources ``List``)."""
    rows, _ = kubelet_at(0.0)
    (row,) = [r for r in rows if r.pod == pod]
    return row.device_id


def said(health: str, pod: str) -> list[Value]:
    return [
        {
            "name": "nvidia.com/gpu",
            "resources": [{"resourceID": allocated_id(pod), "health": health}],
        }
    ]


# --- the doubles ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("t", "health"),
    [
        (0.0, "Healthy"),
        (59.9, "Healthy"),
        (60.0, "Unhealthy"),
        (149.9, "Unhealthy"),
        (150.0, "Healthy"),
        (400.0, "Healthy"),
    ],
    ids=["start", "just-before", "unhealthy", "still", "healthy-again", "later"],
)
def test_the_trainers_status_says_what_the_plugin_says_from_the_steps_second(
    t: float, health: str
) -> None:
    assert allocated_id(TRAINER) == SICK  # a whole GPU: its UUID is the device ID
    assert health_status(pod_at(TRAINER, t)) == {"trainer": said(health, TRAINER)}
    assert health_status(pod_at(SERVER, t)) == {"server": said("Healthy", SERVER)}


def test_the_agents_translator_reads_the_kubelets_word() -> None:
    sick = pod_record(
        from_json(Models(), pod_at(TRAINER, UNHEALTHY_S), "V1Pod"), node=NODE, ts_ms=1
    )
    assert sick.resource_health == (
        ResourceHealth("trainer", "nvidia.com/gpu", SICK, "Unhealthy"),
    )  # a device plugin gives no message


def test_the_unhealthy_gpu_leaves_the_nodes_allocatable_while_its_holder_keeps_it() -> None:
    def node_status(t: float) -> Value:
        (node,) = node_objects(SCENARIO, t)
        status: Value = node["status"]
        return status

    assert node_status(UNHEALTHY_S)["allocatable"]["nvidia.com/gpu"] == "1"
    assert node_status(UNHEALTHY_S)["capacity"]["nvidia.com/gpu"] == "2"
    assert node_status(HEALTHY_S)["allocatable"]["nvidia.com/gpu"] == "2"
    for t, listed in ((0.0, {SICK, WELL}), (UNHEALTHY_S, {WELL}), (HEALTHY_S, {SICK, WELL})):
        held, allocatable = kubelet_at(t)
        assert {d.device_id for d in allocatable} == listed
        assert {r.device_id for r in held} == {SICK, WELL}  # the trainer keeps its GPU


def test_a_node_without_the_gate_writes_no_device_health() -> None:
    for name in ("exclusive", "tenants", "efficiency"):
        scenario = load(name)
        for t in (0.0, 60.0):
            for pod in pod_objects(scenario, t, EPOCH_S):
                assert "containerStatuses" not in pod["status"], (name, pod["metadata"]["name"])


def test_device_health_is_checked_where_it_is_read() -> None:
    node = {"name": "n", "model": "L4", "gpus": 1}

    def with_health(entry: Value, **extra: Any) -> None:
        parse({"name": "x", "nodes": [{**node, **extra, "device_health": [entry]}]})

    with pytest.raises(ValueError, match="Healthy or Unhealthy"):
        with_health({"slot": "0", "steps": [[5, "Unknown"]]})
    with pytest.raises(ValueError, match="every replica on it"):
        with_health({"slot": "0::1", "steps": [[5, "Unhealthy"]]})
    with pytest.raises(ValueError, match="device plugin nodes"):
        with_health({"slot": "0", "steps": [[5, "Unhealthy"]]}, dra=True)


class Clock:
    t = 0.0


@contextlib.asynccontextmanager
async def serving(clock: Clock) -> AsyncIterator[aiohttp.ClientSession]:
    def objects() -> tuple[list[Value], list[Value]]:
        return pod_objects(SCENARIO, clock.t, EPOCH_S), node_objects(SCENARIO, clock.t)

    async with (
        ApiServerDouble(objects, tick_s=0.02, bookmark_s=0.2) as server,
        aiohttp.ClientSession(server.url) as http,
    ):
        yield http


async def next_change(resp: aiohttp.ClientResponse, timeout_s: float = 5.0) -> Value:
    """The watch's next event that is not a bookmark, each read bounded."""
    while True:
        line = await asyncio.wait_for(resp.content.readline(), timeout_s)
        assert line, "the stream ended"
        event: Value = json.loads(line)
        if event["type"] != "BOOKMARK":
            return event


async def test_the_api_server_double_sends_the_health_change_as_modified() -> None:
    clock = Clock()
    clock.t = 59.0
    async with serving(clock) as http:
        selector = {"fieldSelector": f"spec.nodeName={NODE}"}
        async with http.get("/api/v1/pods", params=selector) as resp:
            listed = await resp.json()
        (before,) = [p for p in listed["items"] if p["metadata"]["name"] == TRAINER]
        assert health_status(before) == {"trainer": said("Healthy", TRAINER)}
        params = {
            **selector,
            "watch": "1",
            "resourceVersion": listed["metadata"]["resourceVersion"],
        }
        async with http.get("/api/v1/pods", params={**params, "allowWatchBookmarks": "true"}) as w:
            clock.t = UNHEALTHY_S
            event = await next_change(w)
            assert (event["type"], event["object"]["metadata"]["name"]) == ("MODIFIED", TRAINER)
            assert health_status(event["object"]) == {"trainer": said("Unhealthy", TRAINER)}
            assert event["object"]["metadata"]["uid"] == before["metadata"]["uid"]
            clock.t = HEALTHY_S
            event = await next_change(w)
            assert (event["type"], event["object"]["metadata"]["name"]) == ("MODIFIED", TRAINER)
            assert health_status(event["object"]) == {"trainer": said("Healthy", TRAINER)}


# --- the story through the worker's core ---------------------------------------------------


@cache
def outputs() -> tuple[tuple[str, Value], ...]:
    _, lines = generate("sick-gpu")
    return tuple((doc["kind"], doc["value"]) for doc in map(orjson.loads, lines))


def alerts() -> list[Value]:
    return [v for k, v in outputs() if k == "Alert"]


def events(gpu: str, at_s: float | None = None) -> list[Value]:
    return [
        v
        for k, v in outputs()
        if k == "AttributionEvent" and v["gpu_uuid"] == gpu and (at_s is None or second(v) == at_s)
    ]


def second(value: Value) -> float:
    return float(value["ts_ms"]) / 1000 - EPOCH_S


def test_one_device_unhealthy_episode_for_the_trainer_and_nothing_else() -> None:
    assert [(a["kind"], a["status"], a["gpu_uuid"]) for a in alerts()] == [
        ("device-unhealthy", "firing", SICK),
        ("device-unhealthy", "resolved", SICK),
    ]
    firing, resolved = alerts()
    assert resolved["id"] == firing["id"]
    trainer_uid = pod_at(TRAINER, 0)["metadata"]["uid"]
    assert [(h["namespace"], h["pod"], h["uid"]) for h in firing["holders"]] == [
        ("ml", TRAINER, trainer_uid)
    ]
    assert f"uid {trainer_uid}" in firing["summary"]
    kubelet = [w for w in firing["figures"]["health"] if w["source"] == "kubelet"]
    assert [(w["state"], w["holder"]) for w in kubelet] == [("unhealthy", f"ml/{TRAINER}")]
    assert SICK in kubelet[0]["detail"]
    assert "healthy again" in resolved["summary"]
    # within one spine heartbeat of the kubelet's word: the exporter is down, no scrape comes
    assert UNHEALTHY_S <= second(firing) <= UNHEALTHY_S + HEARTBEAT_S
    assert HEALTHY_S <= second(resolved) <= HEALTHY_S + HEARTBEAT_S


def test_the_kubelet_speaks_while_the_exporter_is_down_and_usage_is_unknown() -> None:
    firing, resolved = alerts()
    for alert in (firing, resolved):
        (event,) = events(SICK, second(alert))
        assert second(event) > EXPORTER_DOWN_S
        assert event["telemetry"]["status"] == "unknown"
        assert event["telemetry"]["cause"] == "exporter-unreachable"
        assert event["usage"]["util_pct"] is None  # unknown, never 0
    (sick,) = events(SICK, second(firing))
    assert sick["health"]["verdict"] == "unhealthy"
    assert {w["source"]: w["state"] for w in sick["health"]["sources"]} == {
        "kubelet": "unhealthy",
        "allocatable": "unhealthy",  # GPU 0 left the node's allocatable list
        "dcgm": "unknown",
    }
    # GPU 1, the same unknown usage, the kubelet's Healthy throughout
    well = [e for e in events(WELL) if second(e) > EXPORTER_DOWN_S]
    assert well
    assert {e["telemetry"]["cause"] for e in well} == {"exporter-unreachable"}
    assert {e["health"]["verdict"] for e in events(WELL)} == {"healthy"}
