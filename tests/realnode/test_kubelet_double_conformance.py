"""The kubelet double (sim/kubelet_server.py) behaves like the real kubelet where the agent relies
on it — so the fast tests that use it test what a real node does.

One lifecycle, run against the real kubelet on the fake runtime and against the double driven
the way that kubelet behaved: pods with devices of every kind and without, a kubelet restart, a
pod deleted with a preStop hook, a container exiting under ``restartPolicy: Never``, a pod
deleted while the kubelet is down, the device plugin re-registering with replicas. At each step
the same wire-level checks pass on both (empty answers after a restart, pods without devices
listed, order changing between calls, ``Get`` of a finished pod, the rate limit, DRA devices
listed again after a restart and a new sandbox), and the agent's collector tells the same story
on both: the same sequence of published states.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import grpc
import pytest

from agents.podresources.collect import PodResourcesCollector
from agents.types import AgentRecord
from contract.inputs import AllocatableDevice, DeviceAssignment, PodResourcesSnapshot
from gpuattr.localkube.cluster import LocalCluster
from gpuattr.localkube.devices import Gpu, plugin_config, with_replicas
from gpuattr.localkube.node import DRA_DRIVER
from proto.podresources.v1 import api_pb2 as pb
from proto.podresources.v1 import api_pb2_grpc as pb_grpc
from sim.kubelet_server import KubeletDouble
from tests.helpers import wait_for, wait_for_async
from tests.kube_fixture import Rest
from tests.realnode.node import (
    AGENT_NS,
    AGENT_POD,
    agent_pod,
    claim_template,
    delete_namespace,
    fold,
    kubelet_list,
    namespace,
    pod,
    running,
)

NS = "rn-conform"
PRESTOP_S = 3
Story = tuple[frozenset[tuple[str, str, int]], frozenset[tuple[str, int]]]


class Kubelet(Protocol):
    """One side of the comparison: a socket, and the lifecycle's steps."""

    socket: Path
    layout: tuple[Gpu, ...]

    async def restart(self) -> None: ...
    async def delete_with_prestop(self, name: str) -> None: ...
    async def container_exits(self, name: str) -> None: ...
    async def delete_while_down(self, name: str) -> None: ...
    async def new_sandbox_after_restart(self, name: str) -> None: ...
    async def plugin_with_replicas(self, layout: tuple[Gpu, ...]) -> None: ...


# --- the real kubelet --------------------------------------------------------------------------


@dataclass
class Real:
    cluster: LocalCluster
    rest: Rest

    @property
    def socket(self) -> Path:
        return self.cluster.node.podresources_socket

    @property
    def layout(self) -> tuple[Gpu, ...]:
        return self.cluster.node.layout

    async def restart(self) -> None:
        await self.cluster.node.restart_kubelet()

    async def delete_with_prestop(self, name: str) -> None:
        await self.rest.delete(f"/api/v1/namespaces/{NS}/pods/{name}")

    async def container_exits(self, name: str) -> None:
        self.cluster.node.exit_container(NS, name, "main", 0)

    async def delete_while_down(self, name: str) -> None:
        self.cluster.node.stop_kubelet()
        await self.rest.delete(f"/api/v1/namespaces/{NS}/pods/{name}", grace_s=0)
        await self.cluster.node.restart_kubelet()

    async def new_sandbox_after_restart(self, name: str) -> None:
        await self.cluster.node.restart_kubelet()
        self.cluster.node.kill_sandbox(NS, name)

    async def plugin_with_replicas(self, layout: tuple[Gpu, ...]) -> None:
        await self.cluster.node.restart_device_plugin(layout)


# --- the double, driven as the real kubelet behaved ----------------------------------------------


@dataclass
class Double:
    """The double's state: rows per pod, pods without devices, the plugin's layout."""

    socket: Path
    layout: tuple[Gpu, ...]
    rows: dict[str, tuple[DeviceAssignment, ...]] = field(default_factory=dict)
    bare: set[tuple[str, str]] = field(default_factory=set)
    kubelet: KubeletDouble | None = None

    def state(self) -> tuple[tuple[DeviceAssignment, ...], tuple[AllocatableDevice, ...]]:
        rows = tuple(r for rs in self.rows.values() for r in rs)
        alloc = tuple(
            AllocatableDevice(res["name"], d["id"], (d["numa"],))
            for res in plugin_config(self.layout)["resources"]
            for d in res["devices"]
        )
        return rows, alloc

    def bare_pods(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(self.bare))

    def _k(self) -> KubeletDouble:
        assert self.kubelet is not None
        return self.kubelet

    async def restart(self) -> None:
        await self._k().restart()

    async def delete_with_prestop(self, name: str) -> None:
        # the kubelet runs the hook, then stops listing the pod
        loop = asyncio.get_running_loop()
        loop.call_later(PRESTOP_S, self.rows.pop, name, None)

    async def container_exits(self, name: str) -> None:
        self.rows.pop(name, None)  # Succeeded: no longer an active pod

    async def delete_while_down(self, name: str) -> None:
        await self._k().stop()
        self.rows.pop(name, None)
        await self._k().start(starting=True, pods_after_s=1.2, plugins_after_s=1.0)

    async def new_sandbox_after_restart(self, name: str) -> None:
        await self._k().restart()
        self._k().duplicate_dra()

    async def plugin_with_replicas(self, layout: tuple[Gpu, ...]) -> None:
        # the kubelet keeps the old plugin's devices until the new one lists its own: the
        # allocatable list goes from the old IDs to the new ones, never through nothing
        asyncio.get_running_loop().call_later(0.5, setattr, self, "layout", layout)


