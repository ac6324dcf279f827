"""The worker's per-record floor: what one input record costs before the core sees it.

``python -m bench.floor [--nodes 250 --intervals 8 --rounds 3]`` loads the benchmark fleet's
input (what ``bench.run`` preloads) and reads it four ways, each round on the same broker, and
prints the CPU microseconds per input record of each (median [min, max] of the rounds):

- **bare**: one aiokafka consumer (``getmany``, the worker's fetch size per partition), nothing
  done with a record: the Kafka client's own cost.
- **bare + decode**: the same, each record decoded by :func:`contract.codec.decode`, as the
  worker decodes it.
- **worker, Faust only**: the real worker process (``gpuattr worker``, the bench's settings)
  whose record loop does nothing with an event: Faust's consumer (its thread, fetches, commits)
  and its stream, per message.
- **worker to the core**: the same worker whose core returns no output and changes no table:
  the record loop runs too (decode, the key check, per-record metrics, an empty publish) —
  everything a record goes through on its way to the core, and nothing after.

A worker's CPU (every thread) is read from its first record to its last. Per GPU sample on the
bench fleet each figure is times the input records per sample (0.455 at the defaults: setup and
churn records next to the scrapes). The workers run this module with ``--as-worker LEVEL``,
which replaces :meth:`streams.worker.loop.RecordLoop.handle_event` or
:meth:`streams.core.flow.processor.Processor.handle` before the worker starts (bench code only: the
worker has no setting for it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from bench.fleet import sample_count, stream
from bench.run import START_MS, preloaded, worker_children
from contract import codec
from gpuattr.localkafka import LocalKafka, LocalKafkaConfig
from infra.settings import KafkaSettings, WorkerSettings

#: the floor worker's report: ``<records handled> <CPU s at the first> <CPU s at the last>``
OUT_ENV = "BENCH_FLOOR_OUT"
#: how many records it is to handle before it reports its CPU at the last
COUNT_ENV = "BENCH_FLOOR_RECORDS"
#: where a floor worker is cut: "faust", its record loop does nothing with an event (Faust's
#: consumer and stream only); "loop", its core returns nothing (the record loop runs: decode,
#: key check, per-record metrics, an empty publish)
LEVELS = {"faust": "worker, Faust only", "loop": "worker to the core"}


async def bare(bootstrap: str, topic: str, records: int, decode: bool, group: str) -> float:
    """CPU µs per record for a bare consumer reading ``records`` from ``topic`` (``decode``:
    each one decoded as the worker decodes it), from its first record to its last."""
    fetch = WorkerSettings.model_construct().fetch_bytes_per_partition
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=fetch,
    )
    await consumer.start()
    try:
        seen, first = 0, 0.0
        deadline = time.monotonic() + 300
        while seen < records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"bare consumer: {seen} of {records} records in 300 s")
            batch = await consumer.getmany(timeout_ms=1000)
            for messages in batch.values():
                for message in messages:
                    if seen == 0:
                        first = time.process_time()
                    if decode:
                        codec.decode(message.value or b"")
                    seen += 1
        return (time.process_time() - first) / max(records - 1, 1) * 1e6
    finally:
        await consumer.stop()


async def floor_worker(
    bootstrap: str, fleet: tuple[int, int], records: int, workdir: Path, tag: str, level: str
) -> float:
    """CPU µs per record of a worker cut at ``level`` (:data:`LEVELS`), over the ``records``
    input records of ``fleet`` (nodes, intervals) preloaded (:func:`load`), from its first
    record to its last."""
    kafka = await load(bootstrap, tag, fleet, records)
    out = workdir / f"floor-{tag}.txt"
    [child] = worker_children(kafka, 1, workdir)
    env = {**child.env, OUT_ENV: str(out), COUNT_ENV: str(records)}
    log_path = workdir / f"floor-{tag}.log"
    with log_path.open("ab") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.floor",
            "--as-worker",
            level,
            env=env,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 300
            while not out.exists():
                if proc.returncode is not None:
                    raise RuntimeError(f"floor worker exited {proc.returncode}: see {log_path}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"floor worker: no report in 300 s: see {log_path}")
                await asyncio.sleep(0.2)  # a bench's poll of a file the child writes at the end
        finally:
            if proc.returncode is None:
                proc.terminate()
                await proc.wait()
    handled, first, last = out.read_text().split()
    if int(handled) != records:
        raise RuntimeError(f"floor worker handled {handled} of {records} records")
    return (float(last) - float(first)) / max(records - 1, 1) * 1e6


async def load(bootstrap: str, tag: str, fleet: tuple[int, int], records: int) -> KafkaSettings:
    """Fresh topics with the input of ``fleet`` (nodes, intervals) on the workers' input topic
    (as ``bench.run`` preloads it); their settings."""
    kafka, n = await preloaded(bootstrap, tag, *fleet)
    if n != records:
        raise RuntimeError(f"loaded {n} records, expected {records}")
    return kafka


def as_worker(level: str) -> int:
    """Run ``gpuattr worker`` cut at ``level``; write the CPU read at its first and its last
    record (``COUNT_ENV``) to ``OUT_ENV``."""
    from gpuattr import cli
    from streams.core.flow.processor import Processor
    from streams.worker.loop import RecordLoop

    out, wanted = Path(os.environ[OUT_ENV]), int(os.environ[COUNT_ENV])
    seen = [0, 0.0]

    def count() -> None:
        seen[0] += 1
        if seen[0] == 1:
            seen[1] = time.process_time()
        if seen[0] == wanted:
            tmp = out.with_suffix(".tmp")
            tmp.write_text(f"{seen[0]} {seen[1]} {time.process_time()}\n")
            tmp.rename(out)  # whole or absent: the parent reads it once it exists

    def handle(self: Processor, record: object, partition: int | None = None) -> list[Any]:
        count()
        return []

    async def handle_event(self: RecordLoop, event: object) -> None:
        count()

    if level == "loop":
        Processor.handle = handle  # type: ignore[method-assign]
    elif level == "faust":
        RecordLoop.handle_event = handle_event  # type: ignore[method-assign]
    else:
        raise ValueError(f"no floor level {level!r}: {', '.join(LEVELS)}")
    return cli.main(["worker"])


async def main(nodes: int, intervals: int, rounds: int) -> dict[str, list[float]]:
    records = sum(1 for _ in stream(nodes, intervals, start_ms=START_MS))
    samples = sample_count(nodes, intervals)
    workdir = Path(tempfile.mkdtemp(prefix="bench-floor-"))
    runs: dict[str, list[float]] = {"bare": [], "bare + decode": []}
    runs.update({name: [] for name in LEVELS.values()})
    try:
        async with LocalKafka(LocalKafkaConfig(data_dir=workdir / "kafka", heap_mb=1024)) as b:
            source = await load(b.bootstrap, "fsrc", (nodes, intervals), records)
            topic = source.topic("node-events")
            for r in range(rounds):
                runs["bare"].append(await bare(b.bootstrap, topic, records, False, f"p{r}"))
                runs["bare + decode"].append(await bare(b.bootstrap, topic, records, True, f"d{r}"))
                for level, name in LEVELS.items():
                    runs[name].append(
                        await floor_worker(
                            b.bootstrap, (nodes, intervals), records, workdir, f"{level}{r}", level
                        )
                    )
                print(
                    f"round {r + 1}: "
                    + ", ".join(f"{k} {v[-1]:.1f} µs per record" for k, v in runs.items()),
                    flush=True,
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    per_sample = records / samples
    print(f"{records} input records, {samples} GPU samples ({per_sample:.3f} records per sample)")
    for name, values in runs.items():
        med = statistics.median(values)
        print(
            f"  {name:<19} {med:6.1f} µs per record [{min(values):.1f}, {max(values):.1f}]"
            f" = {med * per_sample:5.1f} µs per GPU sample"
        )
    faust, loop, bare_decode, bare_only = (
        statistics.median(runs[k])
        for k in (LEVELS["faust"], LEVELS["loop"], "bare + decode", "bare")
    )
    for what, added in (
        ("Faust's consumer and stream add (worker, Faust only - bare)", faust - bare_only),
        ("the record loop adds (worker to the core - worker, Faust only)", loop - faust),
        ("both add (worker to the core - bare + decode)", loop - bare_decode),
    ):
        print(f"  {what}: {added:.1f} µs per record = {added * per_sample:.1f} µs per GPU sample")
    return runs


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--intervals", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--as-worker", choices=sorted(LEVELS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.as_worker:
        sys.exit(as_worker(args.as_worker))
    asyncio.run(main(args.nodes, args.intervals, args.rounds))
