"""Pending GPU pods from the real kube-scheduler, seen by the cluster role's watcher running as
its shipped ServiceAccount (the kustomize RBAC applied for real).

Three pods asking for one GPU each against a node with two: the scheduler binds two and leaves
the third Pending with its own ``Unschedulable`` reason and "Insufficient nvidia.com/gpu"; the
watcher publishes it keyed by ``nvidia.com/gpu``; when a holder goes, the scheduler binds the
waiting pod and the watcher's last record says ``bound`` and where. A renamed shared resource and
a product node selector too. Then two ``gpuattr cluster`` replicas on real Kafka: the leader is
killed, the other takes over within the lease duration and lists every pending pod, once.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from agents.kube.pendingwatch import PendingPodWatcher
from agents.kube.watch import make_api_client
from contract import codec
from contract.inputs import (
    ClockTick,
    GpuRequest,
    OwnerRef,
    PendingPod,
    PendingPodList,
    pool_resource,
)
from contract.outputs import PoolDemand, PoolDemandRetired
from gpuattr.procs import Child, settings_env
from infra.admin import create_topics
from infra.settings import KafkaSettings, KubeSettings
from infra.topics import topic_specs
from streams.core.flow.demandstage import DemandStage, DemandTables
from tests.helpers import wait_for_async
from tests.kube_fixture import Rest
from tests.realkube.deploy import NAMESPACE, cluster_token, ensure_namespace
from tests.realkube.scheduling import (
    Published,
    Scheduled,
    gpu_node,
    pending_watch,
    scheduled_condition,
    scheduled_kube,
    waiting_pod,
)

__all__ = ["scheduled_kube"]

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"


async def role_kubeconfig(kube: Scheduled, tmp_path: Path) -> Path:
    token = await cluster_token(kube.kube)
    return kube.kube.write_kubeconfig(tmp_path / "cluster.kubeconfig", token=token, user="c")


async def fresh_namespace(rest: Rest) -> str:
    ns = f"pend-{uuid.uuid4().hex[:6]}"
    await ensure_namespace(rest, ns)
    return ns


async def pods_of(rest: Rest, ns: str) -> dict[str, dict[str, Any]]:
    listing = await rest.get(f"/api/v1/namespaces/{ns}/pods")
    return {p["metadata"]["name"]: p for p in listing["items"]}


async def test_the_cluster_role_may_list_and_watch_pods_and_read_claims_only(
    scheduled_kube: Scheduled,
) -> None:
    admin = Rest.admin(scheduled_kube.kube)
    role = admin.as_token(await cluster_token(scheduled_kube.kube))
    for verb in ("list", "watch"):
        assert await role.allowed(verb, "pods"), verb  # cluster-wide
        assert await role.allowed(verb, "pods", ns="default"), verb
    for verb in ("get", "create", "update", "patch", "delete", "deletecollection"):
        assert not await role.allowed(verb, "pods", ns="default"), verb
    assert not await role.allowed("create", "pods", group="", ns="default")
    assert not await role.allowed("create", "bindings", ns="default")
    assert not await role.allowed("get", "pods/log", ns="default")
    for resource in ("resourceclaims", "resourceclaimtemplates"):
        assert await role.allowed("list", resource, group="resource.k8s.io", ns="default")
        for verb in ("get", "watch", "create", "update", "delete"):
            assert not await role.allowed(verb, resource, group="resource.k8s.io", ns="default")
    # real requests: a list of pods works, creating one is refused
    status, _ = await role.call("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3D")
    assert status == 200
    status, _ = await role.call(
        "POST", "/api/v1/namespaces/default/pods", waiting_pod("nope", {GPU: 1}, {})
    )
    assert status == 403


async def test_three_pods_two_gpus_the_third_waits_then_is_bound(
    scheduled_kube: Scheduled, tmp_path: Path
) -> None:
    admin = Rest.admin(scheduled_kube.kube)
    config = await role_kubeconfig(scheduled_kube, tmp_path)
    ns = await fresh_namespace(admin)
    pool = {"pool": ns}
    node = f"{ns}-node"
    await gpu_node(admin, node, {GPU: 2}, {**pool, "nvidia.com/gpu.product": A100})
    async with pending_watch(config) as (watcher, published):
        names = [f"infer-7d9c6b5f4-{i}" for i in "abc"]
        for name in names:
            await admin.create(
                f"/api/v1/namespaces/{ns}/pods",
                waiting_pod(name, {GPU: 1}, pool, replica_set="infer-7d9c6b5f4"),
            )

        async def two_bound_one_unschedulable() -> list[str] | None:
            pods = await pods_of(admin, ns)
            bound = [n for n, p in pods.items() if p["spec"].get("nodeName")]
            waiting = [
                n
                for n, p in pods.items()
                if scheduled_condition(p).get("reason") == "Unschedulable"
            ]
            return waiting if len(bound) == 2 and len(waiting) == 1 else None

        (waiting,) = await wait_for_async(
            two_bound_one_unschedulable,
            timeout_s=60,
            what=lambda: scheduled_kube.scheduler.log_path.read_text()[-2000:],
        )
        pod = (await pods_of(admin, ns))[waiting]
        condition = scheduled_condition(pod)
        assert "Insufficient nvidia.com/gpu" in condition["message"]  # the scheduler's own words

        async def published_waiting() -> PendingPod | None:
            last = published.last(waiting)
            return last if last is not None and last.scheduled_reason == "Unschedulable" else None

        record = await wait_for_async(published_waiting, timeout_s=30, what="the pending record")
        assert published.of(waiting)[-1][0] == GPU  # keyed by the resource it asks for
        assert record.state == "pending"
        assert record.namespace == ns
        assert record.uid == pod["metadata"]["uid"]
        assert record.requests == (GpuRequest(GPU, 1),)
        assert record.workload == OwnerRef("Deployment", "infer", inferred=True)
        assert record.scheduled_status == "False"
        assert record.scheduled_message == condition["message"]
        assert record.scheduled_since_ms is not None
        assert record.created_ms > 0
        # the two it bound: if the watch saw them at all, their last word is bound, and where
        bound = sorted(set(names) - {waiting})

        async def holders_end_bound() -> bool:
            return all([await _ends_bound_or_unseen(published, n) for n in bound])

        await wait_for_async(holders_end_bound, timeout_s=30, what=lambda: str(published.records))
        assert [p.name for p in watcher.pods.values() if p.namespace == ns] == [waiting]

        # a holder ends: the scheduler binds the waiting pod; the watcher says so
        holder = next(n for n in names if n != waiting)
        await admin.delete(f"/api/v1/namespaces/{ns}/pods/{holder}", grace_s=0)

        async def waiting_bound() -> PendingPod | None:
            last = published.last(waiting)
            return last if last is not None and last.state == "bound" else None

        final = await wait_for_async(
            waiting_bound,
            timeout_s=60,
            what=lambda: (
                f"{published.of(waiting)}\n" + scheduled_kube.scheduler.log_path.read_text()[-2000:]
            ),
        )
        assert final.node == node
        assert final.uid == record.uid
        assert (await pods_of(admin, ns))[waiting]["spec"]["nodeName"] == node
        # state bounded by the pods still pending: none of this namespace's
        assert not [p for p in watcher.pods.values() if p.namespace == ns]
        # what the watcher published, through the demand stage as a worker applies it (in
        # memory): the pool listed the waiting pod with the scheduler's words, then dropped it
        # (the two bound at once may have been seen pending for a moment first). No supply is
        # fed here, so a pool nobody waits for retires: its tombstone is the record dropping it
        demand = demand_of(published, ns)
        records = [d for d in demand if isinstance(d, PoolDemand)]
        assert all({w.pod for w in d.waiting} <= set(names) for d in records)
        told = [d for d in records if [w.message for w in d.waiting] == [condition["message"]]]
        assert told, demand  # the waiting pod alone, with the scheduler's words
        assert [(w.pod, w.workload, w.gpus) for w in told[-1].waiting] == [
            (waiting, "Deployment/infer", 1)
        ]
        assert demand[-1] == PoolDemandRetired(GPU)  # bound: dropped, nobody waits any more


def demand_of(published: Published, ns: str) -> list[PoolDemand | PoolDemandRetired]:
    """What the demand stage emits for ``nvidia.com/gpu`` from ``ns``'s pods, in order."""
    stage = DemandStage(DemandTables(), window_s=900.0)
    out: list[PoolDemand | PoolDemandRetired] = []
    for resource, rec in published.records:
        if rec.namespace == ns:
            out += [
                o
                for o in stage.handle(rec, 0, pool_resource(resource).encode())
                if isinstance(o, PoolDemand | PoolDemandRetired) and o.pool == GPU
            ]
    return out


