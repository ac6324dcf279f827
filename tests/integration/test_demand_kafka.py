"""The demand stage end to end on real Kafka: a worker process, records published straight onto
demand-events (pending pods and a node's supply keyed by resource, clock ticks into every
partition), its demand records, tombstones and alerts read back from the topics."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from contract import codec
from contract.inputs import (
    ClockTick,
    GpuRequest,
    NodeSupply,
    OwnerRef,
    PendingPod,
    SupplyDevice,
    SupplyHolder,
)
from contract.outputs import Alert, PoolDemand
from gpuattr.procs import Child, settings_env
from infra.admin import create_topics
from infra.settings import KafkaSettings
from infra.topics import topic_specs
from tests.helpers import wait_for

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
KEY = GPU.encode()
PARTITIONS = 4
WINDOW_S = 5


@dataclass
class Read:
    """Every (key, value) of a topic, a tombstone's value ``None``, in arrival order."""

    records: list[tuple[str, Any]] = field(default_factory=list)

    def values(self) -> list[Any]:
        return [v for _, v in self.records]


@contextlib.asynccontextmanager
async def read(topic: str, bootstrap: str, decode: bool = True) -> AsyncIterator[Read]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    out = Read()

    async def pump() -> None:
        async for msg in consumer:
            key = (msg.key or b"").decode()
            value = msg.value
            out.records.append(
                (key, None if value is None else codec.decode(value) if decode else value)
            )

    task = asyncio.create_task(pump(), name=f"read-{topic}")
    try:
        yield out
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await consumer.stop()


@contextlib.asynccontextmanager
async def demand_worker(
    bootstrap: str, workdir: Path
) -> AsyncIterator[tuple[KafkaSettings, AIOKafkaProducer, Child]]:
    kafka = KafkaSettings(
        bootstrap=bootstrap, topic_prefix=f"d{uuid.uuid4().hex[:10]}.", partitions=PARTITIONS
    )
    app_id = kafka.topic_prefix + "worker"
    await create_topics(bootstrap, topic_specs(kafka, app_id))
    env = settings_env(
        KAFKA_BOOTSTRAP=bootstrap,
        KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
        KAFKA_PARTITIONS=PARTITIONS,
        WORKER_APP_ID=app_id,
        WORKER_DATA_DIR=workdir / "worker",
        WORKER_WEB_ENABLED="false",
        ALERTS_DEMAND_WINDOW_S=WINDOW_S,
    )
    worker = Child("worker", ["worker"], env, workdir / "worker.log")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    await worker.start()
    try:
        yield kafka, producer, worker
    finally:
        await worker.stop()
        await producer.stop()


async def publish(producer: AIOKafkaProducer, topic: str, records: Iterable[object]) -> None:
    """Keyed records by their resource; clock ticks into every partition (no key). Batched:
    the sends are queued, then awaited together."""
    sent = []
    for r in records:
        if isinstance(r, ClockTick):
            for p in range(PARTITIONS):
                tick = ClockTick(p, r.ts_ms)
                sent.append(await producer.send(topic, codec.encode(tick), partition=p))
        else:
            sent.append(await producer.send(topic, codec.encode(r), key=KEY))
    await asyncio.gather(*sent)


def pending(name: str, ts_ms: int, state: str = "pending") -> PendingPod:
    return PendingPod(
        ts_ms,
        "ml",
        name,
        f"uid-{name}",
        0,
        (GpuRequest(GPU, 1),),
        state=state,  # type: ignore[arg-type]
        node="n2" if state == "bound" else "",
        workload=OwnerRef("Deployment", "inference"),
        scheduled_status="False",
        scheduled_reason="Unschedulable",
        scheduled_message="0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
    )


def supply(ts_ms: int, idle_since_ms: int | None) -> NodeSupply:
    holder = SupplyHolder("research", "notebook-0", "uid-nb", "StatefulSet/notebook")
    device = SupplyDevice("GPU-1", "NVIDIA-A100-SXM4-80GB", "", idle_since_ms, (holder,))
    return NodeSupply(ts_ms, "n1", GPU, (device,))


