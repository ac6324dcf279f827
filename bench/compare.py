"""``python -m bench.run --compare REV --repeat N``: this tree's worker against REV's, side by
side in one run on one broker.

REV is checked out (detached) in a temporary git worktree, removed afterwards even on error; its
worker runs from there (that folder and ``PYTHONPATH``, the same interpreter and venv), while the
fleet, the producer and the measuring stay this tree's: both workers read the same input bytes.
The two alternate, REV's first (old, new, old, new, …), ``N`` times each. Each side's figures:
GPU samples/s and worker CPU µs per sample at the bench fleet and at ``--rss-devices`` devices,
RSS there, the changelog writes and bytes per sample in steady state, and the p99 sample-to-event
latency at 80 % of that side's own saturation. Printed and recorded (the ``compare`` section of
``--out``): each run, the medians of each side, and new/old ratios of the medians and of each
pair of runs, with the machine's load.

The events timed are the samples' (one per GPU sample in any version): what the allocation
spine emits besides may differ between versions and is not waited for.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench import kafka_io
from bench.fleet import sample_count

#: the sides, in the order each repeat runs them
SIDES = ("old", "new")

#: each side's figures, and how to print them: (key, label, format)
FIGURES: tuple[tuple[str, str, str], ...] = (
    ("samples_per_s", "GPU samples/s, bench fleet", ",.0f"),
    ("cpu_us_per_sample", "worker CPU µs per sample, bench fleet", ".1f"),
    ("samples_per_s_10k", "GPU samples/s at scale", ",.0f"),
    ("cpu_us_per_sample_10k", "worker CPU µs per sample at scale", ".1f"),
    ("cpu_10k_vs_fleet", "CPU per sample, at scale / bench fleet", ".3f"),
    ("rss_mib", "worker RSS MiB, bench fleet", ".1f"),
    ("rss_mib_10k", "worker RSS MiB at scale", ".1f"),
    ("changelog_writes_per_sample", "changelog writes per sample, steady", ".4f"),
    ("changelog_bytes_per_sample", "changelog bytes per sample, steady", ".1f"),
    ("latency_80pct_p50_ms", "p50 sample-to-event ms at 80 %", ".0f"),
    ("latency_80pct_p99_ms", "p99 sample-to-event ms at 80 %", ".0f"),
)

#: one side's figures (:data:`FIGURES`): the arguments, the broker, a work folder, and the tree
#: its worker runs from (None: this one) — :func:`bench.run.compare_side`
Measure = Callable[[argparse.Namespace, str, Path, Path | None], Awaitable[dict[str, float]]]

#: runs a git command in this repository: its arguments after ``git``, its standard output
Git = Callable[[Sequence[str]], str]


def git_in(repo: Path) -> Git:
    """:data:`Git` for the repository at ``repo``; a failing command raises
    :class:`subprocess.CalledProcessError`."""

    def run(args: Sequence[str]) -> str:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
        )
        return done.stdout

    return run


@contextlib.contextmanager
def worktree(rev: str, git: Git, parent: Path) -> Iterator[tuple[Path, str]]:
    """``rev`` checked out, detached, in a new git worktree under ``parent``: its path and
    full commit. The worktree is removed on the way out, on error too (a half-made one as
    well)."""
    commit = git(["rev-parse", "--verify", f"{rev}^{{commit}}"]).strip()
    path = parent / f"rev-{commit[:12]}"
    try:
        git(["worktree", "add", "--detach", str(path), commit])
        yield path, commit
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            git(["worktree", "remove", "--force", str(path)])
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(subprocess.CalledProcessError):
            git(["worktree", "prune"])


def order(repeat: int) -> list[tuple[int, str]]:
    """(repeat, side) in the order they run: old, new, old, new, …"""
    if repeat < 1:
        raise ValueError(f"--repeat must be at least 1, not {repeat}")
    return [(n, side) for n in range(repeat) for side in SIDES]


def ratio(new: float, old: float) -> float | None:
    """new / old, None where the old figure is 0 (no ratio to give)."""
    return round(new / old, 3) if old else None


def summary(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each side's medians of :data:`FIGURES`, the ratios new/old of the medians, and the
    ratio of each repeat's pair of runs (the noise between repeats)."""
    by_side: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    for run in runs:
        by_side[run["side"]].append(run["figures"])
    if not all(by_side.values()):
        raise ValueError("a comparison needs at least one run of each side")
    median = {
        side: {k: round(statistics.median(f[k] for f in figs), 4) for k, _, _ in FIGURES}
        for side, figs in by_side.items()
    }
    pairs = list(zip(by_side["old"], by_side["new"], strict=False))
    return {
        "median": median,
        "ratio": {k: ratio(median["new"][k], median["old"][k]) for k, _, _ in FIGURES},
        "pair_ratios": {k: [ratio(new[k], old[k]) for old, new in pairs] for k, _, _ in FIGURES},
    }


