"""The agent's pod and node watchers against a real kube-apiserver on etcd.

List, watch from the list's resourceVersion, the node field selector, status written through the
status subresource, graceful and forced deletion, StatefulSet-style name reuse, owners through
real ReplicaSet/Deployment/Job/CronJob objects, 410 Gone from the API server's watch cache after
a restart and from a real etcd compaction, and bookmarks.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agents.selfmetrics import SOURCE_ERRORS
from contract.inputs import OwnerRef, PodRecord
from gpuattr.localkafka import default_cache_dir
from gpuattr.localkube import LocalKube
from streams.core.node.pods import PodNames, apply_pod, resolve
from tests.helpers import wait_for, wait_for_async
from tests.kube_fixture import Rest
from tests.realkube.cluster import (
    create_node,
    gpu_pod,
    now_ms,
    owner_ref,
    pod_template,
    set_running,
    watching,
)

LABELS = {"nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/gpu.product": "NVIDIA-H100"}


async def two_nodes(rest: Rest, ns: str, prefix: str) -> str:
    """A namespace and two GPU nodes, ``<prefix>-a`` and ``<prefix>-b``; the pods path."""
    await rest.namespace(ns)
    for node in (f"{prefix}-a", f"{prefix}-b"):
        await create_node(rest, node, LABELS, 4)
    return f"/api/v1/namespaces/{ns}/pods"


def expired() -> float:
    """410s the agent's watchers counted so far."""
    return sum(
        s.value
        for s in SOURCE_ERRORS.collect()[0].samples
        if s.name.endswith("_total") and s.labels == {"source": "apiserver", "error": "expired"}
    )


def fold(records: list[PodRecord]) -> PodNames | None:
    names: PodNames | None = None
    for rec in records:
        names = apply_pod(names, rec)
    return names


async def test_list_and_watch_see_only_the_node_and_follow_every_change(
    real_kube: LocalKube,
) -> None:
    rest = Rest.admin(real_kube)
    ns = "watch-basics"
    pods = await two_nodes(rest, ns, "rk1")
    train = await rest.create(pods, gpu_pod("train-0", "rk1-a"))
    await rest.create(pods, gpu_pod("elsewhere-0", "rk1-b"))
    await rest.create(pods, gpu_pod("cpu-only", "rk1-a", gpus=0))

    async with watching("rk1-a", real_kube.kubeconfig) as w:
        uid = train["metadata"]["uid"]
        await wait_for(lambda: w.listings() and w.believed() == {uid: f"{ns}/train-0"}, 30)
        node = await wait_for(lambda: w.node_records(), 30, what="the node record")
        assert node[0].node == "rk1-a"
        assert dict(node[0].labels)["nvidia.com/gpu.product"] == "NVIDIA-H100"
        assert ("nvidia.com/gpu", "4") in node[0].allocatable

        running = await set_running(rest, ns, "train-0")  # the status subresource, as a kubelet
        rv = running["metadata"]["resourceVersion"]
        await wait_for(
            lambda: any(r.resource_version == rv for r in w.pod_records()), 30, what="status"
        )

        second = await rest.create(pods, gpu_pod("train-1", "rk1-a"))
        await rest.create(pods, gpu_pod("elsewhere-1", "rk1-b"))
        uid2 = second["metadata"]["uid"]
        await wait_for(lambda: uid2 in w.believed(), 30, what="a new pod")

        await rest.delete(f"{pods}/train-1", grace_s=30)  # graceful: the pod stays, terminating
        terminating = await wait_for(
            lambda: [r for r in w.pod_records() if r.uid == uid2 and r.deletion_ts_ms], 30
        )
        assert not terminating[-1].deleted
        assert uid2 in w.believed()
        await rest.delete(f"{pods}/train-1", grace_s=0)  # the kubelet's final delete
        await wait_for(lambda: uid2 not in w.believed(), 30, what="DELETED")
        assert [r.deleted for r in w.pod_records() if r.uid == uid2][-1]

    names = {r.name for r in w.pod_records()}
    assert names == {"train-0", "train-1"}  # the field selector and the GPU filter held
    assert {r.node for r in w.out} == {"rk1-a"}