async def test_demand_while_idle_fires_names_the_idle_holders_and_resolves_when_bound(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    async with demand_worker(kafka_bootstrap, tmp_path) as (kafka, producer, worker):
        events = kafka.topic("demand-events")
        async with (
            read(kafka.topic("alerts"), kafka_bootstrap) as alerts,
            read(kafka.topic("demand"), kafka_bootstrap) as demand,
        ):
            ticks = [ClockTick(0, t * 1000) for t in range(2, 8)]
            await publish(producer, events, [supply(0, 0), pending("waiter", 1000), *ticks])

            def fired() -> list[Alert]:
                return [a for a in alerts.values() if isinstance(a, Alert)]

            await wait_for(fired, timeout_s=90, what=lambda: f"the alert\n{worker.tail(40)}")
            await publish(
                producer,
                events,
                [pending("waiter", 9000, "bound"), NodeSupply(10_000, "n1", GPU)],
            )
            await wait_for(
                lambda: len(fired()) == 2 and any(v is None for v in demand.values()),
                timeout_s=60,
                what=lambda: f"the resolution and the tombstone\n{worker.tail(40)}",
            )
    first, resolved = fired()
    assert (first.status, resolved.status) == ("firing", "resolved")
    assert first.id == resolved.id
    assert first.kind == "demand-while-idle"
    assert first.ts_ms == WINDOW_S * 1000  # the first tick at the window's end
    assert [(h.namespace, h.pod) for h in first.holders] == [("research", "notebook-0")]
    assert "research/notebook-0 (StatefulSet/notebook) on n1/GPU-1" in first.summary
    assert first.summary.startswith("1 pod waits for nvidia.com/gpu (oldest 5 s)")
    assert first.demand is not None
    assert [w.pod for w in first.demand.waiting] == ["waiter"]
    assert "nobody waits" in resolved.summary
    assert {k for k, _ in demand.records} == {GPU}
    shapes = [
        (v.pending_pods, v.allocated_gpus, len(v.idle)) if isinstance(v, PoolDemand) else v
        for v in demand.values()
    ]
    # supply alone, the pod waiting, the pod bound, the GPU freed: a tombstone
    assert shapes == [(0, 1, 1), (1, 1, 1), (0, 1, 1), None]


def live_keys(changelog: Read) -> set[str]:
    """What compaction keeps: each key whose latest record is not a tombstone."""
    latest: dict[str, object] = {}
    for key, value in changelog.records:
        latest[key] = value
    return {k for k, v in latest.items() if v is not None}


async def test_soak_pending_and_bound_cycles_leave_only_the_live_pending_pods(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    cycles = 10_000
    async with demand_worker(kafka_bootstrap, tmp_path) as (kafka, producer, worker):
        events = kafka.topic("demand-events")
        app_id = kafka.topic_prefix + "worker"
        records: list[object] = []
        for i in range(cycles):
            records += [pending(f"p{i}", 10 * i + 1), pending(f"p{i}", 10 * i + 5, "bound")]
        left = [pending(f"left-{i}", 10 * cycles + i) for i in range(3)]
        async with (
            read(kafka.topic("demand"), kafka_bootstrap) as demand,
            read(f"{app_id}-demand-pods-changelog", kafka_bootstrap, decode=False) as pods,
        ):
            await publish(producer, events, [*records, *left])

            def settled() -> bool:
                last = demand.values()[-1] if demand.records else None
                return isinstance(last, PoolDemand) and last.pending_pods == 3

            await wait_for(
                settled, timeout_s=240, every_s=0.5, what=lambda: f"the soak\n{worker.tail(40)}"
            )
            expected = {f"{GPU}|ml/left-{i}" for i in range(3)}
            await wait_for(
                lambda: live_keys(pods) == expected,
                timeout_s=60,
                every_s=0.5,
                what=lambda: f"the changelog's live keys: {sorted(live_keys(pods))[:10]}",
            )
    assert len(pods.records) >= 2 * cycles  # every pod was written, and removed
    final = demand.values()[-1]
    assert isinstance(final, PoolDemand)
    assert [w.pod for w in final.waiting] == ["left-0", "left-1", "left-2"]
