"""``python -m bench.soak``: is the worker's state bounded by what is live, not by history?

No Kafka: Job pod lifecycles on a handful of nodes go through the agents' records (encoded and
decoded with :mod:`contract.codec`, as the worker reads them) into
:class:`streams.core.flow.processor.Processor` over in-memory tables that count every assignment and
deletion and sum its encoded size (the bytes the changelog would be written).

One lifecycle: a Job pod is created on a node, takes a GPU (a PodResources diff), is sampled by
DCGM every 30 s while it runs (2 to 6 minutes), finishes (its device released), and is deleted
after its TTL. Every node relists its pods (``k8s.pod-list``) once an hour of event time and
says how its sources are (``agent.status``) every minute; the partition's clock ticks every 15 s.

Nodes churn: each node lives 30 to 90 minutes of event time, then leaves — every other one
deleted in the API (the cluster role's ``k8s.node`` deletion), the others simply falling silent
(gone after their TTL) — and a new node (a new name) takes its place a minute later. One more
node is in MIG mode and is reconfigured every 20 minutes: its seven 1g.5gb instances get new MIG
UUIDs (a new inventory and allocatable list), their old ones never seen again.

Every ``--every`` lifecycles it prints lifecycles, table keys per table and in total, changelog
bytes written in that stretch and the process RSS; at the end, whether the keys at the last
checkpoint, per node tracked, are within 10 % of those at the first and no more nodes are
tracked than can be live or silent-not-yet-gone, exiting 1 if not.
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
    AgentStatus,
    AllocatableDevice,
    ClockTick,
    DcgmSample,
    DcgmScrape,
    DeviceAssignment,
    DeviceInventory,
    GpuInfo,
    InputRecord,
    MigInfo,
    NodeRecord,
    OwnerRef,
    PodListSnapshot,
    PodRecord,
    PodResourcesDiff,
    PodResourcesSnapshot,
    SourceStatus,
)
from sim.scenario import gpu_uuid
from streams.core.flow.processor import Processor, Tables
from streams.core.flow.state import TABLE_CODEC

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
    event_hours: float = 0.0  # event time driven so far
    nodes_seen: int = 0  # distinct nodes so far (the MIG node included)
    mig_uuids_seen: int = 0  # distinct MIG instance UUIDs so far

    @property
    def total(self) -> int:
        return sum(self.keys.values())

    @property
    def nodes(self) -> int:
        """Nodes the worker tracks (live or not yet gone): one ``node-state`` key each."""
        return self.keys.get("node_state", 0)

    @property
    def per_node(self) -> float:
        return self.total / max(1, self.nodes)

    def line(self) -> str:
        per_table = " ".join(f"{name}={n}" for name, n in self.keys.items())
        return (
            f"lifecycles={self.lifecycles:>7,}  keys={self.total:>4} ({per_table})  "
            f"changelog: {self.changelog_writes:,} writes, {self.changelog_bytes / 1e6:.1f} MB  "
            f"rss={self.rss_mib:.0f} MiB  history: {self.event_hours:,.0f} h, "
            f"{self.nodes_seen:,} nodes, {self.mig_uuids_seen:,} MIG UUIDs"
        )


#: (ts_ms, tie-break, record, ends a lifecycle)
Event = tuple[int, int, InputRecord | ClockTick, bool]


def node_setup(node: str, gpus: int, start_ms: int = START_MS) -> list[InputRecord]:
    uuids = [gpu_uuid(node, g) for g in range(gpus)]
    return [
        DeviceInventory(
            node, start_ms, "file", tuple(GpuInfo(g, u, "A100") for g, u in enumerate(uuids))
        ),
        NodeRecord(node, start_ms, (("nvidia.com/gpu.sharing-strategy", "none"),)),
        PodResourcesSnapshot(
            node, start_ms, (), tuple(AllocatableDevice("nvidia.com/gpu", u) for u in uuids)
        ),
        PodListSnapshot(node, start_ms, ()),
    ]


NODE_LIFE_MS = (30 * MINUTE, 90 * MINUTE)
STATUS_EVERY_MS = MINUTE
TICK_EVERY_MS = 15 * SECOND
MIG_RECONFIG_EVERY_MS = 20 * MINUTE
MIG_NODE = "mig-node"
MIG_INSTANCES = 7


def gpu_lifecycles(
    node: str, gpu: int, rng: random.Random, order: int, start_ms: int, end_ms: int
) -> Iterator[Event]:
    """Job pods on one GPU, one after another, until the node leaves (in time order)."""
    uuid = gpu_uuid(node, gpu)
    t = start_ms + rng.randrange(60 * SECOND)
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
        if t >= end_ms:
            return
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
            if t >= end_ms:
                return  # the node left with the pod on it: its keys go with the node
            util = float(rng.choice((0, 35, 60, 92, 97)))
            scrape = DcgmSample(
                node, t, uuid, gpu, "NVIDIA A100-SXM4-40GB", node, util_pct=util, fb_used_mib=1e4
            )
            yield t, order, scrape, False
            t += 30 * SECOND
        t = end
        if t >= end_ms:
            return
        yield t, order, PodResourcesDiff(node, t, (), (row,)), False
        gone = t + rng.randrange(5, 30) * SECOND  # ttlSecondsAfterFinished
        if gone >= end_ms:
            return
        deleted = PodRecord(node, gone, uid, "batch", pod, created, gone, True, (), owner, workload)
        yield gone, order, deleted, True
        t = gone + rng.randrange(2, 60) * SECOND


def statuses(node: str, order: int, start_ms: int, end_ms: int) -> Iterator[Event]:
    ok = (SourceStatus("dcgm", "ok"), SourceStatus("podresources", "ok"))
    for t in range(start_ms + STATUS_EVERY_MS, end_ms, STATUS_EVERY_MS):
        yield t, order, AgentStatus(node, t, ok), False


def node_slot(slot: int, gpus: int, rng: random.Random) -> Iterator[Event]:
    """One node after another in one place of the fleet, for ever: each lives a while, then
    leaves (deleted, or silent), and the next one joins a minute later."""
    start, generation = START_MS, 0
    while True:
        node = f"gpu-node-{slot:02d}-{generation:04d}"
        end = start + rng.randrange(*NODE_LIFE_MS)
        for rec in node_setup(node, gpus, start):
            yield start, -1, rec, False
        order = slot * (gpus + 1)
        lines = [
            gpu_lifecycles(node, g, random.Random(rng.random()), order + g, start, end)
            for g in range(gpus)
        ]
        yield from heapq.merge(
            *lines, statuses(node, order + gpus, start, end), key=lambda e: (e[0], e[1])
        )
        if generation % 2 == 0:  # deleted in the API; the others fall silent (their TTL)
            yield end, order, NodeRecord(node, end, (), deleted=True), False
        start, generation = end + MINUTE, generation + 1


def mig_node(rng: random.Random, order: int) -> Iterator[Event]:
    """A MIG node reconfigured every 20 minutes: new instance UUIDs each time."""
    parent = gpu_uuid(MIG_NODE, 0)
    yield (
        START_MS,
        -1,
        NodeRecord(MIG_NODE, START_MS, (("nvidia.com/mig.strategy", "single"),)),
        False,
    )
    t, generation = START_MS, 0
    while True:
        migs = tuple(
            MigInfo(f"MIG-{MIG_NODE}-{generation:05d}-{gi}", parent, gi, "1g.5gb")
            for gi in range(1, MIG_INSTANCES + 1)
        )
        inventory = DeviceInventory(MIG_NODE, t, "nvml", (GpuInfo(0, parent, "A100"),), migs)
        allocatable = tuple(AllocatableDevice("nvidia.com/gpu", m.mig_uuid) for m in migs)
        yield t, order, inventory, False
        yield t, order, PodResourcesSnapshot(MIG_NODE, t, (), allocatable), False
        end = t + MIG_RECONFIG_EVERY_MS
        while t < end:
            t += 30 * SECOND
            samples = tuple(
                DcgmSample(
                    MIG_NODE,
                    t,
                    parent,
                    0,
                    "A100",
                    MIG_NODE,
                    mig_instance_id=m.gi,
                    mig_profile="1g.5gb",
                    gr_engine_active=rng.random(),
                )
                for m in migs
            )
            yield t, order, DcgmScrape(MIG_NODE, t, samples), False
        generation += 1


def ticks() -> Iterator[Event]:
    t = START_MS
    while True:
        t += TICK_EVERY_MS
        yield t, -2, ClockTick(0, t), False


def events(nodes: int, gpus: int, seed: int) -> Iterator[Event]:
    rng = random.Random(seed)
    slots = [node_slot(i, gpus, random.Random(rng.random())) for i in range(nodes)]
    mig = mig_node(random.Random(rng.random()), nodes * (gpus + 1))
    yield from heapq.merge(*slots, mig, ticks(), key=lambda e: (e[0], e[1]))


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
    seen_nodes: set[str] = set()
    seen_migs: set[str] = set()
    for ts, _, record, ends in events(nodes, gpus, seed):
        if isinstance(record, ClockTick):
            processor.handle(codec.decode(codec.encode(record)))
            continue
        node = record.node
        seen_nodes.add(node)
        if isinstance(record, DeviceInventory):
            seen_migs.update(m.mig_uuid for m in record.migs)
        if isinstance(record, NodeRecord) and record.deleted:
            live.pop(node, None)
            relist_at.pop(node, None)
        elif ts >= relist_at.setdefault(node, ts + RELIST_EVERY_MS):
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
            hours = (ts - START_MS) / 3_600_000
            checkpoint = Checkpoint(
                done, keys, log.writes, log.bytes, rss, hours, len(seen_nodes), len(seen_migs)
            )
            log.writes = log.bytes = 0
            checkpoints.append(checkpoint)
            report(checkpoint)
        if done >= lifecycles:
            break
    return checkpoints


def most_tracked_nodes(nodes: int) -> int:
    """Each node slot holds its node and, for up to the node TTL after a silent one stops, the
    silent one too (its replacement joins a minute later); plus the MIG node."""
    return 2 * nodes + 1


def bounded(checkpoints: list[Checkpoint], most_nodes: int, tolerance: float = TOLERANCE) -> bool:
    """Bounded by what is live: the nodes tracked never exceed the most that can be live at once,
    and the keys per tracked node at the last checkpoint are within ``tolerance`` of the first.

    Node churn makes the total move with the number of nodes alive at a checkpoint (a replacement
    joins a minute before the leaver is gone), so the total alone is the wrong yardstick."""
    first, last = checkpoints[0], checkpoints[-1]
    if any(c.nodes > most_nodes for c in checkpoints):
        return False
    return last.per_node <= (1 + tolerance) * first.per_node


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
    most = most_tracked_nodes(args.nodes)
    ok = bounded(checkpoints, most)
    print(
        f"state at {last.lifecycles:,} lifecycles: {last.total} keys on {last.nodes} nodes "
        f"({last.per_node:.1f} per node), at {first.lifecycles:,}: {first.total} keys on "
        f"{first.nodes} nodes ({first.per_node:.1f} per node); most nodes tracked "
        f"{max(c.nodes for c in checkpoints)} of at most {most} -> "
        f"{'bounded' if ok else 'GROWING'} "
        f"(per node within {TOLERANCE:.0%}: {'yes' if ok else 'no'})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
