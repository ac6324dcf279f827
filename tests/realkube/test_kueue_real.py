"""Kueue's queued Workloads on the real API server: the genuine Kueue CRDs (vendored,
``tests/fixtures/kueue/``), the cluster role's shipped RBAC for them, and its Kueue watch running
with that role's token while a Workload's status moves as Kueue writes it.

Not real here: no Kueue controller (its conversion webhook too: everything is written and read
as ``v1beta2``, the storage version) and no Kafka. The statuses are the ones Kueue's scheduler
and controllers write (``tests/kueue_objects.py``), patched on the ``status`` subresource as
they patch it. Kueue not installed: the CRDs absent, the watch says so (gauge 0, counted) and
lists again until they are applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from agents.kube.kueuewatch import KueueWatch
from agents.kube.pending import ms
from agents.kube.watch import make_api_client
from contract.codec import WIRE
from contract.inputs import GpuRequest, OwnerRef, QueuedWorkload, QueuedWorkloadList
from gpuattr.localkube import LocalKube
from infra.settings import KubeSettings
from tests.helpers import wait_for_async
from tests.kube_fixture import KubeError, Rest
from tests.kueue_objects import (
    A100,
    GPU,
    H100,
    admitted,
    cluster_queue,
    evicted,
    finished,
    flavor,
    local_queue,
    pending,
    pending_message,
    podset,
    workload,
)
from tests.realkube.crds import install_crds
from tests.realkube.deploy import cluster_token, ensure_namespace

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent.parent / "fixtures" / "kueue"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
API = "/apis/kueue.x-k8s.io/v1beta2"
PLURALS = ("workloads", "localqueues", "clusterqueues", "resourceflavors")
WRITES = ("create", "update", "patch", "delete", "deletecollection")


async def install_kueue(admin: Rest) -> None:
    await install_crds(admin, *(HERE / f"kueue.x-k8s.io_{p}.yaml" for p in PLURALS))


async def uninstall_kueue(admin: Rest) -> None:
    for plural in PLURALS:
        with contextlib.suppress(KubeError):
            await admin.delete(f"{CRDS}/{plural}.kueue.x-k8s.io")

    async def gone() -> bool:
        return all([(await admin.call("GET", f"{API}/{p}"))[0] == 404 for p in PLURALS])

    await wait_for_async(gone, timeout_s=60, what="Kueue's CRDs removed")


def created(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as a client creates it (the server sets uid, version and creation time)."""
    meta = {
        k: v
        for k, v in obj["metadata"].items()
        if k not in ("uid", "resourceVersion", "creationTimestamp")
    }
    return {k: v for k, v in {**obj, "metadata": meta}.items() if k != "status"}


async def test_the_cluster_roles_token_lists_and_watches_kueues_kinds_only(
    real_kube: LocalKube,
) -> None:
    admin = Rest.admin(real_kube)
    await install_kueue(admin)
    role = admin.as_token(await cluster_token(real_kube))
    group = "kueue.x-k8s.io"
    for resource in PLURALS:
        for verb in ("list", "watch"):
            assert await role.allowed(verb, resource, group=group), (resource, verb)
        for verb in ("get", *WRITES):
            assert not await role.allowed(verb, resource, group=group), (resource, verb)
    for verb in ("get", "update", "patch"):
        review = await admin.as_token(role.token).create(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {
                    "resourceAttributes": {
                        "verb": verb,
                        "group": group,
                        "resource": "workloads",
                        "subresource": "status",
                        "namespace": "default",
                    }
                },
            },
        )
        assert not review["status"].get("allowed"), verb
    # real requests with its token: a list works, a read by name and a write do not
    name = f"rf-{uuid.uuid4().hex[:6]}"
    await admin.create(f"{API}/resourceflavors", flavor(name, A100))
    try:
        status, listing = await role.call("GET", f"{API}/resourceflavors")
        assert status == 200, listing
        assert name in [f["metadata"]["name"] for f in listing["items"]]
        status, _ = await role.call("GET", f"{API}/resourceflavors/{name}")
        assert status == 403
        status, _ = await role.call("POST", f"{API}/resourceflavors", flavor(f"{name}-x"))
        assert status == 403
    finally:
        await admin.delete(f"{API}/resourceflavors/{name}")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Published:
    records: list[tuple[str, QueuedWorkload]] = field(default_factory=list)
    lists: list[QueuedWorkloadList] = field(default_factory=list)

    async def publish_workload(self, resource: str, record: QueuedWorkload) -> None:
        assert WIRE.decode(WIRE.encode(record)) == record  # what a worker reads
        self.records.append((resource, record))

    async def publish_workload_list(self, record: QueuedWorkloadList) -> None:
        assert WIRE.decode(WIRE.encode(record)) == record
        self.lists.append(record)

    def of(self, name: str) -> list[QueuedWorkload]:
        return [r for _, r in self.records if r.name == name]


