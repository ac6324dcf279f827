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
from contract.inputs import DcgmScrape
from contract.topics import TABLES
from infra.settings import AlertSettings
from streams.core.processor import Processor, Tables

START_MS = 1_700_000_000_000
IDLE_WINDOW_S = 20  # the alerts' idle window in these runs (bench.run's workers run with it)
WARM_INTERVALS = 6  # 30 s of 5 s scrapes: past the idle window


def once(payloads: list[bytes], samples: int) -> dict[str, float]:
    processor = Processor(
        Tables.in_memory(), AlertSettings.model_construct(idle_window_s=IDLE_WINDOW_S)
    )
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


class _CountingTable(dict[str, object]):
    """A table that counts its writes (each one a changelog record in the worker)."""

    def __init__(self, counter: list[int]) -> None:
        super().__init__()
        self.counter = counter

    def __setitem__(self, key: str, value: object) -> None:
        self.counter[0] += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.counter[0] += 1
        super().__delitem__(key)


def steady_writes(nodes: int, intervals: int) -> float:
    """Changelog writes per GPU sample in steady state: a fleet without pod churn whose devices
    keep their levels, counted over ``intervals`` scrapes per node after a warm-up of
    :data:`WARM_INTERVALS` (the devices' first sight — baselines, first readings — and the idle
    episodes of idle devices starting and firing: episode changes, not steady state)."""
    counter = [0]
    tables = Tables(**{f: _CountingTable(counter) for f in TABLES})  # type: ignore[arg-type]
    processor = Processor(tables, AlertSettings.model_construct(idle_window_s=IDLE_WINDOW_S))
    records = list(
        stream(nodes, WARM_INTERVALS + intervals, start_ms=START_MS, churn_every=0, switch=0.0)
    )
    first_scrapes = next(i for i, r in enumerate(records) if isinstance(r, DcgmScrape))
    warm = first_scrapes + nodes * WARM_INTERVALS
    for record in records[:warm]:
        processor.handle(codec.decode(codec.encode(record)))
    counter[0] = 0
    for record in records[warm:]:
        processor.handle(codec.decode(codec.encode(record)))
    return counter[0] / sample_count(nodes, intervals)


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
    print(
        f"  changelog writes per sample in steady state (no churn, levels kept): "
        f"{steady_writes(args.nodes, args.intervals):.3f}"
    )


if __name__ == "__main__":
    main()