def double_rows(layout: tuple[Gpu, ...], node: str) -> dict[str, tuple[DeviceAssignment, ...]]:
    """What the real kubelet handed the lifecycle's pods, in the double's terms."""
    whole = [g for g in layout if not g.replicas and not g.migs]
    shared = next(g for g in layout if g.renamed)

    def row(p: str, resource: str, device_id: str, claim: str = "") -> DeviceAssignment:
        return DeviceAssignment(NS, p, "main", resource, device_id, claim)

    return {
        "stopping": (row("stopping", "nvidia.com/gpu", whole[0].uuid),),
        "victim": (row("victim", "nvidia.com/gpu", whole[1].uuid),),
        "job": (row("job", "nvidia.com/gpu.shared", f"{shared.uuid}::0"),),
        "claimed": (row("claimed", f"dra:{DRA_DRIVER}", f"{node}/gpu-0", f"{NS}/claimed-gpu"),),
    }


# --- the lifecycle -----------------------------------------------------------------------------


@dataclass
class Seen:
    out: list[AgentRecord] = field(default_factory=list)

    async def emit(self, record: AgentRecord) -> None:
        self.out.append(record)

    def holds(self, name: str) -> bool:
        """The last published state names a device of pod ``name``."""
        states = fold(self.out)
        return bool(states) and any(r.namespace == NS and r.pod == name for r in states[-1])

    async def published_gone(self, name: str) -> None:
        """Wait until the collector has published that ``name`` holds nothing (each step of
        the lifecycle is seen before the next one starts, however fast the kubelet is)."""
        await wait_for(
            lambda: not self.holds(name), timeout_s=60, every_s=0.1, what=f"{name} unpublished"
        )

    def story(self) -> list[Story]:
        """Each published state, without device IDs (the real kubelet picks them), deduplicated
        in order: (pod, resource, count) and (allocatable resource, count)."""
        stories: list[Story] = []
        alloc: frozenset[tuple[str, int]] = frozenset()
        for rec, state in zip(self.out, fold(self.out), strict=True):
            if isinstance(rec, PodResourcesSnapshot):
                alloc = frozenset(Counter(a.resource for a in rec.allocatable).items())
            held = Counter((r.pod, r.resource) for r in state if r.namespace == NS)
            story = (frozenset((p, res, n) for (p, res), n in held.items()), alloc)
            if not stories or stories[-1] != story:
                stories.append(story)
        return stories


@contextlib.asynccontextmanager
async def collecting(socket: Path, node: str) -> AsyncIterator[Seen]:
    seen = Seen()
    collector = PodResourcesCollector(
        node=node,
        socket_path=socket,
        poll_interval_s=0.2,
        snapshot_interval_s=3600,
        emit=seen.emit,
        now_ms=lambda: time.time_ns() // 1_000_000,
        own_pod=f"{AGENT_NS}/{AGENT_POD}",
    )
    task = asyncio.create_task(collector.run(), name="conformance-collector")
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def listed(socket: Path) -> dict[str, pb.PodResources]:
    reply = await kubelet_list(socket)
    return {p.name: p for p in reply.pod_resources if p.namespace in (NS, AGENT_NS)}


async def until_async(what: str, check: Callable[[], Awaitable[bool]]) -> None:
    async def safe() -> bool:
        try:
            return await check()
        except grpc.aio.AioRpcError:
            return False

    await wait_for_async(safe, timeout_s=90, every_s=0.2, what=what)


