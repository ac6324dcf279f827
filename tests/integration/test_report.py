"""``gpuattr report`` against a real attribution topic holding a schedule with known times."""

from __future__ import annotations

import asyncio
import csv
import os
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from bench.kafka_io import count
from contract import codec
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
