"""The GPU Operator's DRA stack intent on the real API server: the genuine GPUCluster and
NVIDIADriver CRDs (vendored, ``tests/fixtures/gpu-operator/``) apply and enforce their own rules;
the cluster role's ServiceAccount token lists and watches them and can neither read one by name
nor write it or its status; and the cluster role's own watchers, with that token, publish each
GPUCluster state as the operator's controller writes it (``controllers/gpucluster_controller.go``:
no status yet, ``notReady`` waiting on operand pods, ``ready``, ``notReady`` refused while a
ClusterPolicy exists) and the NVIDIADriver that owns a node's driver.

Not real here: no GPU Operator, kubelet or Kafka. The worker's pure core
(:class:`streams.core.flow.processor.Processor`, what its Faust agent runs record by record) is
fed the watchers' records through the wire codec, beside the node's labels and operand pods as
the agent would publish them (a DRA node whose kubelet plugin crash loops, later Ready), and
must reach the stack verdict for each state: broken at the DRA driver with the GPUCluster's own
word, ready, and ``conflict`` once a ClusterPolicy exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agents.kube.policywatch import WATCHERS, OperatorRecord
from agents.kube.watch import make_api_client
from contract.codec import WIRE
from contract.inputs import (
    ClusterPolicyRecord,
    ContainerProgress,
    GpuClusterRecord,
    NodeRecord,
    NvidiaDriverRecord,
    OperandPod,
    OperandPods,
)
from contract.outputs import NodeStatus
from gpuattr.localkube import LocalKube
from infra.settings import KubeSettings
from streams.core.flow.processor import Processor, Tables
from tests.gpuoperator_objects import (
    GPU_CLUSTER,
    WAITING_FOR_OPERANDS,
    gpu_cluster,
    gpu_cluster_status,
    nvidia_driver,
    refused_message,
    seed_policy,
)
from tests.helpers import wait_for
from tests.kube_fixture import KubeError, Rest
from tests.realkube.crds import install_crds
from tests.realkube.deploy import cluster_token
from tests.realkube.test_clusterpolicy_real import POLICIES, allowed, install_crd

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent.parent / "fixtures" / "gpu-operator"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CLUSTERS = "/apis/nvidia.com/v1alpha1/gpuclusters"
DRIVERS = "/apis/nvidia.com/v1alpha1/nvidiadrivers"
WRITES = ("create", "update", "patch", "delete", "deletecollection")
NODE = "rk-dra-stack"
NS = "gpu-operator"
DRA_LABELS = {
    f"nvidia.com/gpu.deploy.{x}": "true"
    for x in ("driver", "dra-driver", "dra-validator", "dcgm-dra", "dcgm-exporter-dra")
}


async def install_dra_crds(admin: Rest) -> None:
    await install_crds(
        admin, HERE / "nvidia.com_gpuclusters.yaml", HERE / "nvidia.com_nvidiadrivers.yaml"
    )


async def test_the_crds_apply_enforce_their_rules_and_the_cluster_role_only_reads_them(
    real_kube: LocalKube,
) -> None:
    admin = Rest.admin(real_kube)
    await install_dra_crds(admin)
    # the CRD's own rule: a singleton named gpu-cluster, refused otherwise by the server
    status, body = await admin.call("POST", CLUSTERS, gpu_cluster("config"))
    assert status == 422, body
    assert "GPUCluster is a singleton" in str(body)
    role = admin.as_token(await cluster_token(real_kube))
    for resource in ("gpuclusters", "nvidiadrivers"):
        for verb in ("list", "watch"):
            assert await allowed(role, verb, resource), (resource, verb)
        for verb in ("get", *WRITES):
            assert not await allowed(role, verb, resource), (resource, verb)
        for verb in ("get", "update", "patch"):
            assert not await allowed(role, verb, resource, "status"), (resource, verb)
    # real requests with its token
    await admin.create(CLUSTERS, gpu_cluster())
    try:
        status, listing = await role.call("GET", CLUSTERS)
        assert status == 200, listing
        assert [c["metadata"]["name"] for c in listing["items"]] == [GPU_CLUSTER]
        status, _ = await role.call("GET", f"{CLUSTERS}/{GPU_CLUSTER}")
        assert status == 403  # list and watch only
        status, _ = await role.call(
            "PATCH",
            f"{CLUSTERS}/{GPU_CLUSTER}/status",
            {"status": gpu_cluster_status(True)},
            content_type="application/merge-patch+json",
        )
        assert status == 403
    finally:
        await admin.delete(f"{CLUSTERS}/{GPU_CLUSTER}")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def operand(app: str, *, ready: bool, init: tuple[str, ...] = (), restarts: int = 0) -> OperandPod:
    done = tuple(
        ContainerProgress(i, "terminated", ready=True, reason="Completed", exit_code=0)
        for i in init
    )
    if ready:
        main = ContainerProgress(app, "running", ready=True)
    else:
        main = ContainerProgress(app, "waiting", restarts=restarts, reason="CrashLoopBackOff")
    return OperandPod(
        NS, f"{app}-x7k2p", app, "Running", ready, restarts, init=done, containers=(main,)
    )


#: the driver pod of an NVIDIADriver's node pool (``nvidia-<driverType>-driver-<os>-<hash>``)
DRIVER_APP = "nvidia-gpu-driver-ubuntu22.04-7c4d8b5f9"


def operand_pods(plugin_ready: bool, driver: bool) -> tuple[OperandPod, ...]:
    own = (operand(DRIVER_APP, ready=True),) if driver else ()
    return (
        *own,
        operand(
            "nvidia-dra-driver-kubelet-plugin",
            ready=plugin_ready,
            init=("driver-validation",),
            restarts=0 if plugin_ready else 6,
        ),
        operand("nvidia-dcgm-exporter-dra", ready=True),
        operand("nvidia-operator-validator", ready=plugin_ready, init=("gpu-validation",)),
    )


@dataclass
class Worker:
    """The worker's pure core fed the cluster role's records as published (through the wire
    codec), and the node's labels and operand pods as its agent would publish them."""

    out: list[OperatorRecord]
    processor: Processor = field(default_factory=lambda: Processor(Tables.in_memory()))
    fed: int = 0
    status: NodeStatus | None = None

    def handle(self, record: object) -> None:
        wired = WIRE.decode(WIRE.encode(record))
        assert wired == record
        for o in self.processor.handle(wired):
            if isinstance(o, NodeStatus) and o.node == NODE:
                self.status = o

    def catch_up(self) -> NodeStatus | None:
        while self.fed < len(self.out):
            self.handle(self.out[self.fed])
            self.fed += 1
        return self.status

    def node(self, labels: dict[str, str], plugin_ready: bool) -> NodeStatus | None:
        ts = now_ms()
        owned = "nvidia.com/gpu-operator.driver.owner" in labels
        self.handle(NodeRecord(NODE, ts, tuple(sorted(labels.items()))))
        self.handle(OperandPods(NODE, ts, NS, operand_pods(plugin_ready, owned)))
        return self.status


