"""Where one saturated worker's CPU goes, by room, and the speed-up each room bounds.

``python -m bench.where [--nodes 250 --intervals 8 --repeat 3 --rate 100]`` preloads the bench
fleet's input (as ``bench.run``'s throughput run does), starts one worker, and once its first
attribution event is out samples it with py-spy (``--nonblocking``: the worker is never paused)
until every expected event is out. Each sample (a thread's stack) goes to the first room that
claims it (:data:`ROOMS`); samples of a thread waiting in ``select`` are counted apart, and the
shares are of the rest. It prints each room's share (median [min, max] of the runs) and two
bounds on one worker's CPU per sample (Amdahl): the speed-up if the pure core cost nothing, and
if all of our own code did (core, codec, publishing, tables, outbox, demand stage), with only
Faust's stream and aiokafka left.

Needs py-spy (the ``dev`` extra) and the right to trace a child process (as root, or
``kernel.yama.ptrace_scope`` 0 or 1 for one's own children; this script never changes it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from bench import kafka_io
from bench.run import expected_events, preloaded, worker_children

CORE = "core (streams.core.flow.processor)"

#: (room, what claims a sample for it: a frame's function name starts with one of these, or
#: its file's path contains one ending in "/", whether it is our own code); first match wins,
#: frames read from the root
ROOMS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("changelog writes (table codec, outbox add)", ("RecordTable.on_key_",), True),
    (CORE, ("Processor.handle",), True),
    ("demand stage", ("DemandLoop.handle_event",), True),
    ("decode (contract.codec)", ("Codec.decode",), True),
    ("publish (output codec, outbox add)", ("Publisher.publish_all",), True),
    ("record loop (metrics, live view)", ("RecordLoop.handle_event",), True),
    ("outbox drains", ("Outbox.",), True),
    ("aiokafka producer", ("aiokafka/producer/",), False),
    ("consumer thread (aiokafka fetch)", ("WorkerThread.run", "ServiceThread"), False),
    ("Faust stream, agents, commits", ("faust/", "mode/"), False),
    ("event loop, sockets, other", ("",), False),
)
#: our own code's rooms (the bound "if all of ours cost nothing")
OURS = frozenset(room for room, _, ours in ROOMS if ours)
WAITING = "waiting (select)"

_FRAME = re.compile(r"^(?P<fn>.+?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def frames(stack: str) -> list[tuple[str, str]]:
    """A py-spy raw stack (``frame;frame;...``, root first) as (function, file) pairs; the
    entries that are not frames (``process …``, ``thread …``) left out."""
    out = []
    for part in stack.split(";"):
        m = _FRAME.match(part)
        if m is not None:
            out.append((m["fn"], m["file"]))
    return out


def _claims(mark: str, fn: str, file: str) -> bool:
    return mark in file if mark.endswith("/") else fn.startswith(mark)


def room_of(stack: list[tuple[str, str]]) -> str:
    """The room a sample belongs to (module docstring)."""
    if stack and stack[-1][0].endswith(".select"):  # EpollSelector.select: a thread waiting
        return WAITING
    for room, marks, _ in ROOMS:
        if any(_claims(mark, fn, file) for fn, file in stack for mark in marks):
            return room
    return ROOMS[-1][0]


def shares(lines: Iterable[str]) -> tuple[dict[str, float], int]:
    """Each room's share of the samples not waiting (py-spy raw lines: ``stack count``), and
    how many samples that was."""
    counts: Counter[str] = Counter()
    for line in lines:
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if not stack or not n.isdigit():
            continue
        counts[room_of(frames(stack))] += int(n)
    busy = sum(v for k, v in counts.items() if k != WAITING)
    if busy == 0:
        raise RuntimeError("py-spy recorded no sample of a busy thread")
    return {room: counts[room] / busy for room, _, _ in ROOMS}, busy


def bound(share: float) -> float:
    """The speed-up if a room's share of the CPU cost nothing (Amdahl)."""
    return 1.0 / max(1.0 - share, 1e-9)


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not os.access(found, os.X_OK):
        raise SystemExit("bench.where needs py-spy: pip install -e '.[dev]'")
    return found


async def one_run(
    bootstrap: str, nodes: int, intervals: int, rate: int, workdir: Path, gil: bool = False
) -> tuple[dict[str, float], int]:
    expected = len(expected_events(nodes, intervals))
    kafka, _ = await preloaded(bootstrap, "where", nodes, intervals)
    child = worker_children(kafka, 1, workdir)[0]
    out = workdir / f"{kafka.topic_prefix}py-spy.txt"
    attribution = kafka.topic("attribution")
    await child.start()
    assert child.proc is not None
    try:
        await kafka_io.wait_count(bootstrap, attribution, 1, timeout_s=300)
        spy = await asyncio.create_subprocess_exec(
            py_spy(), "record", "--pid", str(child.proc.pid), "--rate", str(rate),
            "--format", "raw", "--nonblocking", "--output", str(out), *(["--gil"] if gil else []),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            await kafka_io.wait_count(bootstrap, attribution, expected, timeout_s=900)
        finally:
            with contextlib.suppress(ProcessLookupError):
                spy.send_signal(signal.SIGINT)  # py-spy writes what it sampled, then exits
            _, err = await spy.communicate()
        if spy.returncode not in (0, -signal.SIGINT) or not out.exists():
            raise RuntimeError(f"py-spy failed ({spy.returncode}): {err.decode()[-500:]}")
    finally:
        await child.stop()
    with out.open() as f:
        return shares(f)


async def main(args: argparse.Namespace) -> list[tuple[dict[str, float], int]]:
    workdir = Path(tempfile.mkdtemp(prefix="gpuattr-where-"))
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(shutil.rmtree, workdir, True)
        bootstrap = await kafka_io.broker(stack, args.bootstrap, workdir)
        runs = []
        for n in range(args.repeat):
            load = os.getloadavg()[0]
            run = await one_run(bootstrap, args.nodes, args.intervals, args.rate, workdir, args.gil)
            print(f"run {n + 1}: {run[1]} busy samples, 1-min load before {load:.2f}", flush=True)
            runs.append(run)
    return runs


def report(runs: list[tuple[dict[str, float], int]]) -> str:
    def fig(values: list[float], pct: bool = True) -> str:
        k = 100 if pct else 1
        med, lo, hi = statistics.median(values) * k, min(values) * k, max(values) * k
        return f"{med:5.1f}{'%' if pct else 'x'} [{lo:.1f}, {hi:.1f}]"

    lines = [f"share of one saturated worker's busy samples, median [min, max] of {len(runs)}:"]
    for room, _, _ in ROOMS:
        lines.append(f"  {room:<44} {fig([r[room] for r, _ in runs])}")
    ours = [sum(r[k] for k in OURS) for r, _ in runs]
    lines.append(f"  {'all of our own code':<44} {fig(ours)}")
    lines.append("speed-up of the worker's CPU per sample if it cost nothing (Amdahl):")
    lines.append(f"  {'the core':<44} {fig([bound(r[CORE]) for r, _ in runs], pct=False)}")
    lines.append(f"  {'all of our own code':<44} {fig([bound(s) for s in ours], pct=False)}")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--intervals", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument(
        "--gil", action="store_true", help="sample only the thread holding the GIL (py-spy --gil)"
    )
    print(report(asyncio.run(main(parser.parse_args()))))
