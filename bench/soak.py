"""``python -m bench.soak``: is the worker's state bounded by what is live, not by history?

No Kafka: Job pod lifecycles on a handful of nodes go through the agents' records (encoded and
decoded with :mod:`contract.codec`, as the worker reads them) into
:class:`streams.core.processor.Processor` over in-memory tables that count every assignment and
deletion and sum its encoded size (the bytes the changelog would be written).

One lifecycle: a Job pod is created on a node, takes a GPU (a PodResources diff), is sampled by
DCGM every 30 s while it runs (2 to 6 minutes), finishes (its device released), and is deleted
after its TTL. Every node relists its pods (``k8s.pod-list``) once an hour of event time.

Every ``--every`` lifecycles it prints lifecycles, table keys per table and in total, changelog
bytes written in that stretch and the process RSS; at the end, whether the keys at the last
checkpoint are within 10 % of those at the first, exiting 1 if not.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, fields
from typing import Any

import psutil

from contract import codec
from contract.inputs import (
    AllocatableDevice,
    DcgmSample,
    DeviceAssignment,
    DeviceInventory,
    GpuInfo,
    InputRecord,
    NodeRecord,
    OwnerRef,
    PodListSnapshot,
    PodRecord,
    PodResourcesDiff,
    PodResourcesSnapshot,
)
from sim.scenario import gpu_uuid
from streams.core.processor import Processor, Tables
from streams.core.state import TABLE_CODEC

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SECOND = 1000
MINUTE = 60 * SECOND
RELIST_EVERY_MS = 60 * MINUTE
TOLERANCE = 0.10


@dataclass
class Changelog:
    """What the tables would have written to their changelogs since the last checkpoint."""

    writes: int = 0
    bytes: int = 0


class CountingTable(MutableMapping[str, Any]):
    """A dict that counts each assignment and deletion as one changelog message and its size."""

    def __init__(self, log: Changelog) -> None:
        self.data: dict[str, Any] = {}
        self.log = log

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.log.writes += 1
        self.log.bytes += len(key.encode()) + len(TABLE_CODEC.encode(value))

    def __delitem__(self, key: str) -> None:
        del self.data[key]
        self.log.writes += 1  # a tombstone: the key and no value
        self.log.bytes += len(key.encode())

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class Checkpoint:
    lifecycles: int
    keys: dict[str, int]
    changelog_writes: int
    changelog_bytes: int
    rss_mib: float

    @property
    def total(self) -> int:
        return sum(self.keys.values())

    def line(self) -> str:
        per_table = " ".join(f"{name}={n}" for name, n in self.keys.items())
        return (
            f"lifecycles={self.lifecycles:>7,}  keys={self.total:>4} ({per_table})  "
            f"changelog: {self.changelog_writes:,} writes, {self.changelog_bytes / 1e6:.1f} MB  "
            f"rss={self.rss_mib:.0f} MiB"
        )


Event = tuple[int, int, InputRecord, bool]  # (ts_ms, tie-break, record, ends a lifecycle)


def node_setup(node: str, gpus: int) -> list[InputRecord]:
    uuids = [gpu_uuid(node, g) for g in range(gpus)]
    return [
        DeviceInventory(
            node, START_MS, "file", tuple(GpuInfo(g, u, "A100") for g, u in enumerate(uuids))
        ),
        NodeRecord(node, START_MS, (("nvidia.com/gpu.sharing-strategy", "none"),)),
        PodResourcesSnapshot(
            node, START_MS, (), tuple(AllocatableDevice("nvidia.com/gpu", u) for u in uuids)
        ),
        PodListSnapshot(node, START_MS, ()),
    ]


def gpu_lifecycles(node: str, gpu: int, rng: random.Random, order: int) -> Iterator[Event]:
    """Job pods on one GPU, one after another, forever (in time order)."""
    uuid = gpu_uuid(node, gpu)
    t = START_MS + rng.randrange(60 * SECOND)
    k = 0
    while True:
        k += 1
        job = f"embed-{node}-g{gpu}-{k:08d}"
        pod = f"{job}-{rng.randrange(36**5):05x}"
        uid = f"{node}-{gpu}-{k}"
        owner = OwnerRef("Job", job)
        workload = OwnerRef("CronJob", f"embed-{node}-g{gpu}", inferred=True)
        row = DeviceAssignment("batch", pod, "main", "nvidia.com/gpu", uuid)
        created = t
        yield (
            t,
            order,
            PodRecord(node, t, uid, "batch", pod, created, owner=owner, workload=workload),
            False,
        )
        t += rng.randrange(2, 6) * SECOND
        yield t, order, PodResourcesDiff(node, t, (row,), ()), False
        end = t + rng.randrange(2 * MINUTE, 6 * MINUTE)
        t += 10 * SECOND
        while t < end:
            util = float(rng.choice((0, 35, 60, 92, 97)))
            sample = DcgmSample(
                node, t, uuid, gpu, "NVIDIA A100-SXM4-40GB", node, util_pct=util, fb_used_mib=1e4
            )
            yield t, order, sample, False
            t += 30 * SECOND
        t = end
        yield t, order, PodResourcesDiff(node, t, (), (row,)), False
        gone = t + rng.randrange(5, 30) * SECOND  # ttlSecondsAfterFinished
        deleted = PodRecord(node, gone, uid, "batch", pod, created, gone, True, (), owner, workload)
        yield gone, order, deleted, True
        t = gone + rng.randrange(2, 60) * SECOND


def events(nodes: int, gpus: int, seed: int) -> Iterator[Event]:
    rng = random.Random(seed)
    names = [f"gpu-node-{n:02d}" for n in range(nodes)]
    lines = [
        gpu_lifecycles(node, g, random.Random(rng.random()), i * gpus + g)
        for i, node in enumerate(names)
        for g in range(gpus)
    ]
    for node in names:
        for rec in node_setup(node, gpus):
            yield START_MS, -1, rec, False
    yield from heapq.merge(*lines, key=lambda e: (e[0], e[1]))


def new_tables(log: Changelog) -> Tables:
    return Tables(**{f.name: CountingTable(log) for f in fields(Tables)})


def soak(
    lifecycles: int,
    every: int,
    *,
    nodes: int = 4,
    gpus: int = 4,
    seed: int = 7,
    report: Callable[[Checkpoint], None] = lambda c: None,
) -> list[Checkpoint]:
    """Drive ``lifecycles`` pod lifecycles through the processor; a checkpoint every ``every``."""
    log = Changelog()
    tables = new_tables(log)
    processor = Processor(tables)
    live: dict[str, set[str]] = {}
    relist_at: dict[str, int] = {}
    done = 0
    checkpoints: list[Checkpoint] = []
    process = psutil.Process()
    for ts, _, record, ends in events(nodes, gpus, seed):
        node = record.node
        if ts >= relist_at.setdefault(node, START_MS + RELIST_EVERY_MS):
            relist_at[node] = ts + RELIST_EVERY_MS  # the agent relists (410 Gone, a restart)
            listing = PodListSnapshot(node, ts, tuple(sorted(live.get(node, ()))))
            processor.handle(codec.decode(codec.encode(listing)))
        if isinstance(record, PodRecord):
            uids = live.setdefault(node, set())
            (uids.discard if record.deleted else uids.add)(record.uid)
        processor.handle(codec.decode(codec.encode(record)))
        if not ends:
            continue
        done += 1
        if done % every == 0:
            keys = {f.name: len(getattr(tables, f.name)) for f in fields(Tables)}
            rss = process.memory_info().rss / 2**20
            checkpoint = Checkpoint(done, keys, log.writes, log.bytes, rss)
            log.writes = log.bytes = 0
            checkpoints.append(checkpoint)
            report(checkpoint)
        if done >= lifecycles:
            break
    return checkpoints


def bounded(checkpoints: list[Checkpoint], tolerance: float = TOLERANCE) -> bool:
    first, last = checkpoints[0].total, checkpoints[-1].total
    return abs(last - first) <= tolerance * first


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--lifecycles", type=int, default=50_000)
    parser.add_argument("--every", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=4, help="GPUs per node")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    print(
        f"soak: {args.lifecycles:,} Job pod lifecycles on {args.nodes} nodes x {args.gpus} GPUs",
        flush=True,
    )
    checkpoints = soak(
        args.lifecycles,
        args.every,
        nodes=args.nodes,
        gpus=args.gpus,
        seed=args.seed,
        report=lambda c: print(c.line(), flush=True),
    )
    if len(checkpoints) < 2:
        print("soak: fewer than two checkpoints, nothing to compare")
        return 2
    first, last = checkpoints[0], checkpoints[-1]
    ok = bounded(checkpoints)
    print(
        f"state at {last.lifecycles:,} lifecycles: {last.total} keys, at {first.lifecycles:,}: "
        f"{first.total} keys -> {'bounded' if ok else 'GROWING'} "
        f"(within {TOLERANCE:.0%}: {'yes' if ok else 'no'})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
