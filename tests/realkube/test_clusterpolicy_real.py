"""The GPU Operator's ClusterPolicy on the real API server: the genuine CRD (vendored,
``tests/fixtures/gpu-operator/``) applies; the cluster role's own ServiceAccount token lists and
watches ClusterPolicies and can neither write them (nor their status) nor read Secrets; and the
cluster role (``gpuattr cluster``, as a process, on the real local Kafka) reports a cluster
without the CRD as such, then — once the CRD is installed — publishes a ClusterPolicy like the
seed's lab, with the status the operator writes through the status subresource, into every
partition of the input topic with no key, and its deletion the same way; the CRD removed under
its watch is that state again, not a crash.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer

from contract import codec
from contract.inputs import ClusterPolicyRecord, OperandSpec
from gpuattr.localkafka import free_port
from gpuattr.localkube import LocalKube
from gpuattr.procs import Child, settings_env
from infra.admin import create_topics
from infra.settings import KafkaSettings
from infra.topics import topic_specs
from tests.gpuoperator_objects import NOT_READY, not_ready_status, seed_policy
from tests.helpers import wait_for_async
from tests.kube_fixture import Rest
from tests.realkube.crds import install_crds
from tests.realkube.deploy import NAMESPACE, cluster_token

pytestmark = pytest.mark.integration

CRD_FILE = (
    Path(__file__).parent.parent / "fixtures" / "gpu-operator" / "nvidia.com_clusterpolicies.yaml"
)
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CRD = f"{CRDS}/clusterpolicies.nvidia.com"
POLICIES = "/apis/nvidia.com/v1/clusterpolicies"
WRITES = ("create", "update", "patch", "delete", "deletecollection")
PARTITIONS = 3
SERVED = "gpuattr_cluster_clusterpolicy_served"
NOT_SERVED = 'gpuattr_agent_source_errors_total{error="not_served",source="clusterpolicy"}'


async def install_crd(admin: Rest) -> None:
    await install_crds(admin, CRD_FILE)


async def remove_crd(admin: Rest) -> None:
    """No CRD: the GPU Operator not installed (its objects go with it)."""
    status, body = await admin.call("DELETE", CRD)
    assert status in (200, 404), body

    async def gone() -> bool:
        crd_status, _ = await admin.call("GET", CRD)
        served, _ = await admin.call("GET", POLICIES)
        return crd_status == 404 and served == 404

    await wait_for_async(gone, timeout_s=60, what="the CRD removed and no longer served")


async def allowed(rest: Rest, verb: str, resource: str, subresource: str = "") -> bool:
    """SelfSubjectAccessReview on a cluster-scoped ``nvidia.com`` resource (or subresource)."""
    review = await rest.create(
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "verb": verb,
                    "group": "nvidia.com",
                    "resource": resource,
                    "subresource": subresource,
                }
            },
        },
    )
    return bool(review["status"].get("allowed"))


async def test_the_crd_applies_and_the_cluster_roles_token_only_reads_policies(
    real_kube: LocalKube,
) -> None:
    admin = Rest.admin(real_kube)
    await install_crd(admin)
    name = f"policy-{uuid.uuid4().hex[:6]}"
    await admin.create(POLICIES, seed_policy(name))
    role = admin.as_token(await cluster_token(real_kube))

    for verb in ("list", "watch"):
        assert await allowed(role, verb, "clusterpolicies"), verb
    for verb in ("get", *WRITES):
        assert not await allowed(role, verb, "clusterpolicies"), verb
    for verb in ("get", "update", "patch"):
        assert not await allowed(role, verb, "clusterpolicies", "status"), verb
    for verb in ("get", "list", "watch"):
        assert not await role.allowed(verb, "secrets", ns=NAMESPACE), verb
        assert not await role.allowed(verb, "secrets"), verb  # cluster-wide

    # real requests with its token
    status, listing = await role.call("GET", POLICIES)
    assert status == 200, listing
    assert name in {p["metadata"]["name"] for p in listing["items"]}
    status, _ = await role.call("GET", f"{POLICIES}/{name}")
    assert status == 403  # list and watch only, never get
    patch = {"spec": {"dcgmExporter": {"enabled": False}}}
    for path, body in ((f"{POLICIES}/{name}", patch), (f"{POLICIES}/{name}/status", {})):
        status, _ = await role.call(
            "PATCH", path, body, content_type="application/merge-patch+json"
        )
        assert status == 403, path
    status, _ = await role.call("DELETE", f"{POLICIES}/{name}")
    assert status == 403
    status, _ = await role.call("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets")
    assert status == 403
    await admin.delete(f"{POLICIES}/{name}")


async def metric(port: int, name: str) -> float | None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as resp,
    ):
        text = await resp.text()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


async def test_the_cluster_role_publishes_the_policy_and_its_status_into_every_partition(
    real_kube: LocalKube, kafka_bootstrap: str, tmp_path: Path
) -> None:
    admin = Rest.admin(real_kube)
    token = await cluster_token(real_kube)
    await remove_crd(admin)  # a cluster without the GPU Operator, to begin with
    config = real_kube.write_kubeconfig(tmp_path / "cluster.kubeconfig", token=token, user="c")
    kafka = KafkaSettings(
        bootstrap=kafka_bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:10]}.", partitions=PARTITIONS
    )
    await create_topics(kafka_bootstrap, topic_specs(kafka, kafka.topic_prefix + "worker"))
    port = free_port()
    role = Child(
        "cluster",
        ["cluster"],
        settings_env(
            KAFKA_BOOTSTRAP=kafka.bootstrap,
            KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
            KAFKA_PARTITIONS=PARTITIONS,
            KUBE_KUBECONFIG=config,
            CLUSTER_LEADER_ELECTION="false",
            CLUSTER_TICK_INTERVAL_S=5,
            CLUSTER_POLICY_CRD_RETRY_S=0.5,
            OBSERVE_CLUSTER_PORT=port,
        ),
        tmp_path / "cluster.log",
    )
    consumer = AIOKafkaConsumer(
        kafka.topic("node-events"),
        bootstrap_servers=kafka_bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    seen: list[tuple[int, bytes | None, Any]] = []

    async def policies() -> list[tuple[int, bytes | None, ClusterPolicyRecord]]:
        batch = await consumer.getmany(timeout_ms=200)
        for part, msgs in batch.items():
            seen.extend((part.partition, m.key, codec.decode(m.value or b"")) for m in msgs)
        return [(p, k, r) for p, k, r in seen if isinstance(r, ClusterPolicyRecord)]

    def logs() -> str:
        return role.tail(40)

    try:
        await role.start()

        async def not_installed() -> bool:
            try:
                refused = await metric(port, NOT_SERVED) or 0
                return refused >= 2 and await metric(port, SERVED) == 0  # and tried again
            except aiohttp.ClientError:
                return False  # not listening yet

        await wait_for_async(not_installed, timeout_s=60, what=logs)
        assert "GPU Operator is not installed" in role.tail(200)
        assert await policies() == []

        # the GPU Operator arrives: its CRD, the seed's ClusterPolicy, then its status as the
        # operator writes it (the status subresource: a status in the object itself is dropped)
        await install_crd(admin)
        created = await admin.create(POLICIES, {**seed_policy(), "status": not_ready_status()})
        assert "status" not in created
        await admin.merge_patch(f"{POLICIES}/cluster-policy/status", {"status": not_ready_status()})

        async def reported() -> list[ClusterPolicyRecord] | None:
            found = [r for _, _, r in await policies() if r.state == "notReady"]
            return found if len(found) >= PARTITIONS else None

        await wait_for_async(reported, timeout_s=60, what=logs)
        seen_policies = await policies()
        assert all(key is None for _, key, _ in seen_policies)  # no key: partition records
        ready = [(p, r) for p, _, r in seen_policies if r.state == "notReady"]
        assert sorted(p for p, _ in ready) == list(range(PARTITIONS))  # once in each partition
        record = ready[0][1]
        assert record.name == "cluster-policy"
        assert (record.mig_strategy, record.namespace, record.deleted) == (
            "single",
            "gpu-operator",
            False,
        )
        operands = {o.operand: o.enabled for o in record.operands}
        assert operands["driver"] is False  # the host's
        assert operands["toolkit"] is True
        assert operands["migManager"] is True  # on, defaulting nodes to all-disabled
        assert OperandSpec("dcgmExporter", True) in record.operands
        assert [(c.type, c.status, c.message) for c in record.conditions] == [
            ("Ready", "False", ""),
            ("Error", "True", NOT_READY),
        ]
        assert record.generation == 1
        assert record.resource_version
        assert await metric(port, SERVED) == 1

        await admin.delete(f"{POLICIES}/cluster-policy")

        async def deleted() -> bool:
            gone = {p for p, _, r in await policies() if r.deleted and r.name == "cluster-policy"}
            return gone == set(range(PARTITIONS))

        await wait_for_async(deleted, timeout_s=60, what=logs)

        # the GPU Operator uninstalled while the role watches: its watch answers 404, the state
        # is said again, and the role goes on
        refused = await metric(port, NOT_SERVED) or 0
        await remove_crd(admin)

        async def uninstalled() -> bool:
            again = await metric(port, NOT_SERVED) or 0
            return again > refused and await metric(port, SERVED) == 0

        await wait_for_async(uninstalled, timeout_s=60, what=logs)
        assert role.running
    finally:
        await consumer.stop()
        await role.stop()


async def test_the_double_answers_a_missing_crd_like_the_real_server(real_kube: LocalKube) -> None:
    """Without the CRD both answer the path with the same plain-text 404 (the watcher reads a
    watch's as "not served", :data:`agents.kube.watch.NOT_FOUND_PAGE`)."""
    from sim.apiserver import ApiServerDouble

    admin = Rest.admin(real_kube)
    await remove_crd(admin)
    real = [await admin.call("GET", POLICIES + query) for query in ("", "?watch=1")]
    async with ApiServerDouble(lambda: ([], [])) as double:
        rest = Rest(double.url, "unused", admin.ssl_context)
        doubled = [await rest.call("GET", POLICIES + query) for query in ("", "?watch=1")]
    assert real == doubled == [(404, "404 page not found\n")] * 2
