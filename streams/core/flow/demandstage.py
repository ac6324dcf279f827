"""The demand stage: one demand-events record in, table updates and demand records and alerts
out. The glue between :mod:`streams.core.demand.demand` / :mod:`streams.core.demand.demandalerts`
and the
stage's tables.

**Tables** (plain ``MutableMapping`` objects, Faust tables in the worker; every key lives in the
partition of its resource, the key of the demand-events topic):

- ``demand_pods`` ``<resource>|<namespace>/<name>`` → :class:`~streams.core.demand.demand.Waiter`:
  the live pending pods, one key each — removed when the pod is bound or deleted, or when a
  pending-pod list taken after its last record does not name it; and under
  ``<resource>|kueue:<namespace>/<name>`` the Kueue Workloads queued for quota, removed when
  admitted, finished or deleted, or missing from a later Workload list. Bounded by the live
  waiters.
- ``demand_supply`` ``<resource>|<node>`` → :class:`~contract.inputs.NodeSupply` as it came;
  removed when the node has none of the resource allocated (or is gone).
- ``demand_resources`` ``<resource>`` → :class:`ResourceDemand`: the keys of those two, the
  pools' last records and open alerts, and what the latest records emitted (replay). Kept while
  the worker runs (one per resource name the cluster has).
- ``demand_partitions`` ``<partition>`` → :class:`PartitionResources`: the resources a partition
  holds, for its pending-pod lists and clock ticks (published into every partition, no key).

**Writes** happen only when something changes: a pod's or node's record that says nothing new
(event time aside) writes nothing, a tick writes only when an alert moves, a list only when it
removes a pod.

**Coalescing.** A pool's record whose answer did not move (only its supply-side figures did) is
sent at most once per ``supply_every_s`` of event time (:func:`streams.core.demand.demand.due`): it
is
held back, not written anywhere — ``pools`` keeps the pool's last *sent* record — and sent by
the first record of the resource that changes its pools, or the partition's first clock tick,
once the interval since the last one has passed (each recomputes the pools from the tables). The
alerts step on the pools as the tables say now, sent or held back, and a pool whose alert moves
has its record sent with it. A worker that crashes while a change is held back loses nothing:
the tables hold the change, and the next tick recomputes it.

**Order.** A record older than what a key holds is stale (another producer's late record, or the
same record processed again); a pod or node removed is remembered
(:data:`streams.core.replays.REMOVALS_REMEMBERED` per resource, with the event time of its
removal) so an older record does not bring it back.

**Replay** (as :mod:`streams.core.stack.nodestack`): each emission remembers the record that caused
it
(its event time and fingerprint); that record, processed again after a crash whose table writes
reached the changelog but whose outputs did not, emits the same alerts again — the same alert
ids, exactly — and, for every pool it touched, that pool's latest record (its tombstone when the
pool is gone). A demand record is a pool's state, keyed by pool on a compacted topic: what a
consumer must end with is the pool's last record, and that is what a replay delivers (a record
superseded before the crash may not be delivered again; the alerts it caused always are). So an
emission remembers which pools it touched, not copies of their records: the resource's value
holds each pool's record once (a 250-node pool's record is ~35 KB; four remembered copies made
the value ~130 KB, written on every supply change). Alerts are remembered apart from
demand records, so the demand records of later input never push an alert out before its input
is committed.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field, fields

from contract.inputs import (
    ClockTick,
    NodeSupply,
    PendingPod,
    PendingPodList,
    QueuedWorkload,
    QueuedWorkloadList,
    pool_resource,
)
from contract.outputs import Alert, PoolDemand, PoolDemandRetired
from contract.records import Record, replace
from streams.core import keys, lifetimes, replays
from streams.core.demand import demand, demandalerts
from streams.core.demand.demand import Waiter
from streams.core.demand.supplyindex import SupplyIndex
from streams.core.flow.spine import fingerprint
from streams.core.lifetimes import Lifetimes
from streams.core.replays import ALERTS_REMEMBERED, REMEMBERED, REMOVALS_REMEMBERED

DemandOutput = PoolDemand | PoolDemandRetired | Alert


class UnusableDemandRecord(ValueError):
    """A well-formed record that has no place on the demand-events topic under its key."""


class DemandClockJump(UnusableDemandRecord):
    """A record further ahead of its partition's event time than the jump bound allows."""


