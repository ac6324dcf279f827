"""The API-server double (sim/apiserver.py) behaves like the real one where the agent relies on it.

One watch scenario, run twice with the agent's own watchers: against the double and against a
real kube-apiserver. Pods are created on the node and on another node, terminated with a grace
period, force-deleted, a name is reused with a new UID, and the watch is made to expire (410
Gone) so the watcher relists. After every step both runs must reach the same belief, and the
records each run emitted must tell the same story per pod (UIDs differ: the real server makes
its own).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from agents.selfmetrics import SOURCE_ERRORS
from contract.inputs import PodRecord
from gpuattr.localkube import LocalKube
from sim.apiserver import ApiServerDouble
from tests.helpers import wait_for
from tests.kube_fixture import Rest
from tests.realkube.cluster import Watching, create_node, gpu_pod, watching

NODE, OTHER = "rk8-a", "rk8-b"
NS = "conformance"
LABELS = {"nvidia.com/gpu.sharing-strategy": "none"}


class Cluster(Protocol):
    kubeconfig: Path

    async def create_pod(self, name: str, node: str) -> str: ...
    async def terminate(self, name: str) -> None: ...
    async def remove(self, name: str) -> None: ...
    async def expire(self) -> None: ...


@dataclass
class DoubleCluster:
    """The double, fed from a dict of objects we change the way the API server would."""

    kubeconfig: Path
    api: ApiServerDouble | None = None
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=list)

    def objects(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return list(self.pods.values()), self.nodes

    async def create_pod(self, name: str, node: str) -> str:
        obj = gpu_pod(name, node)
        uid = str(uuid.uuid4())
        obj["metadata"] |= {
            "namespace": NS,
            "uid": uid,
            "creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        obj["status"] = {"phase": "Pending"}
        self.pods[name] = obj
        return uid

    async def terminate(self, name: str) -> None:
        meta = self.pods[name]["metadata"]
        meta["deletionTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta["deletionGracePeriodSeconds"] = 30

    async def remove(self, name: str) -> None:
        del self.pods[name]

    async def expire(self) -> None:
        assert self.api is not None
        self.api.expire_all()
        self.api.cut_streams()


@dataclass
class RealCluster:
    kube: LocalKube
    rest: Rest
    kubeconfig: Path

    async def create_pod(self, name: str, node: str) -> str:
        made = await self.rest.create(f"/api/v1/namespaces/{NS}/pods", gpu_pod(name, node))
        return str(made["metadata"]["uid"])

    async def terminate(self, name: str) -> None:
        await self.rest.delete(f"/api/v1/namespaces/{NS}/pods/{name}", grace_s=30)

    async def remove(self, name: str) -> None:
        await self.rest.delete(f"/api/v1/namespaces/{NS}/pods/{name}", grace_s=0)

    async def expire(self) -> None:
        # etcd moves past the watcher's version elsewhere; the restarted API server's watch
        # cache starts there, so the watcher's version is too old: 410 Gone
        await self.create_pod(f"filler-{uuid.uuid4().hex[:6]}", OTHER)
        self.kube.stop_apiserver(kill=True)
        await self.kube.start_apiserver()


def expired() -> float:
    return sum(
        s.value
        for s in SOURCE_ERRORS.collect()[0].samples
        if s.name.endswith("_total") and s.labels == {"source": "apiserver", "error": "expired"}
    )


def story(records: list[PodRecord], uids: dict[str, str]) -> dict[str, list[str]]:
    """Per pod (named by the scenario, not by UID): live → terminating → deleted, as recorded."""
    out: dict[str, list[str]] = {}
    for rec in records:
        step = "deleted" if rec.deleted else "terminating" if rec.deletion_ts_ms else "live"
        steps = out.setdefault(uids[rec.uid], [])
        if not steps or steps[-1] != step:
            steps.append(step)
    return out


async def scenario(cluster: Cluster) -> tuple[dict[str, list[str]], int]:
    """The steps; returns each pod's story and how many relists the watcher made."""
    uids: dict[str, str] = {}  # uid → the scenario's name for that incarnation

    async def create(label: str, name: str, node: str = NODE) -> None:
        uids[await cluster.create_pod(name, node)] = label

    async def settled(w: Watching, want: set[str]) -> None:
        await wait_for(
            lambda: {uids.get(u) for u in w.believed()} == want,
            30,
            what=lambda: (
                f"belief {sorted(map(str, map(uids.get, w.believed())))} != {sorted(want)}"
            ),
        )

    await create("train-0", "train-0")
    await create("train-1", "train-1")
    async with watching(NODE, cluster.kubeconfig) as w:
        await settled(w, {"train-0", "train-1"})
        await create("other-0", "other-0", OTHER)  # another node: never seen
        await create("train-2", "train-2")
        await settled(w, {"train-0", "train-1", "train-2"})
        await cluster.terminate("train-1")  # graceful: still there, terminating
        await wait_for(lambda: any(r.deletion_ts_ms for r in w.pod_records()), 30)
        await settled(w, {"train-0", "train-1", "train-2"})
        await cluster.remove("train-1")
        await settled(w, {"train-0", "train-2"})
        await create("train-1 again", "train-1")  # the name comes back with a new UID
        await settled(w, {"train-0", "train-1 again", "train-2"})
        lists, gone = len(w.listings()), expired()
        await cluster.expire()
        await wait_for(lambda: expired() > gone and len(w.listings()) > lists, 60, what="relist")
        # a new pod seen through the watch: the watch after the relist is open (on the real
        # server, its watch cache is ready: one that starts between a pod's two deletion writes
        # begins after the first, and the watch shows only DELETED)
        await create("train-3", "train-3")
        await settled(w, {"train-0", "train-1 again", "train-2", "train-3"})
        await cluster.remove("train-2")
        await settled(w, {"train-0", "train-1 again", "train-3"})
    return story(w.pod_records(), uids), len(w.listings())


@contextlib.asynccontextmanager
async def double_cluster(tmp_path: Path) -> AsyncIterator[DoubleCluster]:
    cluster = DoubleCluster(tmp_path / "double.kubeconfig")
    cluster.nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": n, "uid": f"node-{n}", "labels": LABELS},
            "status": {"allocatable": {"nvidia.com/gpu": "2"}},
        }
        for n in (NODE, OTHER)
    ]
    async with ApiServerDouble(cluster.objects, tick_s=0.02, bookmark_s=0.5) as api:
        cluster.api = api
        cluster.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: d, cluster: {{server: '{api.url}'}}}}]\n"
            "users: [{name: u, user: {token: t}}]\n"
            "contexts: [{name: c, context: {cluster: d, user: u}}]\ncurrent-context: c\n"
        )
        yield cluster


async def test_double_and_real_server_tell_the_same_story(
    real_kube: LocalKube, tmp_path: Path
) -> None:
    rest = Rest.admin(real_kube)
    await rest.namespace(NS)
    for node in (NODE, OTHER):
        await create_node(rest, node, LABELS, 2)
    real_story, real_lists = await scenario(RealCluster(real_kube, rest, real_kube.kubeconfig))
    async with double_cluster(tmp_path) as double:
        double_story, double_lists = await scenario(double)
    assert double_story == real_story
    assert real_story == {
        "train-0": ["live"],
        "train-1": ["live", "terminating", "deleted"],
        "train-2": ["live", "terminating", "deleted"],  # a pod is marked before it goes
        "train-1 again": ["live"],
        "train-3": ["live"],
    }
    assert double_lists == real_lists == 2  # the first list and the relist after 410
