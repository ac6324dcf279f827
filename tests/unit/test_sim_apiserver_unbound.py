"""The API-server double serves pods the scheduler has not bound, cluster-wide, over real HTTP:
list and watch ``/api/v1/pods?fieldSelector=spec.nodeName%3D`` with resourceVersions and
bookmarks; a pod created pending is ADDED there, and when it is bound it leaves that selection
(DELETED, its previous content at the new resourceVersion) and is ADDED on its node's watch; one
pod by name tells where it went."""

from __future__ import annotations

import asyncio
import contextlib
import json
import tomllib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from sim.apiserver import ApiServerDouble
from sim.kube_objects import node_objects, pod_objects
from sim.scenario import parse

SCENARIO = parse(
    tomllib.loads(
        """
name = "t"
[[nodes]]
name = "gpu-a"
model = "NVIDIA A100-SXM4-80GB"
gpus = 1
labels = { "nvidia.com/gpu.product" = "NVIDIA-A100-SXM4-80GB" }
[[pods]]
namespace = "research"
name = "notebook-0"
node = "gpu-a"
slots = ["0"]
stop_s = 20
[[pods]]
namespace = "inference"
name = "serve-5d8f7c9b6-x7k2p"
workload = "Deployment/serve"
pending_s = 10
start_s = 20
node = "gpu-a"
slots = ["0"]
[[pods]]
namespace = "chat"
name = "chat-6c8d9f7b5-z7x4c"
workload = "Deployment/chat"
pending_s = 10
requests = { "nvidia.com/gpu" = 2 }
"""
    )
)
UNBOUND = "spec.nodeName="
Event = dict[str, Any]


class Clock:
    t = 0.0


@contextlib.asynccontextmanager
async def serving(clock: Clock) -> AsyncIterator[tuple[ApiServerDouble, aiohttp.ClientSession]]:
    def objects() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return pod_objects(SCENARIO, clock.t, 0), node_objects(SCENARIO, clock.t)

    async with (
        ApiServerDouble(objects, tick_s=0.02, bookmark_s=0.2) as server,
        aiohttp.ClientSession(server.url) as http,
    ):
        yield server, http


async def list_pods(http: aiohttp.ClientSession, selector: str) -> dict[str, Any]:
    async with http.get("/api/v1/pods", params={"fieldSelector": selector}) as resp:
        assert resp.status == 200
        body: dict[str, Any] = await resp.json()
        return body