async def _ends_bound_or_unseen(published: Any, name: str) -> bool:
    last = published.last(name)
    return last is None or (last.state == "bound" and bool(last.node))


async def test_a_renamed_shared_resource_and_a_product_selector(
    scheduled_kube: Scheduled, tmp_path: Path
) -> None:
    admin = Rest.admin(scheduled_kube.kube)
    config = await role_kubeconfig(scheduled_kube, tmp_path)
    ns = await fresh_namespace(admin)
    pool = {"pool": ns}
    node = f"{ns}-h100"
    await gpu_node(admin, node, {GPU: 1, SHARED: 4}, {**pool, "nvidia.com/gpu.product": H100})
    async with pending_watch(config) as (watcher, published):
        pods = {
            "wants-a100": waiting_pod(
                "wants-a100", {GPU: 1}, {**pool, "nvidia.com/gpu.product": A100}
            ),
            "too-many-shares": waiting_pod("too-many-shares", {SHARED: 5}, pool),
            "one-share": waiting_pod("one-share", {SHARED: 1}, pool),
        }
        for body in pods.values():
            await admin.create(f"/api/v1/namespaces/{ns}/pods", body)

        async def settled() -> bool:
            got = await pods_of(admin, ns)
            return (
                bool(got["one-share"]["spec"].get("nodeName"))
                and all(
                    scheduled_condition(got[n]).get("reason") == "Unschedulable"
                    for n in ("wants-a100", "too-many-shares")
                )
                and all(
                    (r := published.last(n)) is not None and r.scheduled_reason == "Unschedulable"
                    for n in ("wants-a100", "too-many-shares")
                )
                # the watch may see the binding after the API says it: wait for its last word
                and await _ends_bound_or_unseen(published, "one-share")
            )

        await wait_for_async(settled, timeout_s=60, what=lambda: str(published.records))
        got = await pods_of(admin, ns)
        assert (
            "Insufficient nvidia.com/gpu.shared"
            in (scheduled_condition(got["too-many-shares"])["message"])
        )
        # a node of another product stays unschedulable for it, whatever it has free
        assert "node affinity/selector" in scheduled_condition(got["wants-a100"])["message"]
        a100 = published.last("wants-a100")
        shares = published.last("too-many-shares")
        assert a100 is not None
        assert shares is not None
        assert published.of("wants-a100")[-1][0] == GPU
        assert a100.requests == (GpuRequest(GPU, 1, product=A100),)
        assert published.of("too-many-shares")[-1][0] == SHARED
        assert shares.requests == (GpuRequest(SHARED, 5),)
        # deleted while waiting: its last record says so
        await admin.delete(f"/api/v1/namespaces/{ns}/pods/wants-a100", grace_s=0)

        async def deleted() -> bool:
            last = published.last("wants-a100")
            return last is not None and last.state == "deleted"

        await wait_for_async(deleted, timeout_s=30, what=lambda: str(published.of("wants-a100")))
        assert [p.name for p in watcher.pods.values() if p.namespace == ns] == ["too-many-shares"]