class Departure(Record, frozen=True):
    """A pod (``namespace/name``) or node (``node:<name>``) removed at ``ts_ms``."""

    key: str
    ts_ms: int


class Emission(Record, frozen=True):
    """What the record with fingerprint ``by`` at ``ts_ms`` emitted: the pools whose records it
    changed (``pools``), the pools it retired, its alerts. ``demands``: the records themselves,
    as values of an older worker keep them (read, never written: their pools count as
    touched)."""

    ts_ms: int
    by: str
    demands: tuple[PoolDemand, ...] = ()
    retired: tuple[str, ...] = ()
    alerts: tuple[Alert, ...] = ()
    pools: tuple[str, ...] = ()  # additive

    def touched(self) -> tuple[str, ...]:
        """Every pool whose record it changed or retired, sorted."""
        return tuple(sorted({*self.pools, *self.retired, *(d.pool for d in self.demands)}))


class ResourceDemand(Record, frozen=True):
    """A resource's index and memory (module docstring)."""

    pods: tuple[str, ...] = ()  # namespace/name, sorted
    nodes: tuple[str, ...] = ()  # sorted
    departed: tuple[Departure, ...] = ()  # newest first
    pools: tuple[PoolDemand, ...] = ()  # each live pool's last record, by pool key
    firing: tuple[Alert, ...] = ()  # the open demand-while-idle alerts, by pool
    emitted: tuple[Emission, ...] = ()  # demand records, newest first
    alerted: tuple[Emission, ...] = ()  # alerts, newest first

    def departed_at(self, key: str) -> int | None:
        return next((d.ts_ms for d in self.departed if d.key == key), None)


class PartitionResources(Record, frozen=True):
    resources: tuple[str, ...] = ()
    #: additive: the partition's accepted event time (quantized; None: none yet, or a value
    #: written before it was kept): a record further ahead than the jump bound is refused
    clock_ms: int | None = None


@dataclass
class DemandTables:
    demand_pods: MutableMapping[str, Waiter] = field(default_factory=dict)
    demand_supply: MutableMapping[str, NodeSupply] = field(default_factory=dict)
    demand_resources: MutableMapping[str, ResourceDemand] = field(default_factory=dict)
    demand_partitions: MutableMapping[str, PartitionResources] = field(default_factory=dict)

    def sizes(self) -> dict[str, int]:
        return {f.name: len(getattr(self, f.name)) for f in fields(self)}


def _with(items: tuple[str, ...], item: str) -> tuple[str, ...]:
    return items if item in items else tuple(sorted((*items, item)))


def _without(items: tuple[str, ...], item: str) -> tuple[str, ...]:
    return tuple(i for i in items if i != item)


def _depart(rd: ResourceDemand, key: str, ts_ms: int) -> ResourceDemand:
    kept = tuple(d for d in rd.departed if d.key != key)
    return replace(rd, departed=replays.latest(Departure(key, ts_ms), kept, REMOVALS_REMEMBERED))