@contextlib.asynccontextmanager
async def role_watching(kube: LocalKube, tmp_path: Path) -> AsyncIterator[list[OperatorRecord]]:
    """The cluster role's GPU Operator watchers, as its ServiceAccount."""
    token = await cluster_token(kube)
    config = kube.write_kubeconfig(tmp_path / "cluster.kubeconfig", token=token, user="cluster")
    settings = KubeSettings(kubeconfig=config, watch_timeout_s=300, max_backoff_s=0.5)
    api = await make_api_client(settings)
    out: list[OperatorRecord] = []

    async def emit(record: OperatorRecord) -> None:
        out.append(record)

    watchers = [
        kind(api=api, emit=emit, now_ms=now_ms, settings=settings, retry_s=0.5) for kind in WATCHERS
    ]
    tasks = [asyncio.create_task(w.run(), name=f"{w.kind}-watch") for w in watchers]
    try:
        yield out
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await api.close()


def latest(out: list[OperatorRecord], kind: type[Any], name: str) -> Any:
    found = None
    for rec in out:
        if isinstance(rec, kind) and rec.name == name:
            found = rec
    return found


async def test_the_stack_verdict_for_each_gpucluster_state(
    real_kube: LocalKube, tmp_path: Path
) -> None:
    admin = Rest.admin(real_kube)
    await install_dra_crds(admin)
    await install_crd(admin)  # the ClusterPolicy's, for the conflict
    for path in (f"{CLUSTERS}/{GPU_CLUSTER}", f"{DRIVERS}/default", f"{POLICIES}/cluster-policy"):
        with contextlib.suppress(KubeError):
            await admin.delete(path)
    try:
        async with role_watching(real_kube, tmp_path) as out:
            worker = Worker(out)
            worker.node(DRA_LABELS, plugin_ready=False)

            # the GPUCluster created, no status yet: intent read, the crash loop judged
            await admin.create(CLUSTERS, gpu_cluster())

            def cluster(state: str) -> GpuClusterRecord | None:
                rec = latest(out, GpuClusterRecord, GPU_CLUSTER)
                return rec if rec is not None and rec.state == state and not rec.deleted else None

            created = await wait_for(lambda: cluster(""), 30, what="the GPUCluster published")
            assert created.operands == ()  # DCGM and dcgm-exporter unset: the defaults
            status = worker.catch_up()
            assert status is not None
            assert (status.state, status.first_broken) == ("broken", "dra-driver")
            planes = {p.name: p for p in status.planes}
            assert (planes["dcgm"].state, planes["dcgm"].intent.decided_by) == (
                "disabled",
                "operator-default",
            )
            assert planes["driver"].intent.kind == "host"

            # the controller waits on the operand pods
            await admin.merge_patch(
                f"{CLUSTERS}/{GPU_CLUSTER}/status", {"status": gpu_cluster_status(False)}
            )
            await wait_for(lambda: cluster("notReady"), 30, what="notReady published")
            status = worker.catch_up()
            assert status is not None
            assert status.policy is not None
            assert (status.policy.kind, status.policy.state, status.policy.message) == (
                "GPUCluster",
                "notReady",
                WAITING_FOR_OPERANDS,
            )
            assert status.summary.startswith(
                f"DRA driver not ready on {NODE} (CrashLoopBackOff, 6 restarts)"
            )

            # the plugin recovers; the controller says ready
            worker.node(DRA_LABELS, plugin_ready=True)
            await admin.merge_patch(
                f"{CLUSTERS}/{GPU_CLUSTER}/status", {"status": gpu_cluster_status(True)}
            )
            await wait_for(lambda: cluster("ready"), 30, what="ready published")
            status = worker.catch_up()
            assert status is not None
            assert (status.state, status.summary) == ("ready", f"GPU stack ready on {NODE}")

            # an NVIDIADriver owns the node's driver
            await admin.create(DRIVERS, nvidia_driver())
            owned = {**DRA_LABELS, "nvidia.com/gpu-operator.driver.owner": "default"}
            await wait_for(
                lambda: latest(out, NvidiaDriverRecord, "default"), 30, what="the NVIDIADriver"
            )
            worker.catch_up()
            status = worker.node(owned, plugin_ready=True)
            assert status is not None
            driver = next(p for p in status.planes if p.name == "driver")
            assert (driver.intent.kind, driver.intent.decided_by) == ("deploy", "nvidia-driver")
            assert driver.intent.detail.startswith("NVIDIADriver default (gpu 580.95.05)")
            assert status.state == "ready"

            # a ClusterPolicy appears: the controller refuses the GPUCluster
            await admin.create(POLICIES, seed_policy())
            await admin.merge_patch(
                f"{CLUSTERS}/{GPU_CLUSTER}/status",
                {"status": gpu_cluster_status(False, "PrerequisiteNotMet", refused_message())},
            )
            await wait_for(
                lambda: latest(out, ClusterPolicyRecord, "cluster-policy"), 30, what="the policy"
            )
            await wait_for(lambda: cluster("notReady"), 30, what="refused, published")
            status = worker.catch_up()
            assert status is not None
            assert status.state == "conflict"
            assert "ClusterPolicy cluster-policy and GPUCluster gpu-cluster both exist" in (
                status.summary
            )
            assert refused_message() in status.summary

            # the ClusterPolicy removed: published deleted, the conflict gone
            await admin.delete(f"{POLICIES}/cluster-policy")

            def policy_gone() -> bool:
                rec = latest(out, ClusterPolicyRecord, "cluster-policy")
                return rec is not None and rec.deleted

            await wait_for(policy_gone, 30, what="the policy's deletion published")
            status = worker.catch_up()
            assert status is not None
            assert status.state == "ready"
    finally:
        for path in (
            f"{CLUSTERS}/{GPU_CLUSTER}",
            f"{DRIVERS}/default",
            f"{POLICIES}/cluster-policy",
        ):
            with contextlib.suppress(KubeError):
                await admin.delete(path)