def table(summed: dict[str, Any], old: str, new: str, devices: tuple[int, int]) -> str:
    """The medians of both sides and their ratio, one figure a line."""
    label_width = max(len(label) for _, label, _ in FIGURES)
    head = (
        f"{'median of each side':<{label_width}}  {'old ' + old[:9]:>14}  {'new ' + new[:9]:>14}"
        f"  {'new/old':>8}  per repeat"
    )
    lines = [
        f"bench fleet {devices[0]:,} devices, at scale {devices[1]:,} devices",
        head,
    ]
    for key, label, fmt in FIGURES:
        r = summed["ratio"][key]
        pairs = ", ".join("-" if p is None else f"{p:.3f}" for p in summed["pair_ratios"][key])
        lines.append(
            f"{label:<{label_width}}  {summed['median']['old'][key]:>14{fmt}}  "
            f"{summed['median']['new'][key]:>14{fmt}}  {'-' if r is None else f'{r:.3f}':>8}  "
            f"[{pairs}]"
        )
    return "\n".join(lines)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


async def main(
    args: argparse.Namespace, repo: Path, measure: Measure, machine: dict[str, Any]
) -> dict[str, Any]:
    plan = order(args.repeat)
    git = git_in(repo)
    new = git(["rev-parse", "HEAD"]).strip()
    dirty = bool(git(["status", "--porcelain", "--untracked-files=no"]).strip())
    load0 = load()
    workdir = Path(tempfile.mkdtemp(prefix="gpuattr-compare-"))
    runs: list[dict[str, Any]] = []
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(shutil.rmtree, workdir, True)  # last out: after the broker has stopped
        code, old = stack.enter_context(worktree(args.compare, git, workdir))
        bootstrap = await kafka_io.broker(stack, args.bootstrap, workdir)
        for n, name in plan:
            before = load()
            figures = await measure(args, bootstrap, workdir, code if name == "old" else None)
            run = {
                "repeat": n + 1,
                "side": name,
                "figures": figures,
                "load_avg_1_5_15_before": before,
                "load_avg_1_5_15_after": load(),
            }
            runs.append(run)
            print(f"run {n + 1} of {args.repeat}, {name}: {figures}", flush=True)
    big_nodes = 1
    while sample_count(big_nodes, 1) < args.rss_devices:
        big_nodes += 1
    return {
        "command": "python -m bench.run " + " ".join(sys.argv[1:]),
        "old": {"rev": args.compare, "commit": old},
        "new": {"commit": new, "uncommitted_changes": dirty},
        "fleet": {
            "nodes": args.nodes,
            "devices": sample_count(args.nodes, 1),
            "intervals": args.intervals,
            "at_scale_nodes": big_nodes,
            "at_scale_devices": sample_count(big_nodes, 1),
            "latency_nodes": args.latency_nodes,
            "latency_s": args.latency_s,
        },
        "machine": machine,
        "load_avg_1_5_15_start": load0,
        "load_avg_1_5_15_end": load(),
        "runs": runs,
        **summary(runs),
    }


def kept(previous: bytes | None) -> dict[str, Any]:
    """A results file's content; a missing or unreadable one is empty."""
    if previous:
        with contextlib.suppress(orjson.JSONDecodeError):
            loaded = orjson.loads(previous)
            if isinstance(loaded, dict):
                return loaded
    return {}


def recorded(previous: bytes | None, compared: dict[str, Any]) -> dict[str, Any]:
    """The results file with ``compared`` as its ``compare`` section, the rest kept (an
    ordinary run's figures)."""
    return {**kept(previous), "compare": compared}


def ordinary(previous: bytes | None, result: dict[str, Any]) -> dict[str, Any]:
    """The results file of an ordinary run: its ``result``, and the ``compare`` section kept."""
    section = kept(previous).get("compare")
    return result if section is None else {**result, "compare": section}


def run_and_record(
    args: argparse.Namespace, measure: Measure, machine: dict[str, Any]
) -> dict[str, Any]:
    """Compare, record the ``compare`` section of ``--out`` and print the table."""
    repo = Path(__file__).resolve().parents[1]
    compared = asyncio.run(main(args, repo, measure, machine))
    previous = args.out.read_bytes() if args.out.exists() else None
    args.out.write_bytes(
        orjson.dumps(recorded(previous, compared), option=orjson.OPT_INDENT_2) + b"\n"
    )
    devices = (compared["fleet"]["devices"], compared["fleet"]["at_scale_devices"])
    changed = ", with changes" if compared["new"]["uncommitted_changes"] else ""
    print(
        f"\n{args.compare} ({compared['old']['commit'][:9]}) against this tree "
        f"({compared['new']['commit'][:9]}{changed}), "
        f"{args.repeat} run(s) each, alternating; load {compared['load_avg_1_5_15_start']} "
        f"at start, {compared['load_avg_1_5_15_end']} at end"
    )
    print(table(compared, compared["old"]["commit"], compared["new"]["commit"], devices))
    return compared