def key_resource(key: bytes | None, record: object) -> str | None:
    """The resource a keyed record is processed under, or ``None`` for a partition-wide one
    (list, tick). Raises :class:`UnusableDemandRecord` when key and payload disagree."""
    if isinstance(record, ClockTick | PendingPodList | QueuedWorkloadList):
        return None
    if key is None:
        raise UnusableDemandRecord(f"{type(record).__name__} without a key")
    resource = key.decode(errors="replace")
    if isinstance(record, NodeSupply):
        if pool_resource(record.resource) != resource:
            raise UnusableDemandRecord(f"key {resource!r} but supply of {record.resource!r}")
        return resource
    if isinstance(record, PendingPod | QueuedWorkload):
        asked = {pool_resource(r.resource) for r in record.requests}
        waits = record.state in ("pending", "queued")
        if resource not in asked and (waits or asked):
            raise UnusableDemandRecord(
                f"key {resource!r} but {record.namespace}/{record.name} asks for {sorted(asked)}"
            )
        return resource
    raise UnusableDemandRecord(f"{type(record).__name__} has no place on demand-events")


class DemandStage:
    """Applies demand-events records to :class:`DemandTables` and returns what to publish."""

    def __init__(
        self,
        tables: DemandTables,
        window_s: float,
        supply_every_s: float = 0.0,
        life: Lifetimes | None = None,
    ) -> None:
        """``supply_every_s``: a pool's record whose answer did not move is sent at most once
        per this much event time (:func:`streams.core.demand.demand.due`; 0: every change at once).
        ``life``: its jump bound checks each record against its partition's time, as the
        spine's (:func:`streams.core.lifetimes.admit`)."""
        self.tables = tables
        self.life = life or Lifetimes()
        self._ahead: dict[int, lifetimes.Pending] = {}  # as the spine's: a memo, not state
        self.window_ms = int(window_s * 1000)
        self.every_ms = int(supply_every_s * 1000)
        self._dirty = False  # the record being applied changed a pod or node key
        # each resource's supply summed per group, synced with its table records by identity
        # (a recovered table holds new objects: read afresh); bounded by the live nodes
        self._indexes: dict[str, SupplyIndex] = {}

    def handle(self, record: object, partition: int, key: bytes | None) -> list[DemandOutput]:
        resource = key_resource(key, record)
        self._clock(partition, record, resource)
        if resource is not None:
            self._index(partition, resource)
            assert isinstance(record, PendingPod | QueuedWorkload | NodeSupply)
            return self._resource(resource, record, record.ts_ms)
        assert isinstance(record, ClockTick | PendingPodList | QueuedWorkloadList)
        out: list[DemandOutput] = []
        for r in self.resources(partition):
            out += self._resource(r, record, record.ts_ms)
        return out

    def _clock(self, partition: int, record: object, resource: str | None) -> None:
        """The record's time against its partition's, before any table changes: too far ahead
        (unconfirmed), it is refused. A node's supply is the node's time; the rest the cluster
        role's."""
        assert isinstance(
            record,
            ClockTick
            | PendingPodList
            | PendingPod
            | QueuedWorkload
            | QueuedWorkloadList
            | NodeSupply,
        )
        by = f"node {record.node!r}" if isinstance(record, NodeSupply) else lifetimes.CLUSTER_ROLE
        held = (
            self.tables.demand_partitions.get(keys.partition_key(partition)) or PartitionResources()
        )
        pending = self._ahead.get(partition)
        ahead, pending = lifetimes.admit(held.clock_ms, record.ts_ms, by, pending, self.life)
        if pending is None:
            self._ahead.pop(partition, None)
        else:
            self._ahead[partition] = pending
        if ahead is not None:
            why = lifetimes.jumped(by, record.ts_ms, ahead, partition, held.clock_ms, self.life)
            raise DemandClockJump(why)
        if held.clock_ms is not None and record.ts_ms < held.clock_ms:
            return
        clock = lifetimes.quantized(held.clock_ms, record.ts_ms, self.life.quantum_ms)
        if clock != held.clock_ms:
            self.tables.demand_partitions[keys.partition_key(partition)] = replace(
                held, clock_ms=clock
            )

    def resources(self, partition: int) -> tuple[str, ...]:
        held = self.tables.demand_partitions.get(keys.partition_key(partition))
        return held.resources if held is not None else ()

    def pools(self, partition: int) -> list[PoolDemand]:
        """The last record of every live pool of the partition (the worker's live cache)."""
        out: list[PoolDemand] = []
        for r in self.resources(partition):
            rd = self.tables.demand_resources.get(r)
            out += rd.pools if rd is not None else ()
        return out

    def _index(self, partition: int, resource: str) -> None:
        held = (
            self.tables.demand_partitions.get(keys.partition_key(partition)) or PartitionResources()
        )
        if resource not in held.resources:
            self.tables.demand_partitions[keys.partition_key(partition)] = replace(
                held, resources=_with(held.resources, resource)
            )

    # --- one resource

    def _resource(self, resource: str, record: object, ts_ms: int) -> list[DemandOutput]:
        """``record``'s fingerprint is taken only when it is needed: to tell it from a record
        that emitted at the same time, or to remember what it emits (most records emit
        nothing)."""
        old = self.tables.demand_resources.get(resource) or ResourceDemand()
        again = self._again(old, ts_ms, record)
        if again is not None:
            return again
        self._dirty = False
        rd = self._apply(resource, old, record)
        # a pod or node of the resource changed: its pools may have; a tick: a change held back
        # may be due (module doc, *coalescing*)
        fresh = (self._dirty and not self._figures_only(old, record, ts_ms)) or isinstance(
            record, ClockTick
        )
        now = self._demands(resource, rd, ts_ms) if fresh else rd.pools
        changed, retired = demand.changes(rd.pools, now) if fresh else ((), ())
        rd, alerts = self._alerts(rd, now, ts_ms, retired)
        alerted = {a.demand.pool for a in alerts if a.demand is not None}
        sent = demand.to_send(rd.pools, changed, alerted, self.every_ms)
        if sent or retired:
            last = {d.pool: d for d in (*rd.pools, *sent)}  # a pool's sent record replaces it
            rd = replace(rd, pools=tuple(last[d.pool] for d in now if d.pool in last))
            pools = tuple(d.pool for d in sent)
            emission = Emission(ts_ms, fingerprint(record), retired=retired, pools=pools)
            rd = replace(rd, emitted=replays.remember(emission, rd.emitted, REMEMBERED))
        if alerts:
            emission = Emission(ts_ms, fingerprint(record), alerts=alerts)
            rd = replace(rd, alerted=replays.remember(emission, rd.alerted, ALERTS_REMEMBERED))
        if rd != old:
            self.tables.demand_resources[resource] = rd
        # a resolution before the pool's tombstone, the new records before a firing
        out: list[DemandOutput] = [a for a in alerts if a.status == "resolved"]
        out += [PoolDemandRetired(p) for p in retired]
        out += sent
        return out + [a for a in alerts if a.status == "firing"]

    def _figures_only(self, rd: ResourceDemand, record: object, ts_ms: int) -> bool:
        """The record can move nothing but figures that are not due yet, so the pools need not
        be recomputed: a supply record of a node that supplied already and still does, in a
        resource nobody waits for and with no open alert (so no answer can move: every pool
        keeps its allocation, and nobody waits for the idle), whose every pool was sent less
        than the interval ago. The next tick recomputes and sends what is then due."""
        return (
            isinstance(record, NodeSupply)
            and bool(record.devices)
            and not record.gone
            and record.node in rd.nodes
            and not rd.pods
            and not rd.firing
            and demand.none_due(rd.pools, ts_ms, self.every_ms)
        )

    def _again(self, rd: ResourceDemand, ts_ms: int, record: object) -> list[DemandOutput] | None:
        """The alerts the record emitted when it was first processed, and the latest record of
        each pool it touched (``None``: it is new, or it emitted nothing; module doc, replay)."""
        if not any(e.ts_ms == ts_ms for e in (*rd.emitted, *rd.alerted)):
            return None  # nothing emitted at its time: new (no fingerprint needed)
        by = fingerprint(record)
        hit = replays.recall(rd.emitted, ts_ms, by)
        alerted = replays.recall(rd.alerted, ts_ms, by)
        if hit is None and alerted is None:
            return None
        alerts = alerted.alerts if alerted is not None else ()
        out: list[DemandOutput] = [a for a in alerts if a.status == "resolved"]
        if hit is not None:
            latest = {d.pool: d for d in rd.pools}
            touched = hit.touched()
            out += [PoolDemandRetired(p) for p in touched if p not in latest]
            out += [latest[p] for p in touched if p in latest]
        return out + [a for a in alerts if a.status == "firing"]

    def _demands(self, resource: str, rd: ResourceDemand, ts_ms: int) -> tuple[PoolDemand, ...]:
        """Every pool's record of the resource from what its tables hold now."""
        pods = self.tables.demand_pods
        supply = self.tables.demand_supply
        waiters = [
            w for p in rd.pods if (w := pods.get(keys.resource_key(resource, p))) is not None
        ]
        index = self._indexes.get(resource)
        if index is None:
            index = self._indexes[resource] = SupplyIndex(resource)
        index.sync(rd.nodes, lambda node: keys.resource_key(resource, node), supply.get)
        if not index:
            del self._indexes[resource]  # nothing of it supplied: nothing kept
        return demand.demands_from(resource, waiters, index.groups(), index.supplying, ts_ms)

    def _alerts(
        self,
        rd: ResourceDemand,
        pools: Sequence[PoolDemand],
        ts_ms: int,
        retired: tuple[str, ...],
    ) -> tuple[ResourceDemand, tuple[Alert, ...]]:
        """Step every pool's alert (a live pool's, by its record as the tables say now —
        ``pools``, sent or held back —, and a retired pool's open one)."""
        firing = {a.demand.pool: a for a in rd.firing if a.demand is not None}
        records: dict[str, PoolDemand | None] = {d.pool: d for d in pools}
        records.update({p: None for p in retired if p in firing})
        moved: list[Alert] = []
        open_: list[Alert] = []
        for pool in sorted(records):
            fired, alerts = demandalerts.step(
                firing.get(pool), records[pool], ts_ms, self.window_ms
            )
            moved += alerts
            if fired is not None:
                open_.append(fired)
        if not moved:
            return rd, ()
        return replace(rd, firing=tuple(open_)), tuple(moved)

    # --- applying a record to the resource's keys

    def _apply(self, resource: str, rd: ResourceDemand, record: object) -> ResourceDemand:
        if isinstance(record, PendingPod | QueuedWorkload):
            return self._pod(resource, rd, record)
        if isinstance(record, NodeSupply):
            return self._supply(resource, rd, record)
        if isinstance(record, PendingPodList):
            return self._list(resource, rd, record)
        if isinstance(record, QueuedWorkloadList):
            return self._workloads(resource, rd, record)
        return rd  # a tick: time only

    def _pod(
        self, resource: str, rd: ResourceDemand, record: PendingPod | QueuedWorkload
    ) -> ResourceDemand:
        """A pending pod's record, or a queued Workload's (its own key: one waiter until Kueue
        admits it, its pods after)."""
        if isinstance(record, QueuedWorkload):
            pod = demand.workload_key(record.namespace, record.name)
            waits = record.state == "queued"
        else:
            pod = keys.short_name(record.namespace, record.name)
            waits = record.state == "pending"
        key = keys.resource_key(resource, pod)
        current = self.tables.demand_pods.get(key)
        if current is not None and record.ts_ms < current.ts_ms:
            return rd  # stale
        departed = rd.departed_at(pod)
        if current is None and departed is not None and record.ts_ms <= departed:
            return rd  # it left after this record
        if not waits:
            if current is None:  # never seen waiting here: remembered, so an older record of
                # it (another leader's, late) does not make it wait
                return rd if departed is not None else _depart(rd, pod, record.ts_ms)
            del self.tables.demand_pods[key]
            self._dirty = True
            return _depart(replace(rd, pods=_without(rd.pods, pod)), pod, record.ts_ms)
        waiter = (
            demand.waiter_of_workload(record, resource)
            if isinstance(record, QueuedWorkload)
            else demand.waiter_of(record, resource)
        )
        if waiter != current:  # a record processed again writes nothing
            self.tables.demand_pods[key] = waiter
            self._dirty = True
        rd = replace(rd, pods=_with(rd.pods, pod))
        if not waiter.queued and waiter.workload is not None:
            rd = self._handed_over(resource, rd, waiter, record.ts_ms)
        return rd

    def _handed_over(
        self, resource: str, rd: ResourceDemand, pod: Waiter, ts_ms: int
    ) -> ResourceDemand:
        """A pending pod of a job whose Workload still waits for quota here: Kueue admitted it
        (its pods exist only then), whatever order the two watches delivered that in. The pods
        are the demand from now on; the Workload's wait ends (one waiter, never both)."""
        for other in rd.pods:
            key = keys.resource_key(resource, other)
            w = self.tables.demand_pods.get(key)
            if w is None or not w.queued or w.ts_ms > ts_ms:
                continue
            if (w.namespace, w.workload) == (pod.namespace, pod.workload):
                del self.tables.demand_pods[key]
                self._dirty = True
                rd = _depart(replace(rd, pods=_without(rd.pods, other)), other, ts_ms)
        return rd

    def _supply(self, resource: str, rd: ResourceDemand, record: NodeSupply) -> ResourceDemand:
        key = keys.resource_key(resource, record.node)
        current = self.tables.demand_supply.get(key)
        if current is not None and record.ts_ms < current.ts_ms:
            return rd
        departed = rd.departed_at(keys.node_removal(record.node))
        if current is None and departed is not None and record.ts_ms <= departed:
            return rd
        if record.gone or not record.devices:
            if current is None:
                return rd
            del self.tables.demand_supply[key]  # and from the resource's index at its next sync
            self._dirty = True
            rd = replace(rd, nodes=_without(rd.nodes, record.node))
            return _depart(rd, keys.node_removal(record.node), record.ts_ms)
        if record != current:
            self.tables.demand_supply[key] = record
            self._dirty = True
        return replace(rd, nodes=_with(rd.nodes, record.node))

    def _list(self, resource: str, rd: ResourceDemand, record: PendingPodList) -> ResourceDemand:
        """Pods whose last record is older than the list and that it does not name are gone (a
        pod published after the list was taken stays)."""
        listed = {(p.namespace, p.name, p.uid) for p in record.pods}
        return self._unlisted(resource, rd, record.ts_ms, listed, queued=False)

    def _workloads(
        self, resource: str, rd: ResourceDemand, record: QueuedWorkloadList
    ) -> ResourceDemand:
        """Workloads whose last record is older than the list and that it does not name are
        gone, as pods are from a pending-pod list (the pods' keys are not the list's to judge)."""
        listed = {(w.namespace, w.name, w.uid) for w in record.workloads}
        return self._unlisted(resource, rd, record.ts_ms, listed, queued=True)

    def _unlisted(
        self,
        resource: str,
        rd: ResourceDemand,
        ts_ms: int,
        listed: set[tuple[str, str, str]],
        *,
        queued: bool,
    ) -> ResourceDemand:
        for pod in rd.pods:
            key = keys.resource_key(resource, pod)
            w = self.tables.demand_pods.get(key)
            if w is None:
                rd = replace(rd, pods=_without(rd.pods, pod))
                continue
            if w.queued != queued:
                continue
            if w.ts_ms < ts_ms and (w.namespace, w.name, w.uid) not in listed:
                del self.tables.demand_pods[key]
                self._dirty = True
                rd = _depart(replace(rd, pods=_without(rd.pods, pod)), pod, ts_ms)
        return rd
