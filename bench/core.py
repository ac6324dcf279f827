"""The worker's own share of the cost: decode, pure core and encode per GPU sample, no Kafka.

``python -m bench.core [--nodes 250 --intervals 8 --repeat 3]`` feeds the benchmark fleet's
records (the same ``bench.run`` preloads) through :func:`contract.codec.decode`,
:class:`streams.core.processor.Processor` on in-memory tables and :func:`contract.codec.encode`
of every output, in one process, and prints the CPU microseconds per GPU sample of each step (median
[min, max] of the runs). What ``bench.run`` measures beyond this is Faust's and aiokafka's.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.fleet import sample_count, stream
from contract import codec
from infra.settings import AlertSettings
from streams.core.processor import Processor, Tables

START_MS = 1_700_000_000_000


def once(payloads: list[bytes], samples: int) -> dict[str, float]:
    processor = Processor(Tables.in_memory(), AlertSettings.model_construct(idle_window_s=20))
    spent = {"decode": 0.0, "core": 0.0, "encode": 0.0}
    clock = time.process_time  # this process's CPU: the figure holds beside other load
    for payload in payloads:
        t0 = clock()
        record = codec.decode(payload)
        t1 = clock()
        outputs = processor.handle(record)
        t2 = clock()
        for out in outputs:
            codec.encode(out)
        t3 = clock()
        spent["decode"] += t1 - t0
        spent["core"] += t2 - t1
        spent["encode"] += t3 - t2
    per = {k: v / samples * 1e6 for k, v in spent.items()}
    per["total"] = sum(per.values())
    return per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--intervals", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    payloads = [codec.encode(r) for r in stream(args.nodes, args.intervals, start_ms=START_MS)]
    samples = sample_count(args.nodes, args.intervals)
    runs = [once(payloads, samples) for _ in range(args.repeat)]
    print(f"{len(payloads)} input records, {samples} GPU samples, {args.repeat} run(s)")
    for step in ("decode", "core", "encode", "total"):
        values = [r[step] for r in runs]
        print(
            f"  {step:<7} {statistics.median(values):7.1f} µs per sample "
            f"[{min(values):.1f}, {max(values):.1f}]"
        )


if __name__ == "__main__":
    main()