async def test_statefulset_name_reuse_keeps_each_uid(real_kube: LocalKube) -> None:
    """db-0 is deleted with grace, holds its GPU while terminating, and comes back with a new UID:
    the join resolves the name at each time to the incarnation alive then."""
    rest = Rest.admin(real_kube)
    ns = "name-reuse"
    await rest.namespace(ns)
    await create_node(rest, "rk2-a", LABELS, 8)
    sts = await rest.create(
        f"/apis/apps/v1/namespaces/{ns}/statefulsets",
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db"},
            "spec": {
                "serviceName": "db",
                "replicas": 1,
                "selector": {"matchLabels": {"app": "db"}},
                "template": {
                    "metadata": {"labels": {"app": "db"}},
                    "spec": pod_template("Always"),
                },
            },
        },
    )
    pods = f"/api/v1/namespaces/{ns}/pods"
    labels = {"app": "db", "statefulset.kubernetes.io/pod-name": "db-0"}
    first = await rest.create(pods, gpu_pod("db-0", "rk2-a", owner=owner_ref(sts), labels=labels))
    old_uid = first["metadata"]["uid"]

    async with watching("rk2-a", real_kube.kubeconfig) as w:
        await wait_for(lambda: old_uid in w.believed(), 30)
        await set_running(rest, ns, "db-0")
        t_running = now_ms()
        await rest.delete(f"{pods}/db-0", grace_s=30)
        await wait_for(lambda: any(r.deletion_ts_ms for r in w.pod_records()), 30)
        t_terminating = now_ms()  # still holds its GPU: the kubelet has not finished it
        await rest.delete(f"{pods}/db-0", grace_s=0)
        await wait_for(lambda: old_uid not in w.believed(), 30)
        second = await rest.create(
            pods, gpu_pod("db-0", "rk2-a", owner=owner_ref(sts), labels=labels)
        )
        new_uid = second["metadata"]["uid"]
        assert new_uid != old_uid
        await wait_for(lambda: new_uid in w.believed(), 30)
        t_new = now_ms()

    names = fold(w.pod_records())
    assert names is not None
    assert [life.uid for life in names.lives] == [old_uid, new_uid]
    assert resolve(names, t_running, True).uid == old_uid
    assert resolve(names, t_terminating, True).uid == old_uid
    assert resolve(names, t_new, True).uid == new_uid
    assert {r.workload for r in w.pod_records()} == {OwnerRef("StatefulSet", "db")}