async def _holder(rest: Rest) -> str | None:
    status, lease = await rest.call("GET", f"{LEASES}/gpuattr-cluster")
    return lease["spec"].get("holderIdentity") if status == 200 else None


async def test_a_new_leader_lists_every_pending_pod_once(
    scheduled_kube: Scheduled, kafka_bootstrap: str, tmp_path: Path
) -> None:
    admin = Rest.admin(scheduled_kube.kube)
    config = await role_kubeconfig(scheduled_kube, tmp_path)
    status, _ = await admin.call("DELETE", f"{LEASES}/gpuattr-cluster")  # a clean election
    assert status in (200, 404)
    ns = await fresh_namespace(admin)
    pool = {"pool": ns}
    await gpu_node(admin, f"{ns}-node", {GPU: 1}, pool)
    for i in range(4):
        await admin.create(f"/api/v1/namespaces/{ns}/pods", waiting_pod(f"p{i}", {GPU: 1}, pool))

    async def pending_uids() -> set[str] | None:
        got = await pods_of(admin, ns)
        waiting = {
            p["metadata"]["uid"]
            for p in got.values()
            if scheduled_condition(p).get("reason") == "Unschedulable"
        }
        return waiting if len(waiting) == 3 else None

    waiting = await wait_for_async(pending_uids, timeout_s=60, what="three pods pending")

    kafka = KafkaSettings(
        bootstrap=kafka_bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:10]}.", partitions=3
    )
    await create_topics(kafka_bootstrap, topic_specs(kafka))
    env = settings_env(
        KAFKA_BOOTSTRAP=kafka.bootstrap,
        KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
        KAFKA_PARTITIONS=kafka.partitions,
        KUBE_KUBECONFIG=config,
        CLUSTER_LEASE_NAMESPACE=NAMESPACE,
        CLUSTER_TICK_INTERVAL_S=0.5,
        CLUSTER_LEASE_DURATION_S=6,
        CLUSTER_RENEW_DEADLINE_S=4,
        CLUSTER_RETRY_PERIOD_S=1,
        OBSERVE_CLUSTER_PORT=0,
    )
    replicas = {
        name: Child(
            name, ["cluster"], {**env, "GPUATTR_CLUSTER_IDENTITY": name}, tmp_path / f"{name}.log"
        )
        for name in ("replica-a", "replica-b")
    }
    consumer = AIOKafkaConsumer(
        kafka.topic("demand-events"),
        bootstrap_servers=kafka_bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    seen: list[tuple[float, int, bytes | None, object]] = []

    async def drain() -> None:
        batch = await consumer.getmany(timeout_ms=200)
        for part, msgs in batch.items():
            for msg in msgs:
                seen.append((time.monotonic(), part.partition, msg.key, codec.decode(msg.value)))

    def logs() -> str:
        return "\n".join(f"--- {c.name}\n{c.tail(30)}" for c in replicas.values())

    def mine(listing: PendingPodList) -> list[str]:
        return [p.uid for p in listing.pods if p.namespace == ns]

    async def listed_everywhere(after: float) -> list[PendingPodList] | None:
        await drain()
        lists = [(p, r) for t, p, _, r in seen if isinstance(r, PendingPodList) and t > after]
        if {p for p, _ in lists} != {0, 1, 2}:
            return None
        return [r for _, r in lists]

    try:
        for child in replicas.values():
            await child.start()
        leader = await wait_for_async(lambda: _holder(admin), timeout_s=60, what=logs)
        assert leader in replicas
        first = await wait_for_async(lambda: listed_everywhere(0.0), timeout_s=60, what=logs)
        for listing in first:
            assert sorted(mine(listing)) == sorted(waiting)
        # each pending pod also keyed by its resource; ticks into every demand partition
        keyed = [r for _, _, k, r in seen if isinstance(r, PendingPod) and k == GPU.encode()]
        assert {r.uid for r in keyed if r.namespace == ns} == waiting
        await wait_for_async(lambda: _ticked(drain, seen), timeout_s=30, what="demand-events ticks")

        killed_at = time.monotonic()
        replicas[leader].kill()
        await replicas[leader].stop()
        survivor = next(n for n in replicas if n != leader)

        async def survivor_holds() -> bool:
            return await _holder(admin) == survivor

        await wait_for_async(survivor_holds, timeout_s=30, what=lambda: f"hand-over\n{logs()}")
        assert time.monotonic() - killed_at < 6 + 4  # lease duration plus a renew deadline
        after = await wait_for_async(lambda: listed_everywhere(killed_at), timeout_s=60, what=logs)
        for listing in after:
            listed = mine(listing)
            assert sorted(listed) == sorted(waiting)  # none lost
            assert not [u for u, n in Counter(listed).items() if n > 1]  # none duplicated
    finally:
        await consumer.stop()
        for child in replicas.values():
            await child.stop()


async def _ticked(drain: Any, seen: list[tuple[float, int, bytes | None, object]]) -> bool:
    await drain()
    return {p for _, p, _, r in seen if isinstance(r, ClockTick) and r.partition == p} == {0, 1, 2}


async def test_a_pod_bound_while_the_watch_was_down_is_found_by_the_relist(
    scheduled_kube: Scheduled, tmp_path: Path
) -> None:
    """No watch running: two lists of the same watcher, the waiting pod bound in between. The
    second list misses it, reads it (bound, and where) and lists the pending pods without it."""
    admin = Rest.admin(scheduled_kube.kube)
    config = await role_kubeconfig(scheduled_kube, tmp_path)
    ns = await fresh_namespace(admin)
    pool = {"pool": ns}
    node = f"{ns}-node"
    await gpu_node(admin, node, {GPU: 1}, pool)
    for name in ("holder", "waiter"):
        await admin.create(f"/api/v1/namespaces/{ns}/pods", waiting_pod(name, {GPU: 1}, pool))

    async def waiter_unschedulable() -> bool:
        got = await pods_of(admin, ns)
        return scheduled_condition(got["waiter"]).get("reason") == "Unschedulable" and bool(
            got["holder"]["spec"].get("nodeName")
        )

    await wait_for_async(waiter_unschedulable, timeout_s=60, what="the waiter pending")
    settings = KubeSettings(kubeconfig=config, watch_timeout_s=30, max_backoff_s=0.5)
    api = await make_api_client(settings)
    published = Published()
    watcher = PendingPodWatcher(
        api=api, sink=published, now_ms=lambda: time.time_ns() // 1_000_000, settings=settings
    )
    try:
        await watcher.relist()
        (first,) = [p for p in published.lists[-1].pods if p.namespace == ns]
        assert first.name == "waiter"
        assert published.last("waiter") == first
        await admin.delete(f"/api/v1/namespaces/{ns}/pods/holder", grace_s=0)

        async def waiter_bound() -> bool:
            return bool((await pods_of(admin, ns))["waiter"]["spec"].get("nodeName"))

        await wait_for_async(waiter_bound, timeout_s=60, what="the scheduler binds the waiter")
        await watcher.relist()
        last = published.last("waiter")
        assert last is not None
        assert (last.state, last.node, last.uid) == ("bound", node, first.uid)
        assert not [p for p in published.lists[-1].pods if p.namespace == ns]
        assert not [p for p in watcher.pods.values() if p.namespace == ns]
    finally:
        await api.close()
