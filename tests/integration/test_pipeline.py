"""End to end on the real local Kafka: kubelet + exporter doubles → agents → worker → topic."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from contract import codec
from contract.inputs import DeviceAssignment, NodeSupply, PodResourcesSnapshot
from contract.outputs import AttributionEvent, DeadLetter
from contract.topics import TABLES
from sim.cluster import Cluster
from sim.scenario import gpu_uuid, load
from tests.contract import assert_valid
from tests.helpers import wait_for
from tests.integration.pipeline import Collected, collect, pipeline
from tests.kafka_batches import batch_codecs

pytestmark = pytest.mark.integration

SCENARIO = load("exclusive")
EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "consume.py"
DEVICES = [(n.name, gpu_uuid(n.name, i)) for n in SCENARIO.nodes for i in range(n.gpus)]


UIDS = {f"{p.namespace}/{p.name}": p.uid for p in SCENARIO.pods}
WORKLOADS = {f"{p.namespace}/{p.name}": (p.workload_kind, p.workload_name) for p in SCENARIO.pods}


def expected_holders(t: float) -> dict[tuple[str, str], set[str]]:
    """Ground truth from the scenario: pods holding each GPU at scenario time ``t``."""
    cluster = Cluster(SCENARIO, lambda: t)
    out: dict[tuple[str, str], set[str]] = {d: set() for d in DEVICES}
    for node, _ in DEVICES:
        for a in cluster.podresources(node)[0]:
            out[(node, a.device_id)].add(f"{a.namespace}/{a.pod}")
    return out


def settled(events: Collected, since_ms: int) -> dict[tuple[str, str], list[AttributionEvent]]:
    by_device: dict[tuple[str, str], list[AttributionEvent]] = {}
    for ev in events.records:
        if isinstance(ev, AttributionEvent) and ev.ts_ms >= since_ms:
            by_device.setdefault((ev.node, ev.device_uuid), []).append(ev)
    return by_device


async def test_exact_holders_per_gpu_as_pods_come_and_go(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    async with (
        pipeline(kafka_bootstrap, SCENARIO, tmp_path) as p,
        collect(p.kafka, "attribution") as events,
        collect(p.kafka, "deadletter") as dead,
        collect(p.kafka, "demand-events") as supply,
    ):
        # Hand-checked expectations at two scenario times, plus the scenario's own truth.
        stages = {
            30.0: {
                ("gpu-a", 1): {"ml/train-llama-7b9c6d5f4-p8r2n"},  # deleted, in grace
                ("gpu-b", 0): {"batch/etl-nightly-29311420-6kx7d"},
                ("gpu-a", 3): set(),
                ("gpu-b", 3): set(),
            },
            60.0: {
                ("gpu-a", 1): {"ml/train-llama-7b9c6d5f4-w7m5z"},  # replacement holds it
                ("gpu-b", 0): set(),  # job finished
                ("gpu-b", 1): {"inference/serve-mistral-5d8f7c9b6-qq9tl"},
                ("gpu-b", 2): {"inference/serve-mistral-5d8f7c9b6-qq9tl"},
                ("gpu-b", 3): {"batch/embed-docs-7xk2p"},
            },
        }
        # first the pipeline must see the scenario's start (agents and worker are up)
        start = expected_holders(0)

        def initial_state_seen() -> bool:
            latest = {
                (e.node, e.device_uuid): {f"{h.namespace}/{h.pod}" for h in e.holders}
                for e in events.records
                if isinstance(e, AttributionEvent) and e.state != "unknown"
            }
            return latest == start

        await wait_for(initial_state_seen, timeout_s=90, what=lambda: f"start\n{p.logs()}")
        # poison on the input topic: dead-lettered with where it came from; the worker goes on.
        # And a forged record: gpu-a's key, a payload that gives gpu-b's GPUs to a stranger —
        # refused (key and payload disagree); the holders checked below never include that stranger.
        forged = PodResourcesSnapshot(
            "gpu-b",
            int(time.time() * 1000),
            tuple(
                DeviceAssignment("evil", "forged", "c", "nvidia.com/gpu", gpu_uuid("gpu-b", i))
                for i in range(4)
            ),
        )
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            sent = await producer.send_and_wait(
                p.kafka.topic("node-events"), b"\xff{not json", key=b"gpu-a"
            )
            await producer.send_and_wait(
                p.kafka.topic("node-events"), codec.encode(forged), key=b"gpu-a"
            )
        finally:
            await producer.stop()

        def both_dead_lettered() -> list[DeadLetter]:
            letters = [d for d in dead.records if isinstance(d, DeadLetter)]
            return letters if len(letters) >= 2 else []

        poison = await wait_for(
            both_dead_lettered, what="the poison message and the forged record, dead-lettered"
        )
        assert poison[1].error == "refused: key 'gpu-a' but payload of node 'gpu-b'"
        assert (poison[1].partition, poison[1].offset) == (sent.partition, sent.offset + 1)
        assert (poison[0].source_topic, poison[0].partition, poison[0].offset) == (
            sent.topic,
            sent.partition,
            sent.offset,
        )
        assert "not JSON" in poison[0].error
        assert_valid(codec.to_dict(poison[0]))
        for t, hand_checked in stages.items():
            truth = expected_holders(t)
            for (node, idx), pods in hand_checked.items():
                assert truth[(node, gpu_uuid(node, idx))] == pods
            p.clock.offset_s = t
            if t == 60.0:
                assert p.sim.apiserver is not None
                p.sim.apiserver.expire_all()  # a forced 410 Gone mid-run: watchers relist
                p.sim.apiserver.cut_streams()
            # samples taken a poll + scrape after the change must show exactly the new holders
            since = int(time.time() * 1000) + 1500

            def all_devices_settled(since: int = since) -> bool:
                seen = settled(events, since)
                return all(d in seen for d in DEVICES)

            await wait_for(
                all_devices_settled, timeout_s=60, what=lambda t=t: f"events at t={t}\n{p.logs()}"
            )
            for device, evs in settled(events, since).items():
                for ev in evs:
                    got = {f"{h.namespace}/{h.pod}" for h in ev.holders}
                    assert got == truth[device], (t, device, ev.summary, p.logs())
                    assert ev.state == ("exclusive" if got else "unallocated")
                    assert ev.credit == ("holder" if got else "none")
                    for h in ev.holders:  # UIDs from our own join, the workload resolved
                        name = f"{h.namespace}/{h.pod}"
                        assert (h.uid, h.uid_status) == (UIDS[name], "resolved"), ev.summary
                        assert h.workload is not None
                        assert (h.workload.kind, h.workload.name) == WORKLOADS[name]
        # each node's supply for the demand stage: the last word per node and
        # resource names who holds each GPU now, with UIDs and workloads
        held_now = {d: {(pod, UIDS[pod]) for pod in pods} for d, pods in truth.items() if pods}

        def supply_settled() -> bool:
            last = {(r.node, r.resource): r for r in supply.records if isinstance(r, NodeSupply)}
            supplied = {
                (node, d.device_uuid): {(f"{h.namespace}/{h.pod}", h.uid) for h in d.holders}
                for (node, resource), r in last.items()
                if resource == "nvidia.com/gpu"
                for d in r.devices
            }
            return supplied == held_now

        await wait_for(supply_settled, timeout_s=60, what=lambda: f"supply\n{p.logs()}")


async def test_consumer_guide_example_reads_real_output(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    example = EXAMPLE
    """The example reads the output as the worker writes it by default: zstd-compressed batches
    (outputs and changelogs alike), which a plain aiokafka consumer decompresses."""
    async with pipeline(kafka_bootstrap, SCENARIO, tmp_path) as p:
        p.clock.offset_s = 10
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(example),
            "--bootstrap",
            kafka_bootstrap,
            "--prefix",
            p.kafka.topic_prefix,
            "--max",
            "60",  # every device's first events, whatever order the partitions are read in
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
        stored = {
            role: await batch_codecs(kafka_bootstrap, topic, p.kafka.partitions)
            for role, topic in (
                ("attribution", p.kafka.topic("attribution")),
                ("changelog", f"{p.kafka.topic_prefix}worker-{TABLES['slot_holders']}-changelog"),
            )
        }
    for role, codecs in stored.items():
        assert set(codecs) == {"zstd"}, (role, codecs)
    lines = out.decode().splitlines()
    assert proc.returncode == 0
    assert len(lines) == 60
    assert any("train-llama" in line and "uid=" in line for line in lines), lines
    assert not [line for line in lines if "util=None" in line], lines  # unknown is said so
