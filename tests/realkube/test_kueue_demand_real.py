"""Kueue's queued Workloads as demand end to end: the real API server with the genuine Kueue CRDs,
``gpuattr cluster`` (its Kueue watch, with the shipped RBAC's token) and ``gpuattr worker`` (its
demand stage) as processes on the real local Kafka.

A Workload of a training Job waits for quota in a ClusterQueue whose only flavor is the A100s,
while an A100 of that pool sits allocated and idle (its node's supply record, as the node's
worker publishes it, put straight onto demand-events: this tier has no node). The pool's demand
record must count the Workload as waiting for quota, ``demand-while-idle`` must name the
ClusterQueue, its queue, the GPUs it waits for and the idle holder; Kueue admitting it ends the
wait (the alert resolves); evicted back into its queue it waits again; finished, it is done.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from contract import codec
from contract.inputs import NodeSupply, SupplyDevice, SupplyHolder
from contract.outputs import Alert, PoolDemand
from gpuattr.localkube import LocalKube
from gpuattr.procs import Child, settings_env
from infra.admin import create_topics
from infra.settings import KafkaSettings
from infra.topics import topic_specs
from tests.helpers import wait_for
from tests.integration.test_demand_kafka import read
from tests.kube_fixture import KubeError, Rest
from tests.kueue_objects import (
    A100,
    GPU,
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
from tests.realkube.deploy import cluster_token, ensure_namespace
from tests.realkube.test_kueue_real import API, created, install_kueue

pytestmark = pytest.mark.integration

WINDOW_S = 3
POOL = f"{GPU}|product={A100}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def rfc3339(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def idle_a100(ts_ms: int) -> NodeSupply:
    """An A100 held by a notebook and idle for ten minutes, as the node's worker says it."""
    holder = SupplyHolder("research", "notebook-0", "uid-nb", "StatefulSet/notebook")
    device = SupplyDevice("GPU-a100-0", A100, "", ts_ms - 600_000, (holder,))
    return NodeSupply(ts_ms, "gpu-a", GPU, (device,))