async def test_owners_resolve_through_real_controller_objects(real_kube: LocalKube) -> None:
    rest = Rest.admin(real_kube)
    ns = "owners"
    await rest.namespace(ns)
    await create_node(rest, "rk3-a", LABELS, 8)
    apps, batch = f"/apis/apps/v1/namespaces/{ns}", f"/apis/batch/v1/namespaces/{ns}"
    labels = {"app": "train"}
    deploy = await rest.create(
        f"{apps}/deployments",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "train"},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod_template("Always")},
            },
        },
    )
    hashed = {"app": "train", "pod-template-hash": "5d8f7c9b4"}
    rs_template = {"metadata": {"labels": hashed}, "spec": pod_template("Always")}
    rs = await rest.create(
        f"{apps}/replicasets",
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "train-5d8f7c9b4", "ownerReferences": [owner_ref(deploy)]},
            "spec": {"selector": {"matchLabels": hashed}, "template": rs_template},
        },
    )
    bare_labels = {"app": "custom"}
    bare = await rest.create(
        f"{apps}/replicasets",
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "custom"},
            "spec": {
                "selector": {"matchLabels": bare_labels},
                "template": {"metadata": {"labels": bare_labels}, "spec": rs_template["spec"]},
            },
        },
    )
    job_spec = {"template": {"metadata": {"labels": labels}, "spec": pod_template("Never")}}
    cron = await rest.create(
        f"{batch}/cronjobs",
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "nightly"},
            "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": job_spec}},
        },
    )
    cron_job = await rest.create(
        f"{batch}/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "nightly-29340180", "ownerReferences": [owner_ref(cron)]},
            "spec": job_spec,
        },
    )
    job = await rest.create(
        f"{batch}/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "finetune"},
            "spec": job_spec,
        },
    )
    pods = f"/api/v1/namespaces/{ns}/pods"
    made = {
        "train-5d8f7c9b4-x2x7k": await rest.create(
            pods, gpu_pod("train-5d8f7c9b4-x2x7k", "rk3-a", owner=owner_ref(rs), labels=hashed)
        ),
        "custom-q7w2z": await rest.create(
            pods, gpu_pod("custom-q7w2z", "rk3-a", owner=owner_ref(bare), labels=bare_labels)
        ),
        "nightly-29340180-8kq4d": await rest.create(
            pods, gpu_pod("nightly-29340180-8kq4d", "rk3-a", owner=owner_ref(cron_job))
        ),
        "finetune-r5t6y": await rest.create(
            pods, gpu_pod("finetune-r5t6y", "rk3-a", owner=owner_ref(job))
        ),
    }
    async with watching("rk3-a", real_kube.kubeconfig) as w:
        await wait_for(lambda: len(w.believed()) == len(made), 30)
    by_name = {r.name: r for r in w.pod_records()}
    assert {n: (r.owner, r.workload) for n, r in by_name.items()} == {
        "train-5d8f7c9b4-x2x7k": (
            OwnerRef("ReplicaSet", "train-5d8f7c9b4"),
            OwnerRef("Deployment", "train", inferred=True),
        ),
        "custom-q7w2z": (OwnerRef("ReplicaSet", "custom"), OwnerRef("ReplicaSet", "custom")),
        "nightly-29340180-8kq4d": (
            OwnerRef("Job", "nightly-29340180"),
            OwnerRef("CronJob", "nightly", inferred=True),
        ),
        "finetune-r5t6y": (OwnerRef("Job", "finetune"), OwnerRef("Job", "finetune")),
    }
    assert {n: r.uid for n, r in by_name.items()} == {
        n: o["metadata"]["uid"] for n, o in made.items()
    }


async def test_api_server_restart_past_the_watch_cache_window_relists(
    real_kube: LocalKube,
) -> None:
    """The watch cache of a restarted API server starts at etcd's current revision: a watch from
    an older version gets 410 Gone, and the watcher relists (and misses nothing)."""
    rest = Rest.admin(real_kube)
    ns = "restart"
    pods = await two_nodes(rest, ns, "rk4")
    a0 = await rest.create(pods, gpu_pod("a-0", "rk4-a"))
    async with watching("rk4-a", real_kube.kubeconfig) as w:
        await wait_for(lambda: a0["metadata"]["uid"] in w.believed(), 30)
        assert w.pods_watcher is not None
        held = w.pods_watcher.position
        for i in range(3):  # etcd moves on; nothing on rk4-a changes, so the watcher stays put
            await rest.create(pods, gpu_pod(f"b-{i}", "rk4-b"))
        lists, gone = len(w.listings()), expired()
        real_kube.stop_apiserver(kill=True)
        await real_kube.start_apiserver()
        await wait_for(lambda: expired() > gone and len(w.listings()) > lists, 60, what="relist")
        assert int(w.pods_watcher.position) > int(held)
        a1 = await rest.create(pods, gpu_pod("a-1", "rk4-a"))  # and it watches again
        await wait_for(lambda: a1["metadata"]["uid"] in w.believed(), 30)
        assert set(w.believed()) == {a0["metadata"]["uid"], a1["metadata"]["uid"]}