@contextlib.asynccontextmanager
async def role_watching(
    kube: LocalKube, tmp_path: Path, retry_s: float = 0.5
) -> AsyncIterator[tuple[KueueWatch, Published]]:
    """The cluster role's Kueue watch, as its ServiceAccount."""
    token = await cluster_token(kube)
    config = kube.write_kubeconfig(tmp_path / "cluster.kubeconfig", token=token, user="cluster")
    settings = KubeSettings(kubeconfig=config, watch_timeout_s=300, max_backoff_s=0.5)
    api = await make_api_client(settings)
    published = Published()
    watch = KueueWatch(api=api, sink=published, now_ms=now_ms, settings=settings, retry_s=retry_s)
    task = asyncio.create_task(watch.run(), name="kueue-watch")
    try:
        yield watch, published
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()


async def test_a_workloads_wait_as_kueue_writes_it(real_kube: LocalKube, tmp_path: Path) -> None:
    admin = Rest.admin(real_kube)
    await install_kueue(admin)
    suffix = uuid.uuid4().hex[:6]
    ns, fl, cq = f"kq-{suffix}", f"a100-{suffix}", f"gpu-cq-{suffix}"
    await ensure_namespace(admin, ns)
    await admin.create(f"{API}/resourceflavors", flavor(fl, A100))
    await admin.create(f"{API}/clusterqueues", cluster_queue(cq, {fl: 8}))
    await admin.create(f"{API}/namespaces/{ns}/localqueues", local_queue(ns, "user-queue", cq))
    workloads = f"{API}/namespaces/{ns}/workloads"
    async with role_watching(real_kube, tmp_path) as (watch, published):
        await wait_for_async(
            lambda: asyncio.sleep(0, bool(published.lists)), timeout_s=30, what="the first list"
        )
        assert REGISTRY.get_sample_value("gpuattr_cluster_kueue_served") == 1
        wl = await admin.create(
            workloads, created(workload("job-train-7c4d8", [podset("main", 2, 4)], namespace=ns))
        )
        name, uid = wl["metadata"]["name"], wl["metadata"]["uid"]

        async def last(
            check: Any = lambda r: True, who: str = "job-train-7c4d8"
        ) -> QueuedWorkload | None:
            got = published.of(who)
            return got[-1] if got and check(got[-1]) else None

        first = await wait_for_async(last, timeout_s=30, what="the queued Workload")
        assert published.records[-1][0] == GPU  # keyed by the resource it asks for
        assert (first.state, first.uid, first.namespace) == ("queued", uid, ns)
        assert first.requests == (GpuRequest(GPU, 8, product=A100),)
        assert (first.queue, first.cluster_queue) == ("user-queue", cq)
        assert first.owner == OwnerRef("Job", "sample-job")
        assert first.created_ms > 0
        assert first.since_ms == first.created_ms

        status = f"{workloads}/{name}/status"
        # Kueue's scheduler: no quota left (QuotaReserved False, Pending, its message)
        message = pending_message("main", fl, 4)
        await admin.merge_patch(status, {"status": pending(message, _now())})
        told = await wait_for_async(
            lambda: last(lambda r: r.message == message), timeout_s=30, what="Kueue's word"
        )
        assert (told.state, told.reason) == ("queued", "Pending")

        # the flavor relabelled: the queued Workload judged again, without a change of its own
        await admin.merge_patch(
            f"{API}/resourceflavors/{fl}",
            {"spec": {"nodeLabels": {"nvidia.com/gpu.product": H100}}},
        )
        moved = await wait_for_async(
            lambda: last(lambda r: r.requests[0].product == H100), timeout_s=30, what="H100"
        )
        assert moved.message == message

        # quota reserved and admitted: its wait's last record, once
        await admin.merge_patch(status, {"status": admitted(cq, {"main": (2, fl)}, _now())})
        done = await wait_for_async(
            lambda: last(lambda r: r.state == "admitted"), timeout_s=30, what="admitted"
        )
        assert done.cluster_queue == cq
        assert uid not in watch.join.waiting

        # preempted: back in the queue, its wait from the requeue
        requeued = _now()
        await admin.merge_patch(
            status,
            {
                "status": {
                    **evicted("Preempted to accommodate a workload", requeued, requeued),
                    "admission": None,
                }
            },
        )
        again = await wait_for_async(
            lambda: last(lambda r: r.state == "queued"), timeout_s=30, what="requeued"
        )
        assert again.reason == "Preempted"
        assert again.since_ms == ms(requeued)

        # admitted again, then finished: the admitted record once, nothing after it
        await admin.merge_patch(status, {"status": admitted(cq, {"main": (2, fl)}, _now())})
        await wait_for_async(
            lambda: last(lambda r: r.state == "admitted"), timeout_s=30, what="admitted again"
        )
        await admin.merge_patch(
            status, {"status": finished("Succeeded", "Job finished successfully", _now())}
        )

        # a second Workload ends while queued: finished is its last record
        other = await admin.create(
            workloads,
            created(workload("job-eval-5b9f2", [podset("main", 1, 2)], namespace=ns, job="eval")),
        )
        await wait_for_async(lambda: last(who="job-eval-5b9f2"), timeout_s=30, what="eval queued")
        await admin.merge_patch(
            f"{workloads}/{other['metadata']['name']}/status",
            {"status": finished("Failed", "Job has reached the specified backoff limit", _now())},
        )
        ended = await wait_for_async(
            lambda: last(lambda r: r.state == "finished", "job-eval-5b9f2"),
            timeout_s=30,
            what="eval finished",
        )
        assert ended.requests == (GpuRequest(GPU, 2, product=H100),)
        assert [r.state for r in published.of("job-train-7c4d8")][-3:] == [
            "admitted",
            "queued",
            "admitted",
        ]
        await admin.delete(f"{workloads}/{name}")
        await admin.delete(f"{workloads}/{other['metadata']['name']}")
        mine = {uid, other["metadata"]["uid"]}

        async def forgotten() -> bool:  # both deletions read by the watch (the server is the
            # session's: other tests' Workloads may be there too)
            return not mine & (set(watch.join.waiting) | set(watch.join.settled))

        await wait_for_async(forgotten, timeout_s=30, what="both Workloads' deletions read")
        assert published.of("job-train-7c4d8")[-1].state == "admitted"  # no more after its end
    for path in (f"{API}/clusterqueues/{cq}", f"{API}/resourceflavors/{fl}"):
        await admin.delete(path)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