async def test_a_queued_workload_waits_for_quota_beside_an_idle_gpu_end_to_end(
    real_kube: LocalKube, kafka_bootstrap: str, tmp_path: Path
) -> None:
    admin = Rest.admin(real_kube)
    await install_kueue(admin)
    suffix = uuid.uuid4().hex[:6]
    ns, fl, cq = f"kd-{suffix}", f"a100-{suffix}", f"team-ml-{suffix}"
    await ensure_namespace(admin, ns)
    await admin.create(f"{API}/resourceflavors", flavor(fl, A100))
    await admin.create(f"{API}/clusterqueues", cluster_queue(cq, {fl: 0}))
    await admin.create(f"{API}/namespaces/{ns}/localqueues", local_queue(ns, "training", cq))

    kafka = KafkaSettings(
        bootstrap=kafka_bootstrap, topic_prefix=f"k{uuid.uuid4().hex[:10]}.", partitions=2
    )
    app_id = kafka.topic_prefix + "worker"
    await create_topics(kafka_bootstrap, topic_specs(kafka, app_id))
    base = settings_env(
        KAFKA_BOOTSTRAP=kafka.bootstrap,
        KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
        KAFKA_PARTITIONS=kafka.partitions,
    )
    worker = Child(
        "worker",
        ["worker"],
        {
            **base,
            **settings_env(
                WORKER_APP_ID=app_id,
                WORKER_DATA_DIR=tmp_path / "worker",
                WORKER_WEB_ENABLED="false",
                ALERTS_DEMAND_WINDOW_S=WINDOW_S,
            ),
        },
        tmp_path / "worker.log",
    )
    token = await cluster_token(real_kube)
    config = real_kube.write_kubeconfig(tmp_path / "cluster.kubeconfig", token=token, user="c")
    role = Child(
        "cluster",
        ["cluster"],
        {
            **base,
            **settings_env(
                KUBE_KUBECONFIG=config,
                CLUSTER_LEADER_ELECTION="false",
                CLUSTER_TICK_INTERVAL_S=1,
                CLUSTER_KUEUE_RETRY_S=1,
            ),
        },
        tmp_path / "cluster.log",
    )
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    await worker.start()
    await role.start()

    def logs() -> str:
        return f"--- worker\n{worker.tail(30)}\n--- cluster\n{role.tail(30)}"

    try:
        async with (
            read(kafka.topic("alerts"), kafka_bootstrap) as alerts,
            read(kafka.topic("demand"), kafka_bootstrap) as demand,
        ):
            sent = await producer.send(
                kafka.topic("demand-events"), codec.encode(idle_a100(now_ms())), key=GPU.encode()
            )
            await sent
            workloads = f"{API}/namespaces/{ns}/workloads"
            wl = await admin.create(
                workloads,
                created(
                    workload(
                        "job-train-llm-4b2c1",
                        [podset("main", 2, 2)],
                        namespace=ns,
                        queue="training",
                    )
                ),
            )
            status = f"{workloads}/{wl['metadata']['name']}/status"
            message = pending_message("main", fl, 4)
            await admin.merge_patch(status, {"status": pending(message, rfc3339(now_ms()))})

            def records() -> list[PoolDemand]:
                return [v for k, v in demand.records if k == POOL and isinstance(v, PoolDemand)]

            def of(kind: str, status: str) -> list[Alert]:
                return [
                    a
                    for a in alerts.values()
                    if isinstance(a, Alert) and (a.kind, a.status) == (kind, status)
                ]

            def waits_now() -> int | None:
                """What waits for quota in the pool's latest record (0: retired, a tombstone)."""
                said = [v for k, v in demand.records if k == POOL]
                if not said:
                    return None
                return said[-1].queued_workloads if isinstance(said[-1], PoolDemand) else 0

            def queued() -> PoolDemand | None:
                found = [r for r in records() if r.queued_workloads == 1]
                return found[-1] if found else None

            record = await wait_for(queued, 90, what=lambda: f"the queued Workload\n{logs()}")
            assert (record.pending_pods, record.gpus_for_quota, record.allocated_gpus) == (0, 4, 1)
            (waiter,) = record.waiting
            assert (waiter.waits_for, waiter.queue, waiter.cluster_queue) == (
                "quota",
                "training",
                cq,
            )
            assert (waiter.uid, waiter.workload) == (wl["metadata"]["uid"], "Job/sample-job")
            assert waiter.message == message

            firing = await wait_for(
                lambda: of("demand-while-idle", "firing"), 60, what=lambda: f"fired\n{logs()}"
            )
            (alert,) = firing
            assert alert.demand is not None
            assert alert.demand.pool == POOL
            assert alert.summary.startswith(
                f"ClusterQueue {cq} (queue {ns}/training) waits for quota for 4 GPUs (1 Workload:"
            ), alert.summary
            assert "research/notebook-0 (StatefulSet/notebook) on gpu-a/GPU-a100-0" in (
                alert.summary
            )
            assert alert.figures.queued_workloads == 1

            # admitted: its pods would wait for the scheduler now; the Workload's wait is over
            await admin.merge_patch(
                status, {"status": admitted(cq, {"main": (2, fl)}, rfc3339(now_ms()))}
            )
            resolved = await wait_for(
                lambda: of("demand-while-idle", "resolved"), 60, what=lambda: f"over\n{logs()}"
            )
            assert resolved[0].id == alert.id
            # nobody waits for the A100 pool any more: it retires (a product pool lives while
            # somebody asks for it)
            assert "nobody waits any more" in resolved[0].summary
            await wait_for(lambda: waits_now() == 0, 30, what=lambda: f"retired\n{logs()}")

            # preempted back into the queue: it waits again, from the requeue
            again_ms = now_ms()
            at = rfc3339(again_ms)
            await admin.merge_patch(
                status,
                {
                    "status": {
                        **evicted("Preempted to accommodate a workload", at, at),
                        "admission": None,
                    }
                },
            )
            requeued = await wait_for(
                lambda: [r for r in records() if r.queued_workloads == 1][1:],
                60,
                what=lambda: f"waiting again\n{logs()}",
            )
            assert requeued[-1].waiting[0].reason == "Preempted"

            # finished: done for good
            await admin.merge_patch(
                status, {"status": finished("Succeeded", "Job finished", rfc3339(now_ms()))}
            )
            await wait_for(lambda: waits_now() == 0, 60, what=lambda: f"finished\n{logs()}")
    finally:
        await role.stop()
        await worker.stop()
        await producer.stop()
        # the API server is the session's: leave no Kueue object behind
        for path in (
            f"{API}/namespaces/{ns}/workloads",
            f"{API}/namespaces/{ns}/localqueues",
        ):
            await admin.call("DELETE", path)
        for path in (f"{API}/clusterqueues/{cq}", f"{API}/resourceflavors/{fl}"):
            with contextlib.suppress(KubeError):
                await admin.delete(path)
