"""``python -m bench.producer``: CPU per record of the ways a worker can hand records to aiokafka.

Three ways, each producing the same records (1,300-byte values keyed ``node/device`` over 2,750
devices, 16 partitions, acks=all, the worker's linger and batch size) on the embedded broker
(or ``--bootstrap``): a keyed ``send`` (aiokafka partitions: murmur2 of the key, in Python, per
record), a ``send`` with the partition found from a memo (:func:`streams.worker.publisher.
partition_of`: what the worker does), and ``send_batch`` of whole per-partition batches. Prints
records/s and this process's CPU µs per record, median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench import kafka_io
from gpuattr.localkafka import LocalKafka, LocalKafkaConfig
from streams.worker.outbox import partition_of

PARTITIONS = 16
KEYS = [
    f"node-{i // 11:05d}/GPU-{i % 11:02d}-5799ec48-efd7-5a7b-97aa-fe11e3574a66".encode()
    for i in range(2750)
]
VALUE = b"x" * 1300
MODES = ("keyed send", "send, memo partition", "send_batch")


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def once(bootstrap: str, mode: str, n: int) -> tuple[float, float]:
    topic = f"bench-producer-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()
    producer = kafka_io.worker_producer(bootstrap)
    await producer.start()
    try:
        parts = tuple(sorted(await producer.partitions_for(topic)))
        c0, t0 = cpu_s(), time.monotonic()
        if mode == "keyed send":
            for i in range(n):
                await producer.send(topic, VALUE, key=KEYS[i % len(KEYS)])
        elif mode == "send, memo partition":
            for i in range(n):
                key = KEYS[i % len(KEYS)]
                await producer.send(topic, VALUE, key=key, partition=partition_of(key, parts))
        else:
            for start in range(0, n, 500):
                batches: dict[int, Any] = {}
                for i in range(start, min(n, start + 500)):
                    key = KEYS[i % len(KEYS)]
                    p = partition_of(key, parts)
                    batch = batches.get(p) or batches.setdefault(p, producer.create_batch())
                    batch.append(key=key, value=VALUE, timestamp=None)
                for p, batch in batches.items():
                    batch.close()
                    await producer.send_batch(batch, topic, partition=p)
        await producer.flush()
        return n / (time.monotonic() - t0), (cpu_s() - c0) / n * 1e6
    finally:
        await producer.stop()


async def main(args: argparse.Namespace) -> None:
    async with contextlib.AsyncExitStack() as stack:
        bootstrap = args.bootstrap
        if not bootstrap:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpuattr-pb")))
            broker = LocalKafka(LocalKafkaConfig(data_dir=workdir / "kafka", heap_mb=1024))
            await stack.enter_async_context(broker)
            bootstrap = broker.bootstrap
        results: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
        for _ in range(args.repeat):
            for mode in MODES:
                results[mode].append(await once(bootstrap, mode, args.records))
        print(f"{args.records} records per run, {args.repeat} run(s), median [min, max]")
        for mode, runs in results.items():
            rate = [r for r, _ in runs]
            cpu = [c for _, c in runs]
            print(
                f"  {mode:<22} {statistics.median(rate):8.0f} records/s  "
                f"{statistics.median(cpu):5.1f} µs CPU per record [{min(cpu):.1f}, {max(cpu):.1f}]"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--repeat", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