@pytest.fixture
async def uncached_kube(tmp_path: Path) -> AsyncIterator[LocalKube]:
    """An API server of its own without a watch cache: every watch is etcd's own."""
    kube = LocalKube(tmp_path / "kube", default_cache_dir(), watch_cache=False)
    (tmp_path / "kube").mkdir()
    await kube.start()
    try:
        yield kube
    finally:
        await kube.stop()


async def test_etcd_compaction_expires_the_watch_and_the_watcher_relists(
    uncached_kube: LocalKube,
) -> None:
    kube = uncached_kube
    rest = Rest.admin(kube)
    ns = "compaction"
    pods = await two_nodes(rest, ns, "rk5")
    a0 = await rest.create(pods, gpu_pod("a-0", "rk5-a"))
    async with watching("rk5-a", kube.kubeconfig) as w:
        await wait_for(lambda: a0["metadata"]["uid"] in w.believed(), 30)
        await rest.create(pods, gpu_pod("b-0", "rk5-b"))

        # without compaction etcd still has the history: the watch resumes, no relist
        lists, gone = len(w.listings()), expired()
        kube.stop_apiserver(kill=True)
        await kube.start_apiserver()
        a1 = await rest.create(pods, gpu_pod("a-1", "rk5-a"))
        await wait_for(lambda: a1["metadata"]["uid"] in w.believed(), 30)
        assert (len(w.listings()), expired()) == (lists, gone)

        await rest.create(pods, gpu_pod("b-1", "rk5-b"))
        kube.compact()  # the watcher's version is older than the compaction now
        kube.stop_apiserver(kill=True)
        await kube.start_apiserver()
        await wait_for(lambda: expired() > gone and len(w.listings()) > lists, 60, what="relist")
        await rest.delete(f"{pods}/a-0", grace_s=0)
        await wait_for(lambda: set(w.believed()) == {a1["metadata"]["uid"]}, 30)


async def cache_at_least(rest: Rest, rv: int) -> bool:
    """The API server's watch cache for pods has processed resourceVersion ``rv``."""
    listing = await rest.get("/api/v1/pods?resourceVersion=0&limit=1")
    return int(listing["metadata"]["resourceVersion"]) >= rv


async def test_bookmarks_carry_the_watch_forward(real_kube: LocalKube) -> None:
    """With nothing on its node changing, the watcher's version still moves: the API server's
    bookmarks (about once a minute) carry it past changes elsewhere."""
    rest = Rest.admin(real_kube)
    ns = "bookmarks"
    pods = await two_nodes(rest, ns, "rk6")
    a0 = await rest.create(pods, gpu_pod("a-0", "rk6-a"))
    async with watching("rk6-a", real_kube.kubeconfig) as w:
        await wait_for(lambda: a0["metadata"]["uid"] in w.believed(), 30)
        assert w.pods_watcher is not None
        held = int(w.pods_watcher.position)
        elsewhere = await rest.create(pods, gpu_pod("b-0", "rk6-b"))
        beyond = int(elsewhere["metadata"]["resourceVersion"])
        # a bookmark carries what the API server's watch cache has processed: first the cache
        # has seen the change (a list at resourceVersion 0 is served from it)
        await wait_for_async(
            lambda: cache_at_least(rest, beyond),
            timeout_s=30,
            what=f"the watch cache to reach resourceVersion {beyond}",
        )
        cached_at = time.monotonic()
        await wait_for(
            lambda: int(w.pods_watcher.position) >= beyond,  # type: ignore[union-attr]
            timeout_s=150,
            every_s=0.5,
            what=lambda: (
                f"a bookmark past the change on another node (the cache had it "
                f"{time.monotonic() - cached_at:.0f}s ago; the watcher at "
                f"{w.pods_watcher.position if w.pods_watcher else None}, "
                f"{len(w.listings())} listing(s))"
            ),
        )
        assert held < beyond
        assert len(w.listings()) == 1  # moved by a bookmark, not by a relist
        assert [r.name for r in w.pod_records()] == ["a-0"]
