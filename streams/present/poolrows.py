"""What operators see of each pool's demand: one row per pool, beside the device rows. Pure.

A row is the pool's latest ``demand`` record (:class:`contract.outputs.PoolDemand`, kept by
:class:`streams.worker.livedemand.LiveDemand`): the pods waiting for its GPUs and, in the same
pool, the allocated GPUs and those measured idle with their holders. Waits and idle times are
as of the record's own ``ts_ms`` (event time), never the reader's clock. Rows are listed oldest
wait first; ``gpuattr top`` prints :func:`pool_line` for each above the devices.

Pools overlap on supply: a device of product A100 is allocated in ``nvidia.com/gpu`` and in
``nvidia.com/gpu|product=A100`` alike. A pending pod is in exactly one pool per resource it asks
for, so waiting pods and GPUs requested add up across pools; allocated and idle GPUs do not.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pydantic

from contract.outputs import PoolDemand
from contract.records import fast_init
from streams.core.devices import dra


@fast_init
@dataclass(frozen=True, slots=True)
class WaitingRow:
    namespace: str
    pod: str
    uid: str
    gpus: int
    since_ms: int
    wait_s: float  # as of the record's ts_ms
    workload: str | None
    priority: int
    reason: str
    message: str
    waits_for: str = "scheduler"  # or "quota": a Kueue Workload not admitted yet
    queue: str = ""
    cluster_queue: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class IdleRow:
    node: str
    device_uuid: str
    since_ms: int
    idle_s: float  # as of the record's ts_ms
    holders: tuple[str, ...]  # namespace/pod


@fast_init
@dataclass(frozen=True, slots=True)
class PoolRow:
    pool: str
    resource: str
    product: str
    mig_profile: str
    ts_ms: int
    pending_pods: int  # every waiting pod (``waiting`` lists the oldest ones)
    gpus_requested: int
    oldest_since_ms: int | None
    oldest_wait_s: float | None
    waiting: tuple[WaitingRow, ...]
    allocated_gpus: int
    idle_gpus: int
    idle_for_s: float | None  # the shortest idle time among the idle GPUs: all idle that long
    idle: tuple[IdleRow, ...]
    unmeasured_gpus: int  # allocated, usage unknown: never idle
    queued_workloads: int = 0  # Kueue Workloads waiting for quota (not in pending_pods)
    gpus_for_quota: int = 0  # of gpus_requested, what they ask


POOL_ROWS = pydantic.TypeAdapter(list[PoolRow])


def _seconds(ts_ms: int, since_ms: int) -> float:
    return max(0, ts_ms - since_ms) / 1000


def pool_row(record: PoolDemand) -> PoolRow:
    idle = tuple(
        IdleRow(
            node=g.node,
            device_uuid=g.device_uuid,
            since_ms=g.since_ms,
            idle_s=_seconds(record.ts_ms, g.since_ms),
            holders=tuple(f"{h.namespace}/{h.pod}" for h in g.holders),
        )
        for g in record.idle
    )
    return PoolRow(
        pool=record.pool,
        resource=record.resource,
        product=record.product,
        mig_profile=record.mig_profile,
        ts_ms=record.ts_ms,
        pending_pods=record.pending_pods,
        gpus_requested=record.gpus_requested,
        oldest_since_ms=record.oldest_since_ms,
        oldest_wait_s=(
            _seconds(record.ts_ms, record.oldest_since_ms)
            if record.oldest_since_ms is not None
            else None
        ),
        waiting=tuple(
            WaitingRow(
                namespace=w.namespace,
                pod=w.pod,
                uid=w.uid,
                gpus=w.gpus,
                since_ms=w.since_ms,
                wait_s=_seconds(record.ts_ms, w.since_ms),
                workload=w.workload,
                priority=w.priority,
                reason=w.reason,
                message=w.message,
                waits_for=w.waits_for,
                queue=w.queue,
                cluster_queue=w.cluster_queue,
            )
            for w in record.waiting
        ),
        allocated_gpus=record.allocated_gpus,
        idle_gpus=record.idle_count(),
        idle_for_s=(
            _seconds(record.ts_ms, record.idle_latest_since_ms)
            if record.idle_latest_since_ms is not None
            else min((g.idle_s for g in idle), default=None)  # a record listing every idle GPU
        ),
        idle=idle,
        unmeasured_gpus=record.unmeasured_gpus,
        queued_workloads=record.queued_workloads,
        gpus_for_quota=record.gpus_for_quota,
    )


def _order(row: PoolRow) -> tuple[bool, int, str]:
    return row.oldest_since_ms is None, row.oldest_since_ms or 0, row.pool


def ordered_pools(rows: Iterable[PoolRow]) -> list[PoolRow]:
    """Oldest wait first; pools nobody waits for (supply only) last, by name."""
    return sorted(rows, key=_order)


def merge_pools(parts: Sequence[Iterable[PoolRow]]) -> list[PoolRow]:
    """Rows gathered from several workers: one per pool, the latest (a pool whose partition is
    changing hands may be listed by both for a moment)."""
    latest: dict[str, PoolRow] = {}
    for part in parts:
        for row in part:
            current = latest.get(row.pool)
            if current is None or row.ts_ms > current.ts_ms:
                latest[row.pool] = row
    return ordered_pools(latest.values())


def span_text(seconds: float) -> str:
    """A wait or idle time in its largest whole unit: ``45 s``, ``12 min``, ``2 h``, ``28 d``."""
    s = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s // size} {unit}"
    return f"{s} s"


#: how many idle GPUs' holders a line names
HOLDERS_NAMED = 4


def pool_line(row: PoolRow) -> str:
    """``nvidia.com/gpu  12 pods wait (24 GPUs, oldest 28 d: "0/8 nodes are available: 8
    Insufficient nvidia.com/gpu.") · 5 allocated idle ≥ 2 h: ns/pod, …``"""
    mig = row.mig_profile or not dra.selects(row.resource, mig=False)  # dra:mig.nvidia.com
    unit = "MIG instance" if mig else "GPU"
    unit += "" if row.gpus_requested == 1 else "s"
    if row.pending_pods or row.queued_workloads:
        oldest = ""
        if row.oldest_wait_s is not None:
            oldest = f", oldest {span_text(row.oldest_wait_s)}"
            first = row.waiting[0] if row.waiting else None
            if first is not None and first.message:
                oldest += f': "{first.message}"'
        said = []
        if row.pending_pods:
            said.append(
                f"{row.pending_pods} {'pod waits' if row.pending_pods == 1 else 'pods wait'}"
            )
        if row.queued_workloads:
            queues = sorted({w.cluster_queue for w in row.waiting if w.waits_for == "quota"} - {""})
            where = f" in ClusterQueue {', '.join(queues)}" if queues else ""
            n = row.queued_workloads
            said.append(
                f"{n} Workload{' waits' if n == 1 else 's wait'} for quota{where} "
                f"({row.gpus_for_quota} of them)"
            )
        demand = f"{' and '.join(said)} ({row.gpus_requested} {unit}{oldest})"
    else:
        demand = "nobody waits"
    supply = f"{row.allocated_gpus} allocated"
    if row.idle_gpus and row.idle_for_s is not None:
        holders = list(dict.fromkeys(h for g in row.idle for h in g.holders))
        named = ", ".join(holders[:HOLDERS_NAMED])
        more = ", …" if len(holders) > HOLDERS_NAMED else ""
        supply = f"{row.idle_gpus} allocated idle ≥ {span_text(row.idle_for_s)}"
        if named:
            supply += f": {named}{more}"
        supply += f" (of {row.allocated_gpus} allocated)"
    if row.unmeasured_gpus:
        supply += f", {row.unmeasured_gpus} unmeasured"
    return f"{row.pool}  {demand} · {supply}"
