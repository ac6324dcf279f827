"""The cluster role (``gpuattr cluster``) against the real API server and the real local Kafka.

Its shipped RBAC proven with a TokenRequest token: nodes listed and watched, its own Lease held,
nothing else here (its ClusterPolicy reads: ``test_clusterpolicy_real.py``; its pod reads:
``test_pending_real.py``). Two replicas with
that token: one leads (the Lease says which), Node deletions and every partition's clock ticks
reach the input topic, and when the leader is killed the other takes over within the lease
duration and the ticks go on.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer

from contract import codec
from contract.inputs import ClockTick, NodeRecord
from gpuattr.localkube import LocalKube
from gpuattr.procs import Child, settings_env
from infra.admin import create_topics
from infra.settings import KafkaSettings
from infra.topics import topic_specs
from tests.helpers import wait_for_async
from tests.kube_fixture import Rest
from tests.realkube.cluster import create_node
from tests.realkube.deploy import NAMESPACE, cluster_token, ensure_namespace

pytestmark = pytest.mark.integration

LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
WRITES = ("create", "update", "patch", "delete", "deletecollection")


async def test_the_cluster_role_reads_nodes_and_holds_its_own_lease_only(
    real_kube: LocalKube,
) -> None:
    role = Rest.admin(real_kube).as_token(await cluster_token(real_kube))
    for verb in ("list", "watch"):
        assert await role.allowed(verb, "nodes")
    for verb in ("get", *WRITES):
        assert not await role.allowed(verb, "nodes"), verb
    for verb in ("list", "watch"):  # pods no node has yet (test_pending_real.py)
        assert await role.allowed(verb, "pods")
    for verb in ("get", *WRITES):
        assert not await role.allowed(verb, "pods", ns=NAMESPACE), verb
    for resource in ("secrets", "configmaps"):
        for verb in ("get", "list", "watch", *WRITES):
            assert not await role.allowed(verb, resource, ns=NAMESPACE), (verb, resource)
    assert not await role.allowed("list", "leases", group="coordination.k8s.io", ns=NAMESPACE)
    assert not await role.allowed("create", "leases", group="coordination.k8s.io", ns="default")
    # real requests: its own Lease, created, read and renewed; another's neither read nor taken
    other = f"someone-else-{uuid.uuid4().hex[:6]}"
    admin = Rest.admin(real_kube)
    await admin.create(LEASES, {"metadata": {"name": other}, "spec": {"holderIdentity": "x"}})
    status, _ = await role.call("GET", f"{LEASES}/{other}")
    assert status == 403
    status, _ = await role.call(
        "PUT", f"{LEASES}/{other}", {"metadata": {"name": other}, "spec": {"holderIdentity": "me"}}
    )
    assert status == 403
    status, _ = await role.call("DELETE", f"{LEASES}/{other}")
    assert status == 403
    status, body = await role.call(
        "POST", LEASES, {"metadata": {"name": "gpuattr-cluster"}, "spec": {"holderIdentity": "me"}}
    )
    assert status in (201, 409), body  # 409: an earlier test's
    status, lease = await role.call("GET", f"{LEASES}/gpuattr-cluster")
    assert status == 200
    lease["spec"]["holderIdentity"] = "me-again"
    status, _ = await role.call("PUT", f"{LEASES}/gpuattr-cluster", lease)
    assert status == 200
    status, _ = await role.call("DELETE", f"{LEASES}/gpuattr-cluster")
    assert status == 403


async def holder(rest: Rest) -> str | None:
    status, lease = await rest.call("GET", f"{LEASES}/gpuattr-cluster")
    return lease["spec"].get("holderIdentity") if status == 200 else None


async def test_one_leader_deletions_and_ticks_and_a_hand_over(
    real_kube: LocalKube, kafka_bootstrap: str, tmp_path: Path
) -> None:
    token = await cluster_token(real_kube)
    admin = Rest.admin(real_kube)
    status, _ = await admin.call("DELETE", f"{LEASES}/gpuattr-cluster")  # a clean election
    assert status in (200, 404)
    config = real_kube.write_kubeconfig(tmp_path / "cluster.kubeconfig", token=token, user="c")
    kafka = KafkaSettings(
        bootstrap=kafka_bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:10]}.", partitions=3
    )
    await create_topics(kafka_bootstrap, topic_specs(kafka, kafka.topic_prefix + "worker"))
    env = {
        **settings_env(
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
        ),
    }
    replicas = {
        name: Child(
            name,
            ["cluster"],
            {**env, "GPUATTR_CLUSTER_IDENTITY": name},
            tmp_path / f"{name}.log",
        )
        for name in ("replica-a", "replica-b")
    }
    consumer = AIOKafkaConsumer(
        kafka.topic("node-events"),
        bootstrap_servers=kafka_bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    seen: list[tuple[float, int, object]] = []

    async def drain() -> None:
        batch = await consumer.getmany(timeout_ms=200)
        for part, msgs in batch.items():
            for msg in msgs:
                seen.append((time.monotonic(), part.partition, codec.decode(msg.value or b"")))

    def logs() -> str:
        return "\n".join(f"--- {c.name}\n{c.tail(30)}" for c in replicas.values())

    try:
        for child in replicas.values():
            await child.start()
        leader = await wait_for_async(lambda: holder(admin), timeout_s=60, what=logs)
        assert leader in replicas

        async def ticked(after: float) -> bool:
            await drain()
            parts = {p for t, p, r in seen if isinstance(r, ClockTick) and t > after}
            return parts == {0, 1, 2}

        await wait_for_async(lambda: ticked(0.0), timeout_s=60, what=logs)
        # every tick names its own partition
        assert all(r.partition == p for _, p, r in seen if isinstance(r, ClockTick))
        # a Node deleted in the API reaches the node's partition as a deletion
        await create_node(admin, "rk-gone", {}, 2)
        status, _ = await admin.call("DELETE", "/api/v1/nodes/rk-gone")
        assert status == 200

        async def deleted() -> bool:
            await drain()
            return any(
                isinstance(r, NodeRecord) and r.node == "rk-gone" and r.deleted for _, _, r in seen
            )

        await wait_for_async(deleted, timeout_s=60, what=logs)
        # the leader dies; the other takes over within the lease duration
        killed_at = time.monotonic()
        replicas[leader].kill()
        await replicas[leader].stop()
        survivor = next(n for n in replicas if n != leader)
        await wait_for_async(
            lambda: _holds(admin, survivor), timeout_s=30, what=lambda: f"hand-over\n{logs()}"
        )
        took_s = time.monotonic() - killed_at
        assert took_s < 6 + 4, took_s  # lease duration plus a renew deadline's slack
        handed_over = time.monotonic()
        await wait_for_async(lambda: ticked(handed_over), timeout_s=30, what=logs)
    finally:
        await consumer.stop()
        for child in replicas.values():
            await child.stop()


async def _holds(rest: Rest, name: str) -> bool:
    return await holder(rest) == name


async def lease_story(rest: Rest, leases: str, name: str) -> list[tuple[str, int]]:
    """Create, read, renew, renew with a stale version, create again, read a missing one."""
    out: list[tuple[str, int]] = []
    body = {"metadata": {"name": name}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 6}}
    status, _ = await rest.call("POST", leases, body)
    out.append(("create", status))
    status, got = await rest.call("GET", f"{leases}/{name}")
    out.append(("get", status))
    assert got["spec"]["holderIdentity"] == "a"
    renewed = {**got, "spec": {**got["spec"], "holderIdentity": "b"}}
    status, fresh = await rest.call("PUT", f"{leases}/{name}", renewed)
    out.append(("renew", status))
    assert fresh["metadata"]["resourceVersion"] != got["metadata"]["resourceVersion"]
    status, _ = await rest.call("PUT", f"{leases}/{name}", renewed)  # the old version again
    out.append(("stale renew", status))
    status, _ = await rest.call("POST", leases, body)
    out.append(("create again", status))
    status, _ = await rest.call("GET", f"{leases}/missing-{name}")
    out.append(("get missing", status))
    return out


async def test_the_api_server_double_elects_like_the_real_one(real_kube: LocalKube) -> None:
    """What the cluster role's election relies on, the same on both: the double serves the
    demo's and the fast tests' cluster role."""
    from sim.apiserver import ApiServerDouble

    name = f"conformance-{uuid.uuid4().hex[:6]}"
    admin = Rest.admin(real_kube)
    await ensure_namespace(admin, NAMESPACE)
    real = await lease_story(admin, LEASES, name)
    async with ApiServerDouble(lambda: ([], [])) as double:
        rest = Rest(double.url, "unused", admin.ssl_context)
        doubled = await lease_story(rest, LEASES, name)
    assert (
        real
        == doubled
        == [
            ("create", 201),
            ("get", 200),
            ("renew", 200),
            ("stale renew", 409),
            ("create again", 409),
            ("get missing", 404),
        ]
    )
