"""The pure core's work per GPU sample counted, not timed: Python bytecodes executed and Python
function calls made by :class:`streams.core.flow.processor.Processor` on the benchmark fleet.

``python -m bench.bytecodes [--nodes 40 --intervals 12 --top 25]`` feeds the fleet's records
(decoded as the worker decodes them) through the processor on in-memory tables, counts with
``sys.settrace`` (opcode events) over the records after the first third (set-up, first sight and
the first idle episodes are left out, as a worker past its start), and prints the counts per GPU
sample and the functions that execute the most bytecodes themselves.

Why a count: this box's CPU time for the same run moves by ±30 % from one minute to the next (a
shared virtual machine), so a change of a few percent in the core cannot be told from noise by
timing it; the count is the same on every run of the same code and input. It weighs every
bytecode alike and does not see time spent inside C (hashing, orjson, ``sha256``), so it ranks
changes to our Python, and ``bench.core`` / ``bench.run`` still give the time.
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from bench.core import IDLE_WINDOW_S, START_MS, clear_memos
from bench.fleet import stream
from contract import codec
from contract.inputs import DcgmScrape
from contract.topics import TABLES
from infra.settings import AlertSettings
from streams.core.flow.processor import Processor, Tables

Where = tuple[str, str, int]  # file, function, first line


@dataclass(frozen=True)
class Count:
    samples: int
    bytecodes: int
    calls: int
    by_function: dict[Where, int]

    @property
    def bytecodes_per_sample(self) -> float:
        return self.bytecodes / self.samples

    @property
    def calls_per_sample(self) -> float:
        return self.calls / self.samples


def count(nodes: int, intervals: int) -> Count:
    """Counts one run, the core's memos emptied first (as a fresh worker starts): the same code
    and input give the same count, in this process or another."""
    clear_memos()
    records = [codec.decode(codec.encode(r)) for r in stream(nodes, intervals, start_ms=START_MS)]
    tables = Tables(**{f: {} for f in TABLES})
    processor = Processor(tables, AlertSettings.model_construct(idle_window_s=IDLE_WINDOW_S))
    warm = len(records) // 3
    for record in records[:warm]:
        processor.handle(record)
    measured = records[warm:]
    samples = sum(len(r.samples) for r in measured if isinstance(r, DcgmScrape))
    ops: collections.Counter[Where] = collections.Counter()
    calls = [0]

    def trace(frame: FrameType, event: str, _arg: Any) -> Callable[..., Any]:
        if event == "call":
            calls[0] += 1
            frame.f_trace_opcodes = True
        elif event == "opcode":
            code = frame.f_code
            ops[code.co_filename.rsplit("/", 1)[-1], code.co_name, code.co_firstlineno] += 1
        return trace

    # the collector off while counting: when it runs depends on what the process allocated
    # before, and a callback it calls (hypothesis registers one) would be counted as the core's
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    sys.settrace(trace)
    try:
        for record in measured:
            processor.handle(record)
    finally:
        sys.settrace(None)
        if enabled:
            gc.enable()
    return Count(samples, sum(ops.values()), calls[0], dict(ops))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--intervals", type=int, default=12)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    found = count(args.nodes, args.intervals)
    print(f"{found.samples} GPU samples counted ({args.nodes} nodes, {args.intervals} intervals)")
    print(f"  bytecodes per sample     {found.bytecodes_per_sample:8.0f}")
    print(f"  python calls per sample  {found.calls_per_sample:8.1f}")
    ranked = sorted(found.by_function.items(), key=lambda kv: -kv[1])[: args.top]
    for (file, function, line), n in ranked:
        share = 100 * n / found.bytecodes
        print(f"  {n / found.samples:7.0f} {share:5.1f} %  {file}:{line} {function}")


if __name__ == "__main__":
    main()
