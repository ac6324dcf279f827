"""``gpuattr report`` against a real attribution topic holding a schedule with known times, and
the GPU-hours waited from a real demand-events topic."""

from __future__ import annotations

import asyncio
import csv
import os
import sys
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from bench.kafka_io import count
from contract import codec
from contract.inputs import GpuRequest, OwnerRef, PendingPod, PendingPodList
from contract.records import replace
from infra.admin import create_topics
from infra.settings import KafkaSettings
from infra.topics import topic_specs
from tests.helpers import wait_for_async
from tests.unit.test_views_report import ALICE, BOB, TRAIN, ev

pytestmark = pytest.mark.integration


async def test_report_from_the_topic_matches_known_holding_times(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka = KafkaSettings(bootstrap=kafka_bootstrap, topic_prefix=f"r{uuid.uuid4().hex[:8]}.")
    await create_topics(kafka_bootstrap, topic_specs(kafka, kafka.topic_prefix + "worker"))
    # train: GPU-A for 10 min, busy 60 %; alice + bob share GPU-S (2 replicas) for 10 min,
    # then alice alone for 5 min. One event every 10 s, in a mixed order across partitions.
    events = []
    for t in range(0, 901, 10):
        if t <= 600:
            events.append(ev("GPU-A", t, 60, (TRAIN,)))
        events.append(ev("GPU-S", t, 30, (ALICE, BOB) if t < 600 else (ALICE,), sharing="mps"))
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        for e in reversed(events):  # arrival order must not matter
            await producer.send(
                kafka.topic("attribution"),
                codec.encode(e),
                key=f"{e.node}/{e.device_uuid}".encode(),
            )
        await producer.flush()
    finally:
        await producer.stop()

    async def all_readable() -> bool:  # a fresh topic's leaders settle first
        return await count(kafka_bootstrap, kafka.topic("attribution")) == len(events)

    await wait_for_async(all_readable, timeout_s=30, what="the events on the topic")
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gpuattr.cli", "report", "--since", "1h", "--max-gap", "30"),
        *("--csv", str(tmp_path / "report.csv")),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={
            **os.environ,
            "PYTHONPATH": str(Path(__file__).parents[2]),
            "GPUATTR_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "GPUATTR_KAFKA_TOPIC_PREFIX": kafka.topic_prefix,
        },
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    assert "GPU allocation, last 1h (152 attribution events)" in out.decode()  # the table
    assert " INFO " not in err.decode()  # a terminal tool: no library chatter by default
    with (tmp_path / "report.csv").open() as f:
        rows = {(r["namespace"], r["workload"]): r for r in csv.DictReader(f)}
    assert set(rows) == {
        ("ml", "Job/train"),
        ("dev", "StatefulSet/alice"),
        ("dev", "StatefulSet/bob"),
    }
    train = rows["ml", "Job/train"]
    assert float(train["held_gpu_hours"]) == pytest.approx(600 / 3600, abs=1e-4)
    assert float(train["busy_gpu_hours"]) == pytest.approx(0.6 * 600 / 3600, abs=1e-4)
    assert float(train["idle_share"]) == 0
    alice, bob = rows["dev", "StatefulSet/alice"], rows["dev", "StatefulSet/bob"]
    assert float(alice["held_gpu_hours"]) == pytest.approx(900 * 0.5 / 3600, abs=1e-4)
    assert float(bob["held_gpu_hours"]) == pytest.approx(600 * 0.5 / 3600, abs=1e-4)
    assert alice["busy_gpu_hours"] == bob["busy_gpu_hours"] == ""  # shared: not measurable


async def test_report_gpu_hours_waited_from_the_demand_events_topic(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Pending pods on a real demand-events topic, each record once per partition it is sent to
    (a pod's record per resource it asks for, a list into every partition): each pod counts
    once per pool, from its creation to its bound or deleted record."""
    kafka = KafkaSettings(bootstrap=kafka_bootstrap, topic_prefix=f"w{uuid.uuid4().hex[:8]}.")
    await create_topics(kafka_bootstrap, topic_specs(kafka, kafka.topic_prefix + "worker"))
    now_ms = int(time.time() * 1000)
    m = 60_000
    infer = OwnerRef("Deployment", "infer")
    both = (GpuRequest("nvidia.com/gpu", 2), GpuRequest("nvidia.com/gpu.shared", 1))
    a = PendingPod(now_ms - 30 * m, "serve", "infer-a", "ua", now_ms - 30 * m, both, workload=infer)
    a_bound = replace(a, ts_ms=now_ms - 10 * m, state="bound", node="gpu-1")
    b = PendingPod(now_ms - 20 * m, "lab", "solo", "ub", now_ms - 20 * m, both[:1])
    b_deleted = replace(b, ts_ms=now_ms - 5 * m, state="deleted")
    listed = PendingPodList(now_ms - 15 * m, (a, b))
    topic = kafka.topic("demand-events")
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        for record in (a, a_bound):
            for r in record.requests:  # one copy per resource it asks for
                await producer.send(topic, codec.encode(record), key=r.resource.encode())
        for record in (b, b_deleted):
            await producer.send(topic, codec.encode(record), key=b"nvidia.com/gpu")
        for partition in range(kafka.partitions):
            await producer.send(topic, codec.encode(listed), partition=partition)
        await producer.flush()
    finally:
        await producer.stop()
    sent = 4 + 2 + kafka.partitions

    async def all_readable() -> bool:
        return await count(kafka_bootstrap, topic) == sent

    await wait_for_async(all_readable, timeout_s=30, what="the pending pods on the topic")
    waited = tmp_path / "waited.csv"
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gpuattr.cli", "report", "--since", "1h"),
        *("--waited-csv", str(waited)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={
            **os.environ,
            "PYTHONPATH": str(Path(__file__).parents[2]),
            "GPUATTR_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "GPUATTR_KAFKA_TOPIC_PREFIX": kafka.topic_prefix,
        },
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    assert "GPU-hours waited" in out.decode()
    with waited.open() as f:
        rows = {(r["namespace"], r["workload"], r["pool"]): r for r in csv.DictReader(f)}
    assert set(rows) == {
        ("serve", "Deployment/infer", "nvidia.com/gpu"),
        ("serve", "Deployment/infer", "nvidia.com/gpu.shared"),
        ("lab", "Pod/solo", "nvidia.com/gpu"),
    }
    gpu = rows["serve", "Deployment/infer", "nvidia.com/gpu"]
    assert (gpu["pods"], gpu["waiting_at_end"]) == ("1", "0")
    assert float(gpu["gpu_hours_waited"]) == pytest.approx(2 * 20 / 60, abs=1e-4)  # 20 min x 2
    shared = rows["serve", "Deployment/infer", "nvidia.com/gpu.shared"]
    assert float(shared["gpu_hours_waited"]) == pytest.approx(20 / 60, abs=1e-4)
    solo = rows["lab", "Pod/solo", "nvidia.com/gpu"]
    assert float(solo["gpu_hours_waited"]) == pytest.approx(2 * 15 / 60, abs=1e-4)
