"""A real kube-scheduler on a real API server, without a kubelet: Node objects carry GPUs in
``status.capacity``/``allocatable`` (written through the status subresource, as a device
plugin's kubelet would), and the scheduler binds what fits and marks the rest Unschedulable with
its own words. Plus the cluster role's pending-pod watcher, run in-process, and what it published.

The scheduler runs against an API server of its own (this module's), so the GPU nodes the other
real-server tests create never take its pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agents.kube.pendingwatch import PendingPodWatcher
from agents.kube.watch import make_api_client
from contract.inputs import PendingPod, PendingPodList
from gpuattr.localkafka import default_cache_dir
from gpuattr.localkube import LocalKube
from gpuattr.localkube.binaries import resolve_node_binaries
from gpuattr.localkube.process import HOST, Proc, spawn
from infra.settings import KubeSettings
from tests.kube_fixture import Rest

SCHEDULER = "system:kube-scheduler"


@dataclass
class Scheduled:
    """An API server (and etcd) with kube-scheduler bound to it."""

    kube: LocalKube
    scheduler: Proc


@pytest.fixture(scope="module")
def scheduled_kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scheduled]:
    work = tmp_path_factory.mktemp("sched")
    kube = LocalKube(work / "control-plane", default_cache_dir(), users={SCHEDULER: ()})
    asyncio.run(kube.start())
    proc: Proc | None = None
    try:
        bins = resolve_node_binaries(default_cache_dir())
        config = kube.write_kubeconfig(
            work / "scheduler.kubeconfig", token=kube.tokens[SCHEDULER], user=SCHEDULER
        )
        proc = spawn(
            "kube-scheduler",
            [
                str(bins / "kube-scheduler"),
                f"--kubeconfig={config}",
                f"--bind-address={HOST}",
                "--secure-port=0",
                "--leader-elect=false",
                "--v=1",
            ],
            work / "kube-scheduler.log",
        )
        yield Scheduled(kube, proc)
    finally:
        if proc is not None:
            proc.stop(15.0)
        kube.stop_sync()


async def gpu_node(
    rest: Rest, name: str, resources: dict[str, int], labels: dict[str, str]
) -> None:
    """A Node with GPUs, Ready, untainted: capacity and conditions through ``/status``."""
    await rest.create(
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {**labels, "kubernetes.io/hostname": name}},
        },
    )
    amounts = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    amounts |= {k: str(v) for k, v in resources.items()}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    await rest.merge_patch(
        f"/api/v1/nodes/{name}/status",
        {"status": {"capacity": amounts, "allocatable": amounts, "conditions": [ready]}},
    )
    # the API server taints a new node not-ready (admission); with no node lifecycle controller
    # here to lift it once the node is Ready, lift it as that controller would
    await rest.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"taints": []}})


def waiting_pod(
    name: str,
    limits: dict[str, int],
    selector: dict[str, str],
    *,
    replica_set: str = "",
) -> dict[str, Any]:
    """A pod for the scheduler to place (no ``nodeName``); GPUs as limits only, as people write
    them; a ReplicaSet's replica when ``replica_set`` is named (``<deployment>-<hash>``)."""
    meta: dict[str, Any] = {"name": name}
    if replica_set:
        meta["labels"] = {"pod-template-hash": replica_set.rsplit("-", 1)[1]}
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": replica_set,
                "uid": "00000000-0000-4000-8000-000000000001",
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeSelector": selector,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "resources": {"limits": {k: str(v) for k, v in limits.items()}},
                }
            ],
        },
    }


def scheduled_condition(pod: dict[str, Any]) -> dict[str, Any]:
    for c in pod.get("status", {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return dict(c)
    return {}


@dataclass
class Published:
    """What the pending-pod watcher handed its sink, in order."""

    records: list[tuple[str, PendingPod]] = field(default_factory=list)
    lists: list[PendingPodList] = field(default_factory=list)

    async def publish_pending(self, resource: str, record: PendingPod) -> None:
        self.records.append((resource, record))

    async def publish_pending_list(self, record: PendingPodList) -> None:
        self.lists.append(record)

    def of(self, name: str) -> list[tuple[str, PendingPod]]:
        return [(k, r) for k, r in self.records if r.name == name]

    def last(self, name: str) -> PendingPod | None:
        mine = self.of(name)
        return mine[-1][1] if mine else None


@contextlib.asynccontextmanager
async def pending_watch(kubeconfig: Path) -> AsyncIterator[tuple[PendingPodWatcher, Published]]:
    """The cluster role's pending-pod watcher with ``kubeconfig`` (its ServiceAccount's)."""
    settings = KubeSettings(kubeconfig=kubeconfig, watch_timeout_s=300, max_backoff_s=0.5)
    api = await make_api_client(settings)
    sink = Published()
    watcher = PendingPodWatcher(
        api=api, sink=sink, now_ms=lambda: time.time_ns() // 1_000_000, settings=settings
    )
    task = asyncio.create_task(watcher.run(), name="pending-watch")
    try:
        yield watcher, sink
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