async def test_kueue_not_installed_is_a_state_listed_again(
    real_kube: LocalKube, tmp_path: Path
) -> None:
    admin = Rest.admin(real_kube)
    await uninstall_kueue(admin)

    def not_served() -> float:
        return sum(
            REGISTRY.get_sample_value(
                "gpuattr_agent_source_errors_total",
                {"source": f"kueue-{plural}", "error": "not_served"},
            )
            or 0.0
            for plural in PLURALS
        )

    before = not_served()
    async with role_watching(real_kube, tmp_path, retry_s=0.3) as (watch, published):

        async def retried() -> bool:
            return not_served() >= before + 8  # each kind, twice at least

        await wait_for_async(retried, timeout_s=30, what="the lists tried again")
        assert REGISTRY.get_sample_value("gpuattr_cluster_kueue_served") == 0
        assert published.records == []
        assert published.lists == []
        # Kueue installed later: listed within retry_s, no restart
        await install_kueue(admin)
        await wait_for_async(
            lambda: asyncio.sleep(0, bool(published.lists)), timeout_s=30, what="listed"
        )
        assert REGISTRY.get_sample_value("gpuattr_cluster_kueue_served") == 1
        assert watch.workloads.version == "v1beta2"


def v1beta1_only(plural: str) -> dict[str, Any]:
    """A vendored CRD as Kueue before v0.15 served it: ``v1beta1`` alone (edited in memory)."""
    crd: dict[str, Any] = yaml.safe_load((HERE / f"kueue.x-k8s.io_{plural}.yaml").read_text())
    (old,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    crd["spec"]["versions"] = [{**old, "storage": True}]
    return crd


async def test_a_kueue_serving_only_v1beta1_is_read_in_it(
    real_kube: LocalKube, tmp_path: Path
) -> None:
    admin = Rest.admin(real_kube)
    await uninstall_kueue(admin)
    old = "/apis/kueue.x-k8s.io/v1beta1"
    try:
        for plural in PLURALS:
            await admin.create(CRDS, v1beta1_only(plural))

        async def served() -> bool:
            return all([(await admin.call("GET", f"{old}/{p}"))[0] == 200 for p in PLURALS])

        await wait_for_async(served, timeout_s=30, what="the v1beta1 CRDs served")
        suffix = uuid.uuid4().hex[:6]
        ns, fl, cq = f"kq1-{suffix}", f"a100-{suffix}", f"gpu-cq-{suffix}"
        await ensure_namespace(admin, ns)
        await admin.create(f"{old}/resourceflavors", flavor(fl, A100, "v1beta1"))
        await admin.create(f"{old}/clusterqueues", cluster_queue(cq, {fl: 8}, "v1beta1"))
        await admin.create(
            f"{old}/namespaces/{ns}/localqueues", local_queue(ns, "user-queue", cq, "v1beta1")
        )
        wl = workload(
            "job-old-1a2b3",
            [podset("launcher", 1, None), podset("worker", 3, 2)],
            namespace=ns,
            version="v1beta1",
            priority_class="high",
            priority=100,
        )
        await admin.create(f"{old}/namespaces/{ns}/workloads", created(wl))
        async with role_watching(real_kube, tmp_path) as (watch, published):

            async def seen() -> QueuedWorkload | None:
                got = published.of("job-old-1a2b3")
                return got[-1] if got else None

            record = await wait_for_async(seen, timeout_s=30, what="the v1beta1 Workload")
            assert watch.workloads.version == "v1beta1"
            assert record.requests == (GpuRequest(GPU, 6, product=A100),)
            assert (record.cluster_queue, record.priority_class, record.priority) == (
                cq,
                "high",
                100,
            )
            assert [w.name for w in published.lists[-1].workloads] == ["job-old-1a2b3"]
    finally:
        await uninstall_kueue(admin)
