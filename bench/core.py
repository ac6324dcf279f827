"""The worker's own share of the cost: decode, pure core, demand stage and encodes per GPU
sample, no Kafka.

``python -m bench.core [--nodes 250 --intervals 8 --repeat 3]`` feeds the benchmark fleet's
records (the same ``bench.run`` preloads) through :func:`contract.codec.decode`,
:class:`streams.core.flow.processor.Processor` on in-memory tables ("core"), the node supply it
emits
through :class:`streams.core.flow.demandstage.DemandStage` ("demand", as the worker's second agent
does), :func:`contract.codec.encode` of every output ("encode") and the table codec of every table
value written ("state": what the changelogs carry), in one process, and prints the CPU
microseconds per GPU sample of each step (median [min, max] of the runs). Each run starts with
the core's memos empty, as a fresh worker does (:func:`clear_memos`). What ``bench.run``
measures beyond this is Faust's and aiokafka's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from bench.fleet import sample_count, stream
from contract import codec
from contract.inputs import DcgmScrape, NodeSupply, pool_resource
from contract.topics import DEMAND_TABLES, TABLES
from infra.settings import AlertSettings, WorkerSettings
from streams.core.flow.demandstage import DemandStage, DemandTables
from streams.core.flow.processor import Processor, Tables
from streams.core.flow.state import TABLE_CODEC
from streams.core.memo import LiveMemo
from streams.worker.app import Published, output_value

START_MS = 1_700_000_000_000
IDLE_WINDOW_S = 20  # the alerts' idle window in these runs (bench.run's workers run with it)
WARM_INTERVALS = 6  # 30 s of 5 s scrapes: past the idle window


class _WrittenTable(dict[str, object]):
    """A table that keeps what is written to it, for the state step to encode."""

    def __init__(self, written: list[object]) -> None:
        super().__init__()
        self.written = written

    def __setitem__(self, key: str, value: object) -> None:
        self.written.append(value)
        super().__setitem__(key, value)


def clear_memos() -> int:
    """Empty every module-level memo of the core and the contract (``functools`` caches and
    live memos): each run then starts as a fresh worker does. Without it, a repeat meets the
    entries the runs before it made for the very same input, and reads faster than any worker
    would. Returns how many memos were emptied."""
    cleared = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith(("streams.core", "contract")):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, LiveMemo):
                if value.__wrapped__.__module__ == name:  # where it is defined, not re-exported
                    value.clear()
                    cleared += 1
                continue
            clear = getattr(value, "cache_clear", None)
            if callable(clear) and getattr(value, "__module__", None) == name:
                clear()
                cleared += 1
    return cleared


def once(payloads: list[bytes], samples: int) -> dict[str, float]:
    clear_memos()
    written: list[object] = []
    tables = Tables(**{f: _WrittenTable(written) for f in TABLES})  # type: ignore[arg-type]
    processor = Processor(tables, AlertSettings.model_construct(idle_window_s=IDLE_WINDOW_S))
    stage = DemandStage(
        DemandTables(**{f: _WrittenTable(written) for f in DEMAND_TABLES}),  # type: ignore[arg-type]
        IDLE_WINDOW_S,
        WorkerSettings.model_construct().demand_supply_every_s,  # as the worker runs it
    )
    spent = {"decode": 0.0, "core": 0.0, "demand": 0.0, "encode": 0.0, "state": 0.0}
    clock = time.process_time  # this process's CPU: the figure holds beside other load
    for payload in payloads:
        t0 = clock()
        record = codec.decode(payload)
        t1 = clock()
        outputs: list[Published] = list(processor.handle(record))
        t2 = clock()
        for out in list(outputs):
            if isinstance(out, NodeSupply):
                outputs += stage.handle(out, 0, pool_resource(out.resource).encode())
        t3 = clock()
        for out in outputs:
            output_value(out)
        t4 = clock()
        for value in written:
            TABLE_CODEC.encode(value)
        written.clear()
        t5 = clock()
        spent["decode"] += t1 - t0
        spent["core"] += t2 - t1
        spent["demand"] += t3 - t2
        spent["encode"] += t4 - t3
        spent["state"] += t5 - t4
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
    for step in ("decode", "core", "demand", "encode", "state", "total"):
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
