"""What the real-server tests need around the API server: objects, a kubelet's hand, our watchers.

There is no kubelet or controller manager: the tests create what they would (pods bound to a node
with ``spec.nodeName``, their status through the status subresource, ReplicaSets and Jobs with
ownerReferences) and run the agent's own pod and node watchers against the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.kube.watch import (
    NodeWatcher,
    PodWatcher,
    ResourceClaimWatcher,
    ResourceSliceWatcher,
    make_api_client,
)
from agents.types import AgentRecord
from contract.inputs import NodeRecord, PodListSnapshot, PodRecord
from infra.settings import KubeSettings
from tests.kube_fixture import Rest

NOW = time.time


def now_ms() -> int:
    return int(time.time() * 1000)


def gpu_pod(
    name: str,
    node: str,
    *,
    gpus: int = 1,
    resource: str = "nvidia.com/gpu",
    owner: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    limits = {resource: str(gpus)} if gpus else {}
    meta: dict[str, Any] = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "resources": {"limits": limits},
                }
            ],
        },
    }


def pod_template(restart_policy: str) -> dict[str, Any]:
    """A controller's pod template spec (no node: the scheduler would choose one)."""
    spec = dict(gpu_pod("template", "")["spec"])
    del spec["nodeName"]
    return spec | {"restartPolicy": restart_policy}


def owner_ref(obj: dict[str, Any]) -> dict[str, Any]:
    """A controller ownerReference to a created object (its real UID)."""
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def node_object(name: str, labels: dict[str, str], gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {**labels, "kubernetes.io/hostname": name}},
    }


async def create_node(rest: Rest, name: str, labels: dict[str, str], gpus: int) -> None:
    """A Node and its status (capacity, allocatable), as a kubelet registers one."""
    await rest.create("/api/v1/nodes", node_object(name, labels, gpus))
    amounts = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    await rest.merge_patch(
        f"/api/v1/nodes/{name}/status", {"status": {"capacity": amounts, "allocatable": amounts}}
    )


async def set_running(rest: Rest, ns: str, name: str) -> dict[str, Any]:
    """What the kubelet writes once the containers run: phase and container states."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return await rest.merge_patch(
        f"/api/v1/namespaces/{ns}/pods/{name}/status",
        {
            "status": {
                "phase": "Running",
                "startTime": started,
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": True,
                        "restartCount": 0,
                        "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                        "imageID": "",
                        "state": {"running": {"startedAt": started}},
                    }
                ],
            }
        },
    )


@dataclass
class Watching:
    """The agent's pod and node watchers for one node, and every record they emitted."""

    node: str
    out: list[AgentRecord] = field(default_factory=list)
    pods_watcher: PodWatcher | None = None
    node_watcher: NodeWatcher | None = None

    def pod_records(self) -> list[PodRecord]:
        return [r for r in self.out if isinstance(r, PodRecord)]

    def node_records(self) -> list[NodeRecord]:
        return [r for r in self.out if isinstance(r, NodeRecord)]

    def listings(self) -> list[PodListSnapshot]:
        return [r for r in self.out if isinstance(r, PodListSnapshot)]

    def believed(self) -> dict[str, str]:
        """uid → ns/name of the pods a consumer folding the records believes exist."""
        state: dict[str, tuple[str, bool]] = {}
        for rec in self.out:
            if isinstance(rec, PodListSnapshot):
                state = {u: v for u, v in state.items() if u in rec.uids}
            elif isinstance(rec, PodRecord):
                state[rec.uid] = (f"{rec.namespace}/{rec.name}", rec.deleted)
        return {uid: name for uid, (name, deleted) in state.items() if not deleted}


WatcherKind = type[PodWatcher | NodeWatcher | ResourceSliceWatcher | ResourceClaimWatcher]


@contextlib.asynccontextmanager
async def running(
    node: str,
    kubeconfig: Path,
    kinds: tuple[WatcherKind, ...],
    emit: Callable[[AgentRecord], Awaitable[None]],
    *,
    watch_timeout_s: int = 300,
) -> AsyncIterator[list[Any]]:
    """Run the agent's own watchers of ``kinds`` for ``node`` with a kubeconfig (the admin's or
    a ServiceAccount's); yields them."""
    settings = KubeSettings(
        kubeconfig=kubeconfig, watch_timeout_s=watch_timeout_s, max_backoff_s=0.5
    )
    api = await make_api_client(settings)
    watchers = [
        kind(node=node, api=api, emit=emit, now_ms=now_ms, settings=settings) for kind in kinds
    ]
    tasks = [asyncio.create_task(w.run(), name=f"{w.kind}-watch-{node}") for w in watchers]
    try:
        yield watchers
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await api.close()


@contextlib.asynccontextmanager
async def watching(
    node: str, kubeconfig: Path, *, watch_timeout_s: int = 300
) -> AsyncIterator[Watching]:
    """The agent's pod and node watchers for ``node``, and what they emitted."""
    seen = Watching(node)

    async def emit(rec: AgentRecord) -> None:
        seen.out.append(rec)

    kinds = (PodWatcher, NodeWatcher)
    async with running(node, kubeconfig, kinds, emit, watch_timeout_s=watch_timeout_s) as ws:
        seen.pods_watcher, seen.node_watcher = ws
        yield seen