class Watch:
    """A watch stream read line by line, each read bounded."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp

    async def next(self, timeout_s: float = 5.0) -> Event:
        line = await asyncio.wait_for(self.resp.content.readline(), timeout_s)
        assert line, "the stream ended"
        event: Event = json.loads(line)
        return event

    async def next_change(self, timeout_s: float = 5.0) -> Event:
        """The next event that is not a bookmark."""
        while (event := await self.next(timeout_s))["type"] == "BOOKMARK":
            pass
        return event


@contextlib.asynccontextmanager
async def watching(http: aiohttp.ClientSession, selector: str, rv: str) -> AsyncIterator[Watch]:
    params = {
        "watch": "1",
        "fieldSelector": selector,
        "resourceVersion": rv,
        "allowWatchBookmarks": "true",
    }
    async with http.get("/api/v1/pods", params=params) as resp:
        assert resp.status == 200
        yield Watch(resp)


def names(items: list[dict[str, Any]]) -> set[str]:
    return {o["metadata"]["name"] for o in items}


async def test_the_list_of_unbound_pods_is_cluster_wide_and_honours_the_selector() -> None:
    clock = Clock()
    clock.t = 12
    async with serving(clock) as (server, http):
        server.sync()
        unbound = await list_pods(http, UNBOUND)
        assert unbound["kind"] == "PodList"
        assert int(unbound["metadata"]["resourceVersion"]) == server.rv
        assert names(unbound["items"]) == {"serve-5d8f7c9b6-x7k2p", "chat-6c8d9f7b5-z7x4c"}
        for pod in unbound["items"]:
            assert "nodeName" not in pod["spec"]
            (cond,) = pod["status"]["conditions"]
            assert (cond["type"], cond["status"], cond["reason"]) == (
                "PodScheduled",
                "False",
                "Unschedulable",
            )
            assert cond["message"].startswith("0/1 nodes are available: 1 Insufficient")
        # the same selector, encoded as a client sends it, and with == and !=
        async with http.get("/api/v1/pods?fieldSelector=spec.nodeName%3D") as resp:
            assert names((await resp.json())["items"]) == names(unbound["items"])
        assert names((await list_pods(http, "spec.nodeName=="))["items"]) == names(unbound["items"])
        assert names((await list_pods(http, "spec.nodeName!="))["items"]) == {"notebook-0"}
        assert names((await list_pods(http, "spec.nodeName=gpu-a"))["items"]) == {"notebook-0"}
        both = "spec.nodeName=,metadata.namespace=chat"
        assert names((await list_pods(http, both))["items"]) == {"chat-6c8d9f7b5-z7x4c"}


async def test_a_pod_created_pending_then_bound_is_seen_by_both_watches() -> None:
    clock = Clock()
    async with serving(clock) as (server, http):
        server.sync()
        listed = await list_pods(http, UNBOUND)
        assert listed["items"] == []
        rv = listed["metadata"]["resourceVersion"]
        async with (
            watching(http, UNBOUND, rv) as unbound,
            watching(http, "spec.nodeName=gpu-a", rv) as on_node,
        ):
            clock.t = 12  # two pods created, waiting
            added = [await unbound.next_change(), await unbound.next_change()]
            assert {e["type"] for e in added} == {"ADDED"}
            assert names([e["object"] for e in added]) == {
                "serve-5d8f7c9b6-x7k2p",
                "chat-6c8d9f7b5-z7x4c",
            }
            waiting = next(e["object"] for e in added if e["object"]["metadata"]["name"][0] == "s")

            clock.t = 21  # the notebook is gone; serve is bound to gpu-a
            left = await unbound.next_change()
            assert left["type"] == "DELETED"
            assert left["object"]["metadata"]["name"] == "serve-5d8f7c9b6-x7k2p"
            assert "nodeName" not in left["object"]["spec"]  # its previous content
            assert left["object"]["metadata"]["uid"] == waiting["metadata"]["uid"]
            assert int(left["object"]["metadata"]["resourceVersion"]) > int(
                waiting["metadata"]["resourceVersion"]
            )
            seen = [await on_node.next_change() for _ in range(3)]
            by_type = [(e["type"], e["object"]["metadata"]["name"]) for e in seen]
            assert ("ADDED", "serve-5d8f7c9b6-x7k2p") in by_type
            assert ("DELETED", "notebook-0") in by_type
            arrived = next(e["object"] for e in seen if e["type"] == "ADDED")
            assert arrived["spec"]["nodeName"] == "gpu-a"
            assert (
                arrived["metadata"]["resourceVersion"]
                == left["object"]["metadata"]["resourceVersion"]
            )  # one change, seen by both

            # where did it go: read the pod
            async with http.get("/api/v1/namespaces/inference/pods/serve-5d8f7c9b6-x7k2p") as r:
                assert r.status == 200
                pod = await r.json()
            assert pod["spec"]["nodeName"] == "gpu-a"
            assert pod["status"]["conditions"][0]["status"] == "True"

            # quiet: bookmarks carry the latest resourceVersion and nothing else
            mark = await unbound.next()
            while mark["type"] != "BOOKMARK":
                mark = await unbound.next()
            assert mark["object"]["kind"] == "Pod"
            assert mark["object"]["metadata"] == {"resourceVersion": str(server.rv)}
        assert names((await list_pods(http, UNBOUND))["items"]) == {"chat-6c8d9f7b5-z7x4c"}


async def test_a_watch_from_before_a_binding_replays_it() -> None:
    """A watcher that resumes from an older resourceVersion sees the pod come and go."""
    clock = Clock()
    clock.t = 12
    async with serving(clock) as (server, http):
        server.sync()
        rv = (await list_pods(http, UNBOUND))["metadata"]["resourceVersion"]
        clock.t = 21
        server.sync()
        async with watching(http, UNBOUND, rv) as unbound:
            event = await unbound.next_change()
        assert (event["type"], event["object"]["metadata"]["name"]) == (
            "DELETED",
            "serve-5d8f7c9b6-x7k2p",
        )


async def test_an_unknown_pod_is_not_found() -> None:
    async with serving(Clock()) as (_, http):
        async with http.get("/api/v1/namespaces/inference/pods/nobody") as resp:
            assert resp.status == 404
            body = await resp.json()
        assert (body["kind"], body["reason"], body["code"]) == ("Status", "NotFound", 404)


async def test_a_namespaced_list_by_name_finds_one_pod_of_that_namespace_only() -> None:
    """How the pending-pod watcher learns where a pod that left the unbound selection went:
    ``/api/v1/namespaces/{ns}/pods?fieldSelector=metadata.name=<name>``."""
    clock = Clock()
    clock.t = 12.0  # serve is pending (from 10 s), notebook-0 runs
    async with serving(clock) as (_, http):
        path = "/api/v1/namespaces/inference/pods"
        by_name = {"fieldSelector": "metadata.name=serve-5d8f7c9b6-x7k2p"}
        async with http.get(path, params=by_name) as resp:
            assert resp.status == 200
            body = await resp.json()
        assert names(body["items"]) == {"serve-5d8f7c9b6-x7k2p"}
        elsewhere = {"fieldSelector": "metadata.name=notebook-0"}  # in research, not inference
        async with http.get(path, params=elsewhere) as resp:
            assert (await resp.json())["items"] == []
        async with http.get(path) as resp:
            assert {o["metadata"]["namespace"] for o in (await resp.json())["items"]} == {
                "inference"
            }
