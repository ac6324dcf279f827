"""The agent's PodResources collector against the real kubelet's socket.

Pods go through the API server and the real scheduler; the kubelet's device manager asks our
device plugin, the DRA example driver prepares claims. The collector publishes to a list here
(Kafka is in test_pipeline_real.py); what a consumer folding its records believes must equal
what the kubelet itself lists — through kubelet restarts, a plugin re-registering with
replicas, and the pod lifecycle, at the times the kubelet reports each change.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from prometheus_client import REGISTRY

from agents.podresources.collect import PodResourcesCollector
from agents.types import AgentRecord
from contract.inputs import DeviceAssignment, PodResourcesDiff, PodResourcesSnapshot
from gpuattr.localkube.cluster import LocalCluster
from gpuattr.localkube.devices import plugin_config, with_replicas
from proto.podresources.v1 import api_pb2 as pb
from proto.podresources.v1 import api_pb2_grpc as pb_grpc
from tests.helpers import wait_for, wait_for_async
from tests.kube_fixture import Rest
from tests.realnode.node import (
    agent_pod,
    delete_namespace,
    fold,
    kubelet_list,
    kubelet_rows,
    namespace,
    pod,
    running,
    workload,
)

POLL_S = 0.2


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Collected:
    out: list[AgentRecord] = field(default_factory=list)
    at_ms: list[int] = field(default_factory=list)

    async def emit(self, record: AgentRecord) -> None:
        self.out.append(record)
        self.at_ms.append(now_ms())

    def belief(self) -> frozenset[DeviceAssignment]:
        states = fold(self.out)
        return states[-1] if states else frozenset()

    def snapshots(self) -> list[PodResourcesSnapshot]:
        return [r for r in self.out if isinstance(r, PodResourcesSnapshot)]


@contextlib.asynccontextmanager
async def collecting(cluster: LocalCluster, own_pod: str) -> AsyncIterator[Collected]:
    seen = Collected()
    collector = PodResourcesCollector(
        node=cluster.node_name,
        socket_path=cluster.node.podresources_socket,
        poll_interval_s=POLL_S,
        snapshot_interval_s=3600,
        emit=seen.emit,
        now_ms=now_ms,
        own_pod=own_pod,
    )
    task = asyncio.create_task(collector.run(), name="podresources-real")
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def held(reason: str) -> float:
    labels = {"reason": reason}
    return REGISTRY.get_sample_value("gpuattr_agent_kubelet_answers_held_total", labels) or 0.0


async def agrees(seen: Collected, cluster: LocalCluster) -> bool:
    return seen.belief() == await kubelet_rows(cluster.node.podresources_socket)


async def test_the_collector_publishes_what_the_kubelet_lists(real_node: LocalCluster) -> None:
    rest = Rest.admin(real_node.kube)
    own = await agent_pod(rest)
    sock = real_node.node.podresources_socket
    async with workload(rest, "rn-list"), collecting(real_node, own) as seen:
        await wait_for_async(
            lambda: agrees(seen, real_node), timeout_s=20, every_s=0.2, what="agreement"
        )
        rows = seen.belief()
        assert {r.pod for r in rows if r.namespace == "rn-list"} == {
            "train",
            "batch",
            "notebook",
            "infer",
            "mig",
            "claimed",
            "shared-a",
            "shared-b",
        }
        notebook = [r for r in rows if r.pod == "notebook"]
        assert len(notebook) == 2
        assert all("::" in r.device_id for r in notebook)
        shared = {r.device_id for r in rows if r.pod.startswith("shared-")}
        assert len(shared) == 1, "one claim, one device, two holders"
        # the allocatable list is the plugin's, every ID of it
        advertised = {
            (res["name"], d["id"])
            for res in plugin_config(real_node.node.layout)["resources"]
            for d in res["devices"]
        }
        assert {(a.resource, a.device_id) for a in seen.snapshots()[-1].allocatable} == advertised

        # the kubelet lists pods and replicas in another order from one call to the next; that
        # changes nothing we publish
        published = len(seen.out)
        orders = set()
        for _ in range(20):  # paced: the kubelet allows 100 calls/s with a burst of 10
            orders.add((await kubelet_list(sock)).SerializeToString())
            await asyncio.sleep(0.1)
        assert len(orders) > 1, "the kubelet answered in one order only: nothing was tested"
        assert len(seen.out) == published
        assert not [r for r in seen.out[published:] if isinstance(r, PodResourcesDiff)]


@dataclass
class Probe:
    """The kubelet's raw ``List``, read every 0.1 s: when each pod was last seen listed, and
    whether an answer naming no pod at all came (a kubelet that has just started)."""

    socket: Path
    last_seen_ms: dict[str, int] = field(default_factory=dict)
    empty_answers: int = 0

    async def run(self) -> None:
        while True:
            with contextlib.suppress(grpc.aio.AioRpcError):
                reply = await kubelet_list(self.socket)
                at = now_ms()
                if not reply.pod_resources:
                    self.empty_answers += 1
                for p in reply.pod_resources:
                    self.last_seen_ms[f"{p.namespace}/{p.name}"] = at
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def probing(cluster: LocalCluster) -> AsyncIterator[Probe]:
    probe = Probe(cluster.node.podresources_socket)
    task = asyncio.create_task(probe.run(), name="kubelet-probe")
    try:
        yield probe
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def removed_at(seen: Collected, ns: str, name: str) -> int:
    """When the records first stopped naming the pod (wall ms of that record's emit)."""
    before = False
    for state, at in zip(fold(seen.out), seen.at_ms, strict=True):
        now = f"{ns}/{name}" in names(state)
        if before and not now:
            return at
        before = now
    raise AssertionError(f"{ns}/{name} never left the records")


def names(rows: frozenset[DeviceAssignment]) -> set[str]:
    return {f"{r.namespace}/{r.pod}" for r in rows}


async def test_kubelet_restarts_change_no_holder(real_node: LocalCluster) -> None:
    rest = Rest.admin(real_node.kube)
    own = await agent_pod(rest)
    empty_held = held("no_pod_listed") + held("own_pod_not_listed")
    async with (
        workload(rest, "rn-restart"),
        collecting(real_node, own) as seen,
        probing(real_node) as probe,
    ):
        await wait_for_async(
            lambda: agrees(seen, real_node), timeout_s=20, every_s=0.2, what="agreement"
        )
        steady, first = seen.belief(), len(seen.out)
        for n in range(3):
            snapshots = len(seen.snapshots())
            await real_node.node.restart_kubelet()
            await wait_for(
                lambda: len(seen.snapshots()) > snapshots,  # noqa: B023
                timeout_s=60,
                what=f"a snapshot after restart {n + 1}",
            )
        assert probe.empty_answers > 0, "the kubelet never answered empty: nothing was tested"
        states = fold(seen.out)[first:]
        assert states, "no record after the restarts"
        assert all(s == steady for s in states), "a holder changed while the kubelet restarted"
        assert held("no_pod_listed") + held("own_pod_not_listed") > empty_held


async def test_holders_follow_the_kubelets_termination(real_node: LocalCluster) -> None:
    """preStop: listed as long as the kubelet runs it; a container exiting under restartPolicy
    Never: gone when the kubelet sees it exit — never before the kubelet says so."""
    rest = Rest.admin(real_node.kube)
    own = await agent_pod(rest)
    ns = "rn-life"
    await namespace(rest, ns)
    try:
        base = f"/api/v1/namespaces/{ns}/pods"
        await rest.create(base, pod("stopping", resource="nvidia.com/gpu", prestop_s=5))
        await rest.create(
            base, pod("job", resource="nvidia.com/gpu.shared", restart_policy="Never")
        )
        await running(rest, ns, ["stopping", "job"])
        async with collecting(real_node, own) as seen, probing(real_node) as probe:
            await wait_for(
                lambda: {f"{ns}/stopping", f"{ns}/job"} <= names(seen.belief()),
                timeout_s=20,
                what="both pods published",
            )
            deleted = now_ms()
            await rest.delete(f"{base}/stopping")
            await wait_for(
                lambda: f"{ns}/stopping" not in names(seen.belief()), timeout_s=60, what="gone"
            )
            gone = removed_at(seen, ns, "stopping")
            last = probe.last_seen_ms[f"{ns}/stopping"]
            assert last - deleted >= 4_000, "the preStop hook kept it listed"
            assert last <= gone <= last + 2_000, "removed when the kubelet stopped listing it"

            real_node.node.exit_container(ns, "job", "main", 0)
            await wait_for(
                lambda: f"{ns}/job" not in names(seen.belief()), timeout_s=60, what="job gone"
            )
            gone = removed_at(seen, ns, "job")
            last = probe.last_seen_ms[f"{ns}/job"]
            assert last <= gone <= last + 2_000
            job = await rest.get(f"{base}/job")
            assert job["status"]["phase"] == "Succeeded"
            # and the kubelet's Get says what it says of a finished pod
            async with grpc.aio.insecure_channel(f"unix://{probe.socket}") as channel:
                stub = pb_grpc.PodResourcesListerStub(channel)
                request = pb.GetPodResourcesRequest(pod_name="job", pod_namespace=ns)
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.Get(request, timeout=5)
            assert "not found" in (err.value.details() or "")
    finally:
        await delete_namespace(rest, ns)


async def test_a_pod_deleted_while_the_kubelet_is_down(real_node: LocalCluster) -> None:
    rest = Rest.admin(real_node.kube)
    own = await agent_pod(rest)
    ns = "rn-down"
    await namespace(rest, ns)
    try:
        base = f"/api/v1/namespaces/{ns}/pods"
        await rest.create(base, pod("victim", resource="nvidia.com/gpu"))
        await rest.create(base, pod("stays", resource="nvidia.com/mig-1g.10gb"))
        await running(rest, ns, ["victim", "stays"])
        async with collecting(real_node, own) as seen:
            await wait_for_async(
                lambda: agrees(seen, real_node), timeout_s=20, every_s=0.2, what="agreement"
            )
            first = len(seen.out)
            real_node.node.stop_kubelet()
            await rest.delete(f"{base}/victim", grace_s=0)
            await real_node.node.restart_kubelet()
            await wait_for(
                lambda: f"{ns}/victim" not in names(seen.belief()), timeout_s=60, what="removed"
            )
            await wait_for_async(
                lambda: agrees(seen, real_node), timeout_s=20, every_s=0.2, what="agreement"
            )
            after = fold(seen.out)[first:]
            assert all(f"{ns}/stays" in names(s) for s in after), "the other pod never left"
            assert f"{ns}/victim" not in names(
                await kubelet_rows(real_node.node.podresources_socket)
            )
    finally:
        await delete_namespace(rest, ns)


async def test_a_device_plugin_re_registering_with_replicas(real_node: LocalCluster) -> None:
    rest = Rest.admin(real_node.kube)
    own = await agent_pod(rest)
    ns = "rn-plugin"
    original = real_node.node.layout
    await namespace(rest, ns)
    try:
        base = f"/api/v1/namespaces/{ns}/pods"
        await rest.create(base, pod("whole", resource="nvidia.com/gpu"))
        await rest.create(base, pod("tenant", resource="nvidia.com/gpu.shared"))
        await running(rest, ns, ["whole", "tenant"])
        async with collecting(real_node, own) as seen:
            await wait_for_async(
                lambda: agrees(seen, real_node), timeout_s=20, every_s=0.2, what="agreement"
            )
            held_ids = {r.device_id for r in seen.belief()}
            free = next(
                g for g in original if not g.replicas and not g.migs and g.uuid not in held_ids
            )
            first, steady = len(seen.out), seen.belief()
            layout = with_replicas(original, free.index, 4, renamed=False)
            await real_node.node.restart_device_plugin(layout)
            advertised = {
                (res["name"], d["id"])
                for res in plugin_config(layout)["resources"]
                for d in res["devices"]
            }

            def new_allocatable() -> bool:
                snaps = seen.snapshots()
                return (
                    bool(snaps)
                    and {(a.resource, a.device_id) for a in snaps[-1].allocatable} == advertised
                )

            await wait_for(new_allocatable, timeout_s=60, what="the new allocatable list")
            assert all(s == steady for s in fold(seen.out)[first:])
            await rest.create(base, pod("replica", resource="nvidia.com/gpu", count=2))
            await running(rest, ns, ["replica"])
            await wait_for_async(
                lambda: agrees(seen, real_node), timeout_s=20, every_s=0.2, what="agreement"
            )
    finally:
        await delete_namespace(rest, ns)
        await real_node.node.restart_device_plugin(original)
        await real_node.node.settled()  # the node as the next test expects it
