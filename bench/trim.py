"""The worker's RSS on 10,000 devices with and without its malloc trims
(``GPUATTR_WORKER_MALLOC_TRIM_EVERY_S``): read when every input is processed (as
``bench.run``'s RSS row) and again after 15 s at rest, the two settings alternating on one
broker. ``python -m bench.trim [--rounds 3]``; prints one line per run."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import psutil

from bench import kafka_io
from bench.fleet import sample_count, stream
from bench.run import expected_events, prepared, worker_children
from gpuattr.localkafka import LocalKafka, LocalKafkaConfig

NODES = 910  # the fewest bench nodes that reach 10,000 devices (bench.run's RSS row)
INTERVALS = 8
REST_S = 15.0  # more than one trim interval (10 s) with nothing to process


async def main(rounds: int) -> None:
    wanted = expected_events(NODES, INTERVALS)
    workdir = Path(tempfile.mkdtemp(prefix="bench-trim-"))
    try:
        await _rounds(rounds, wanted, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def _rounds(rounds: int, wanted: frozenset[tuple[str, str, int, str]], workdir: Path) -> None:
    async with LocalKafka(LocalKafkaConfig(data_dir=workdir / "kafka", heap_mb=1024)) as broker:
        bootstrap = broker.bootstrap
        for n in range(rounds):
            for every in ("10", "0"):
                kafka = await prepared(bootstrap, f"t{n}x{every}")
                await kafka_io.produce(
                    bootstrap,
                    kafka.topic("node-events"),
                    stream(NODES, INTERVALS, start_ms=1_700_000_000_000),
                )
                [child] = worker_children(kafka, 1, workdir, WORKER_MALLOC_TRIM_EVERY_S=every)
                await child.start()
                try:
                    assert child.proc is not None
                    await kafka_io.wait_count(
                        bootstrap, kafka.topic("attribution"), len(wanted), timeout_s=1800
                    )
                    proc = psutil.Process(child.proc.pid)
                    end = proc.memory_info().rss / 2**20
                    await asyncio.sleep(REST_S)  # the reading protocol: RSS after a rest
                    rest = proc.memory_info().rss / 2**20
                finally:
                    await child.stop()
                print(
                    f"round {n + 1}, {sample_count(NODES, 1):,} devices, trim every {every} s: "
                    f"RSS {end:.1f} MiB when done, {rest:.1f} MiB after {REST_S:.0f} s at rest "
                    f"(load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args().rounds))
