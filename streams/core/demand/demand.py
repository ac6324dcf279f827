"""Demand per pool: the pods waiting for GPUs and, in the same pool, the allocated GPUs and those
measured idle. Pure: records in, table values and demand records out.

**Pools.** A pool is a resource and, where the request says so, a GPU product and MIG profile
(:class:`contract.outputs.Pool`). The pools of a resource are every distinct (resource,
product, MIG profile) its waiting pods ask for, and the resource's plain pool (any product, no
MIG profile) while anything of that resource is allocated — so a resource's supply stays in
view when nobody waits, and a pool with nobody waiting and nothing allocated (or, for a product
or MIG pool, nobody waiting) retires: its key on the demand topic gets a tombstone.

**Supply matching.** An allocated device belongs to a pool when the resource is the same and
the pool's product and MIG profile are ``""`` (any) or the device's (:func:`matches`). A DRA
resource is a device class (:func:`streams.core.devices.dra.device_class`): a MIG device is never
supply
of ``dra:gpu.nvidia.com``, even in a v1 supply record that named it by its driver.

**The record.** :func:`pool_demand` counts every waiting pod and device asked for — the devices
of a ResourceClaim several waiting pods reference once (:func:`requested`) — the oldest
wait, lists the waiting pods (oldest first, at most :data:`~contract.outputs.WAITING_LISTED`),
the allocated devices, those measured idle with their holders (longest idle first, at most
:data:`~contract.outputs.IDLE_LISTED`; all counted, and when the most recent began), and those
whose usage is unknown (never idle): a record stays bounded however large the pool. It holds
no age: the same waiters and supply give the same record at any time, so it changes only when
they do (:func:`same`), and time alone never emits one.

**When a changed record is sent** (:func:`due`). A pool's record lists up to
:data:`~contract.outputs.IDLE_LISTED` idle GPUs with their holders, so it is tens of KB on a
large pool, and its supply side (the allocated, idle and unmeasured counts, the idle list) moves
whenever any device of the pool starts or stops idling or changes hands: on every node's supply
change, a rewrite of the whole pool per change, O(nodes) bytes each time. A change of
the *answer* is sent at once: a new pool, anything on the demand side (who waits, for how many
GPUs, since when), allocation appearing or all gone, and — while anybody waits — idle GPUs
appearing or all gone. A change of the supply side's figures only is sent at most
once per interval of event time after the pool's last record (the caller's setting; 0: every
change at once), as a controller batches status updates: what a consumer of the compacted topic
ends with is still the pool's latest record, at most that interval (or until the partition's
next record or clock tick after it) behind.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable, Sequence
from itertools import islice
from typing import Protocol

from contract.inputs import (
    GpuRequest,
    NodeSupply,
    PendingPod,
    QueuedWorkload,
    SupplyDevice,
    SupplyHolder,
)
from contract.outputs import (
    IDLE_LISTED,
    WAITING_LISTED,
    Holder,
    IdleGpu,
    Pool,
    PoolDemand,
    WaitingPod,
    Workload,
)
from contract.records import Record, replace
from streams.core.devices import dra


class Waiter(Record, frozen=True):
    """A pending pod as the demand stage keeps it, for one resource (the partition's key): its
    requests of that resource, and what a demand record says of it. ``ts_ms`` is the event time
    of the record it came from (an older record of the same pod is stale).

    Or (``queued``) a Kueue Workload not admitted yet: it has no pods, so it is one waiter of its
    own until Kueue admits it; from then on its pods, pending for the scheduler, are the waiters
    (the Workload's ``admitted`` record ends its wait): one waiter for the same demand, never
    two. ``name`` is the Workload's, ``workload`` the job it stands for."""

    ts_ms: int
    namespace: str
    name: str
    uid: str
    created_ms: int
    requests: tuple[GpuRequest, ...]
    priority: int = 0
    workload: str | None = None  # "Kind/name"
    reason: str = ""
    message: str = ""
    queued: bool = False  # additive (v1): a Kueue Workload waiting for quota
    queue: str = ""
    cluster_queue: str = ""

    @property
    def pod(self) -> str:
        """Its key under the resource: a Workload's is apart from every pod's (no pod or
        namespace name has a colon)."""
        if self.queued:
            return workload_key(self.namespace, self.name)
        return f"{self.namespace}/{self.name}"


def workload_key(namespace: str, name: str) -> str:
    return f"kueue:{namespace}/{name}"


def waiter_of(record: PendingPod, resource: str) -> Waiter:
    """The pod's wait for ``resource`` (its requests of other resources are other partitions')."""
    w = record.workload
    return Waiter(
        ts_ms=record.ts_ms,
        namespace=record.namespace,
        name=record.name,
        uid=record.uid,
        created_ms=record.created_ms,
        requests=tuple(r for r in record.requests if r.resource == resource),
        priority=record.priority,
        workload=f"{w.kind}/{w.name}" if w is not None else None,
        reason=record.scheduled_reason,
        message=record.scheduled_message,
    )


def waiter_of_workload(record: QueuedWorkload, resource: str) -> Waiter:
    """The queued Workload's wait for ``resource``: it waits since it was created or last sent
    back to its queue."""
    w = record.owner
    return Waiter(
        ts_ms=record.ts_ms,
        namespace=record.namespace,
        name=record.name,
        uid=record.uid,
        created_ms=record.since_ms if record.since_ms is not None else record.created_ms,
        requests=tuple(r for r in record.requests if r.resource == resource),
        priority=record.priority,
        workload=f"{w.kind}/{w.name}" if w is not None else None,
        reason=record.reason,
        message=record.message,
        queued=True,
        queue=record.queue,
        cluster_queue=record.cluster_queue,
    )


def matches(pool: Pool, resource: str, device: SupplyDevice) -> bool:
    return (
        pool.resource == resource
        and pool.product in ("", device.product)
        and pool.mig_profile in ("", device.mig_profile)
        and dra.selects(resource, _is_mig(device))
    )


def asks(pool: Pool, request: GpuRequest) -> bool:
    """The request is for exactly this pool (its product and MIG profile as it says them)."""
    return (request.resource, request.product, request.mig_profile) == (
        pool.resource,
        pool.product,
        pool.mig_profile,
    )


def pools_of(
    resource: str, waiters: Iterable[Waiter], supply: Iterable[NodeSupply]
) -> tuple[Pool, ...]:
    """The resource's pools (module docstring), sorted by key."""
    return _pools(resource, waiters, any(s.devices and not s.gone for s in supply))


def _pools(resource: str, waiters: Iterable[Waiter], supplying: bool) -> tuple[Pool, ...]:
    pools = {Pool(resource, r.product, r.mig_profile) for w in waiters for r in w.requests}
    if supplying:
        pools.add(Pool(resource))
    return tuple(sorted(pools, key=Pool.key))


def _workload(kind_name: str | None) -> Workload | None:
    if not kind_name or "/" not in kind_name:
        return None
    kind, _, name = kind_name.partition("/")
    return Workload(kind, name)


def holders_of(resource: str, device: SupplyDevice) -> tuple[Holder, ...]:
    """The device's holders as an alert names them. What the supply says and no more: no
    container (``""``), the device's allocation units for a sole holder (each of several is
    counted one, their split not being known here), a UID ``resolved`` where the supply knows
    it."""

    def holder(h: SupplyHolder) -> Holder:
        return Holder(
            namespace=h.namespace,
            pod=h.pod,
            container="",
            resource=resource,
            device_ids=(device.device_uuid,),
            slots=device.slots if len(device.holders) == 1 else 1,
            uid=h.uid,
            uid_status="resolved" if h.uid else "pending",
            workload=_workload(h.workload),
        )

    return tuple(holder(h) for h in device.holders)


def _waiting(pool: Pool, w: Waiter) -> WaitingPod:
    return WaitingPod(
        namespace=w.namespace,
        pod=w.name,
        uid=w.uid,
        gpus=sum(r.count for r in w.requests if asks(pool, r)),
        since_ms=w.created_ms,
        priority=w.priority,
        workload=w.workload,
        reason=w.reason,
        message=w.message,
        waits_for="quota" if w.queued else "scheduler",
        queue=w.queue,
        cluster_queue=w.cluster_queue,
    )


#: an idle device as a pool's record lists it: (since, node, device UUID, position, described);
#: sorted, longest idle first (the position keeps a supply's order among equals; node and UUID
#: tell any two devices apart, so no two ever compare their descriptions)
IdleEntry = tuple[int, str, str, int, IdleGpu]


class Group(Protocol):
    """Allocated devices of one resource, product and MIG profile: what a pool's record needs of
    them (one node's, :class:`SupplyGroup`; or summed over a resource's nodes,
    :class:`streams.core.demand.supplyindex.SupplyIndex`)."""

    @property
    def product(self) -> str: ...
    @property
    def mig_profile(self) -> str: ...
    @property
    def allocated(self) -> int: ...
    @property
    def unmeasured(self) -> int: ...
    @property
    def idle(self) -> Sequence[IdleEntry]: ...  # sorted
    @property
    def latest(self) -> int | None: ...  # when the most recent of the idle ones began idling


class SupplyGroup(Record, frozen=True):
    """A node's allocated devices of one resource, product and MIG profile, counted and described
    once per distinct supply record (:func:`summarize`)."""

    product: str
    mig_profile: str
    allocated: int
    unmeasured: int
    idle: tuple[IdleEntry, ...]  # sorted
    latest: int | None


#: how a demand record reads a node's supply (:func:`summarize`, or a memo of it)
Summarize = Callable[[NodeSupply], tuple[SupplyGroup, ...]]


def summarize(supply: NodeSupply) -> tuple[SupplyGroup, ...]:
    """The node's supply grouped by product and MIG profile (nothing for a node that left)."""
    if supply.gone:
        return ()
    groups: dict[tuple[str, str], tuple[list[int], list[IdleEntry]]] = {}
    for i, d in enumerate(supply.devices):
        if not dra.selects(supply.resource, _is_mig(d)):
            continue  # a v1 record's MIG device under its driver's name: not a whole GPU
        counts, idle = groups.setdefault((d.product, d.mig_profile), ([0, 0], []))
        counts[0] += 1
        if not d.measured:
            counts[1] += 1
        elif d.idle_since_ms is not None:
            described = IdleGpu(
                supply.node, d.device_uuid, d.idle_since_ms, holders_of(supply.resource, d)
            )
            idle.append((d.idle_since_ms, supply.node, d.device_uuid, i, described))
    return tuple(
        SupplyGroup(
            product,
            mig,
            counts[0],
            counts[1],
            tuple(sorted(idle)),
            max((e[0] for e in idle), default=None),
        )
        for (product, mig), (counts, idle) in groups.items()
    )


def _is_mig(device: SupplyDevice) -> bool:
    """A MIG instance, as the attribution events name one (its profile, a ``MIG-`` UUID or a
    ``<parent>/gi<N>`` key)."""
    uuid = device.device_uuid
    return bool(device.mig_profile) or uuid.startswith("MIG-") or "/gi" in uuid


def requested(pool: Pool, waiters: Iterable[Waiter]) -> int:
    """The devices the waiters ask of the pool: a claim several of them reference is one
    allocation, counted once (a claim made from a template is its pod's own)."""
    plain = 0
    claims: dict[str, int] = {}
    for w in waiters:
        for r in w.requests:
            if not asks(pool, r):
                continue
            if r.claim:
                claims[r.claim] = max(claims.get(r.claim, 0), r.count)
            else:
                plain += r.count
    return plain + sum(claims.values())


def pool_demand(
    pool: Pool,
    waiters: Sequence[Waiter],
    supply: Sequence[NodeSupply],
    ts_ms: int,
    summarize: Summarize = summarize,
) -> PoolDemand:
    """The pool's demand record as of ``ts_ms`` (module docstring), from every node's supply
    record (``summarize``: how each is read)."""
    groups = (g for s in supply if s.resource == pool.resource for g in summarize(s))
    return pool_record(pool, waiters, groups, ts_ms)


def pool_record(
    pool: Pool, waiters: Sequence[Waiter], groups: Iterable[Group], ts_ms: int
) -> PoolDemand:
    """The pool's demand record as of ``ts_ms`` from the resource's supply in ``groups`` (a
    node's each, or each summed over the nodes: the same record either way)."""
    waiting = sorted(
        (_waiting(pool, w) for w in waiters if any(asks(pool, r) for r in w.requests)),
        key=lambda p: (p.since_ms, p.namespace, p.pod),
    )
    queued = [w for w in waiting if w.waits_for == "quota"]
    # the matching groups: counts added, the longest idle of their idle GPUs listed
    allocated = unmeasured = idle_gpus = 0
    latest: int | None = None
    runs: list[Sequence[IdleEntry]] = []
    for g in groups:
        if pool.product not in ("", g.product) or pool.mig_profile not in ("", g.mig_profile):
            continue
        allocated += g.allocated
        unmeasured += g.unmeasured
        g_latest = g.latest
        if g_latest is not None:
            idle_gpus += len(g.idle)
            latest = g_latest if latest is None or g_latest > latest else latest
            runs.append(g.idle)
    # each run sorted, no two entries equal: the first of their merge are the smallest of all
    listed = list(islice(heapq.merge(*runs), IDLE_LISTED))
    return PoolDemand(
        ts_ms=ts_ms,
        pool=pool.key(),
        resource=pool.resource,
        product=pool.product,
        mig_profile=pool.mig_profile,
        pending_pods=len(waiting) - len(queued),
        gpus_requested=requested(pool, waiters),
        oldest_since_ms=waiting[0].since_ms if waiting else None,
        waiting=tuple(waiting[:WAITING_LISTED]),
        allocated_gpus=allocated,
        idle=tuple(i[4] for i in listed),
        unmeasured_gpus=unmeasured,
        idle_gpus=idle_gpus,
        idle_latest_since_ms=latest,
        queued_workloads=len(queued),
        gpus_for_quota=sum(w.gpus for w in queued),
    )


def demands(
    resource: str,
    waiters: Sequence[Waiter],
    supply: Sequence[NodeSupply],
    ts_ms: int,
    summarize: Summarize = summarize,
) -> tuple[PoolDemand, ...]:
    """Every pool of the resource and its record, sorted by pool key."""
    return tuple(
        pool_demand(p, waiters, supply, ts_ms, summarize)
        for p in pools_of(resource, waiters, supply)
    )


def demands_from(
    resource: str,
    waiters: Sequence[Waiter],
    groups: Sequence[Group],
    supplying: bool,
    ts_ms: int,
) -> tuple[PoolDemand, ...]:
    """:func:`demands` from the resource's supply summed per group
    (:class:`streams.core.demand.supplyindex.SupplyIndex`; ``supplying``: some node has devices)."""
    return tuple(
        pool_record(p, waiters, groups, ts_ms) for p in _pools(resource, waiters, supplying)
    )


def same(a: PoolDemand | None, b: PoolDemand | None) -> bool:
    """Equal but for the event time."""
    if a is None or b is None:
        return a is b
    return replace(a, ts_ms=0) == replace(b, ts_ms=0)


def answer_moved(last: PoolDemand | None, now: PoolDemand) -> bool:
    """The pool's answer changed (module doc, *when a changed record is sent*): it is new, its
    demand side differs, its allocation crossed zero, or its idle GPUs did while anybody
    waits."""
    if last is None:
        return True
    if (last.pending_pods, last.gpus_requested, last.oldest_since_ms, last.waiting) != (
        now.pending_pods,
        now.gpus_requested,
        now.oldest_since_ms,
        now.waiting,
    ) or (last.queued_workloads, last.gpus_for_quota) != (now.queued_workloads, now.gpus_for_quota):
        return True
    if (last.allocated_gpus > 0) != (now.allocated_gpus > 0):
        return True
    waits = waiting(last) > 0 or waiting(now) > 0
    return waits and (last.idle_count() > 0) != (now.idle_count() > 0)


def waiting(demand: PoolDemand) -> int:
    """Everything that waits for the pool's GPUs: its pending pods and queued Workloads."""
    return demand.pending_pods + demand.queued_workloads


def _recent(last: PoolDemand, ts_ms: int, every_ms: int) -> bool:
    """The pool's last record is less than ``every_ms`` of event time old at ``ts_ms``."""
    return ts_ms - last.ts_ms < every_ms


def due(last: PoolDemand | None, now: PoolDemand, every_ms: int) -> bool:
    """A changed record ``now`` is sent now: its answer moved, or the pool's last record
    (``last``) is at least ``every_ms`` of event time old."""
    if every_ms <= 0 or last is None:
        return True
    return answer_moved(last, now) or not _recent(last, now.ts_ms, every_ms)


def to_send(
    last: Sequence[PoolDemand],
    changed: Sequence[PoolDemand],
    alerted: Collection[str],
    every_ms: int,
) -> tuple[PoolDemand, ...]:
    """Of the pools whose record changed (``changed``), the records sent now: those
    :func:`due` after the pool's last sent record (``last``), and any whose alert moved
    (``alerted``: the alert and the record go together)."""
    before = {d.pool: d for d in last}
    return tuple(d for d in changed if d.pool in alerted or due(before.get(d.pool), d, every_ms))


def none_due(last: Sequence[PoolDemand], ts_ms: int, every_ms: int) -> bool:
    """No change of figures alone can be due at ``ts_ms``: coalescing is on and every pool's last
    record is more recent than the interval (a change of the answer may still be)."""
    return every_ms > 0 and bool(last) and all(_recent(d, ts_ms, every_ms) for d in last)


def changes(
    last: Sequence[PoolDemand], now: Sequence[PoolDemand]
) -> tuple[tuple[PoolDemand, ...], tuple[str, ...]]:
    """What to emit: the pools whose record changed (or that are new), and the pools that
    retired (in ``last``, not in ``now``)."""
    before = {d.pool: d for d in last}
    after = {d.pool for d in now}
    changed = tuple(d for d in now if not same(before.get(d.pool), d))
    retired = tuple(sorted(p for p in before if p not in after))
    return changed, retired