async def check_wire(k: Kubelet) -> None:
    """What the agent relies on, at the lifecycle's start (pods running)."""
    pods = await listed(k.socket)
    cpu = pods["cpu-only"]
    assert [c.name for c in cpu.containers] == ["main"], "pods without devices are listed"
    assert not cpu.containers[0].devices
    assert AGENT_POD in pods
    orders = set()
    for _ in range(20):
        orders.add((await kubelet_list(k.socket)).SerializeToString())
        await asyncio.sleep(0.1)
    assert len(orders) > 1, "the order changes from one call to the next"
    async with grpc.aio.insecure_channel(f"unix://{k.socket}") as channel:
        stub = pb_grpc.PodResourcesListerStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Get(pb.GetPodResourcesRequest(pod_name="nobody", pod_namespace=NS))
        assert err.value.code() == grpc.StatusCode.UNKNOWN
        assert err.value.details() == f"pod nobody in namespace {NS} not found"
        await asyncio.sleep(0.2)  # the rate limiter's bucket refills (10 tokens at 100/s)
        calls = [stub.List(pb.ListPodResourcesRequest()) for _ in range(30)]
        results = await asyncio.gather(*calls, return_exceptions=True)
    refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert refused, "30 calls at once exceed the burst of 10"
    assert {(e.code(), e.details()) for e in refused} == {
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")
    }


async def check_restart(k: Kubelet) -> None:
    """Right after a restart: an empty answer, no error; then the pods again."""
    await k.restart()
    answers: list[int] = []

    async def back() -> bool:
        reply = await kubelet_list(k.socket)
        answers.append(len(reply.pod_resources))
        return bool(reply.pod_resources)

    await until_async("the pods listed again", back)
    assert answers[0] == 0, f"the first answer after a restart names no pod: {answers}"


async def lifecycle(k: Kubelet, node: str) -> list[Story]:
    async with collecting(k.socket, node) as seen:
        await wait_for(lambda: seen.out, timeout_s=30, what="the first snapshot")
        await check_wire(k)
        await check_restart(k)

        await k.delete_with_prestop("stopping")
        await until_async("stopping gone", lambda: _gone(k, "stopping"))
        await seen.published_gone("stopping")
        await k.container_exits("job")
        await until_async("job gone", lambda: _gone(k, "job"))
        await seen.published_gone("job")
        await k.delete_while_down("victim")
        await until_async("victim gone, the others back", lambda: _only_victim_gone(k))
        await seen.published_gone("victim")

        await k.new_sandbox_after_restart("claimed")

        async def twice() -> bool:
            claimed = (await listed(k.socket)).get("claimed")
            claims = claimed.containers[0].dynamic_resources if claimed else []
            return bool(claims) and len(claims[0].claim_resources) > 1

        await until_async("the claim's device listed twice", twice)
        devices = {
            r.device_name
            for r in (await listed(k.socket))["claimed"]
            .containers[0]
            .dynamic_resources[0]
            .claim_resources
        }
        assert len(devices) == 1, "the same device again"

        free = k.layout[1]  # a whole GPU; its pod (victim) is gone
        await k.plugin_with_replicas(with_replicas(k.layout, free.index, 4, renamed=False))

        def replicas_published() -> bool:
            snaps = [r for r in seen.out if isinstance(r, PodResourcesSnapshot)]
            return bool(snaps) and any(
                "::" in a.device_id
                and a.resource == "nvidia.com/gpu"
                and a.device_id.startswith(free.uuid)
                for a in snaps[-1].allocatable
            )

        await wait_for(replicas_published, timeout_s=60, what="the new allocatable list")
        return seen.story()


async def _gone(k: Kubelet, name: str) -> bool:
    return name not in await listed(k.socket)


async def _only_victim_gone(k: Kubelet) -> bool:
    pods = await listed(k.socket)
    return "victim" not in pods and "claimed" in pods and AGENT_POD in pods


async def test_the_double_and_the_kubelet_tell_the_same_story(
    real_node: LocalCluster, tmp_path: Path
) -> None:
    rest = Rest.admin(real_node.kube)
    await agent_pod(rest)
    original = real_node.node.layout
    await namespace(rest, NS)
    base = f"/api/v1/namespaces/{NS}"
    try:
        await rest.create(
            f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaimtemplates",
            claim_template("one-gpu"),
        )
        for p in (
            pod("stopping", resource="nvidia.com/gpu", prestop_s=PRESTOP_S),
            pod("victim", resource="nvidia.com/gpu"),
            pod("job", resource="nvidia.com/gpu.shared", restart_policy="Never"),
            pod("claimed", claim_template="one-gpu"),
            pod("cpu-only"),
        ):
            await rest.create(f"{base}/pods", p)
        await running(rest, NS, ["stopping", "victim", "job", "claimed", "cpu-only"])
        real = await lifecycle(Real(real_node, rest), real_node.node_name)
    finally:
        await delete_namespace(rest, NS)
        await real_node.node.restart_device_plugin(original)
        await real_node.node.settled()

    double = Double(tmp_path / "kubelet.sock", original)
    double.rows = double_rows(original, real_node.node_name)
    double.bare = {(NS, "cpu-only"), (AGENT_NS, AGENT_POD)}
    async with KubeletDouble(double.socket, double.state, bare_pods=double.bare_pods) as kubelet:
        double.kubelet = kubelet
        simulated = await lifecycle(double, real_node.node_name)
    assert simulated == real
    assert len(real) >= 5, real  # start, three pods leaving, the new allocatable list
