"""A node's GPU stack in the worker: the GPU Operator's intent a partition holds, and which
``node-status`` the node last emitted. Pure; table values (``cluster-policies`` keyed by input
partition, ``node-stack`` keyed by node).

The cluster role publishes each ClusterPolicy, GPUCluster and NVIDIADriver into every partition
of the input topic (like ``clock.tick``): each partition keeps the live ones
(:class:`PartitionPolicies`, bounded by the cluster's objects: a deleted one leaves). The
operator reconciles one ClusterPolicy and marks the others ``ignored``;
:meth:`PartitionPolicies.in_charge` is the one the verdict reads. A GPUCluster is a singleton
(its CRD admits only ``gpu-cluster``).

A node's status is recomputed (:func:`streams.core.stack.operatorstack.node_status`) whenever one of
its stack inputs changes — its operand pods, its labels, the agent's word on its sources, the
exporter's answers being refused or accepted again, the partition's ClusterPolicy — and emitted
only when it differs from the last one emitted, event time aside (:func:`step`).

**No output lost at any crash point** (as :mod:`streams.core.node.nodestate`): each emission
remembers
the record that caused it (its time and fingerprint), so that record, processed again after a crash
whose state writes reached the changelog but whose outputs did not, emits the same status again,
byte for byte (then the latest, if a later record emitted one). The last :data:`REMEMBERED`
emissions are kept (:func:`streams.core.replays.remember`: a record processed again from further
back than all of them is not remembered again, so it neither pushes a newer one out nor becomes the
node's last word). The same holds for the node's ``stack-broken`` alert (:class:`AlertEmission`),
whose moves a partition's ``clock.tick`` can make too (a grace window that ran out); an episode that
opens pending or ends before it fired sends nothing and is kept without an emission
(:func:`pending`).
"""

from __future__ import annotations

from typing import TypeVar

from contract.inputs import ClusterPolicyRecord, GpuClusterRecord, NvidiaDriverRecord
from contract.outputs import Alert, NodeStatus
from contract.records import Record, replace
from streams.core import replays
from streams.core.replays import REMEMBERED
from streams.core.stack.stackalerts import StackEpisode

IntentRecord = ClusterPolicyRecord | GpuClusterRecord | NvidiaDriverRecord
_R = TypeVar("_R", ClusterPolicyRecord, GpuClusterRecord, NvidiaDriverRecord)


def _upsert(live: tuple[_R, ...], record: _R) -> tuple[_R, ...]:
    kept = [p for p in live if p.name != record.name]
    if not record.deleted:
        kept.append(record)
    return tuple(sorted(kept, key=lambda p: p.name))


class PartitionPolicies(Record, frozen=True):
    """The live ClusterPolicies (a cluster normally has one), GPUClusters (one at most) and
    NVIDIADrivers, by name."""

    policies: tuple[ClusterPolicyRecord, ...] = ()
    clusters: tuple[GpuClusterRecord, ...] = ()  # additive (v1)
    drivers: tuple[NvidiaDriverRecord, ...] = ()  # additive (v1)

    def apply(self, record: IntentRecord) -> PartitionPolicies:
        if isinstance(record, ClusterPolicyRecord):
            return replace(self, policies=_upsert(self.policies, record))
        if isinstance(record, GpuClusterRecord):
            return replace(self, clusters=_upsert(self.clusters, record))
        return replace(self, drivers=_upsert(self.drivers, record))

    @property
    def empty(self) -> bool:
        return not (self.policies or self.clusters or self.drivers)

    def gpu_cluster(self) -> GpuClusterRecord | None:
        return self.clusters[0] if self.clusters else None

    def in_charge(self) -> ClusterPolicyRecord | None:
        """The policy the operator reconciles: the first not ``ignored``; when every one is, the
        first (it decides nothing, :func:`~streams.core.stack.operatorstack.node_status`, but its
        standing is reported)."""
        live = [p for p in self.policies if p.state != "ignored"]
        return next(iter(live or self.policies), None)


class Emission(Record, frozen=True):
    """A status emitted at ``ts_ms`` by the record whose fingerprint is ``by``."""

    ts_ms: int
    by: str
    status: NodeStatus


class AlertEmission(Record, frozen=True):
    """The ``stack-broken`` alerts the record whose fingerprint is ``by`` caused at ``ts_ms``."""

    ts_ms: int
    by: str
    alerts: tuple[Alert, ...]


class NodeStack(Record, frozen=True):
    """What the node's stack last said (newest first), and its ``stack-broken`` alert
    (:mod:`streams.core.stack.stackalerts`): the open episode and the last emissions (newest
    first)."""

    emitted: tuple[Emission, ...] = ()
    broken: StackEpisode | None = None  # additive (v1)
    alerted: tuple[AlertEmission, ...] = ()  # additive (v1)

    @property
    def last(self) -> NodeStatus | None:
        return self.emitted[0].status if self.emitted else None


def same(a: NodeStatus | None, b: NodeStatus | None) -> bool:
    """Equal but for the event time."""
    if a is None or b is None:
        return a is b
    return replace(a, ts_ms=0) == replace(b, ts_ms=0)


def step(
    old: NodeStack | None, status: NodeStatus, ts_ms: int, by: str, seen: bool = True
) -> tuple[NodeStack | None, tuple[NodeStatus, ...]]:
    """The node's new stack memory (None: unchanged) and the statuses to emit.

    A record that emitted before (same time, same fingerprint: processed again after a crash)
    emits what it emitted then — and the latest status after it when that is newer, so a record
    delivered twice never leaves an older status as the node's last word. Otherwise a status is
    emitted when it changed. A node where the GPU Operator was never ``seen``
    (:func:`~streams.core.stack.operatorstack.operator_seen`) emits nothing; once it was, its going
    out of sight is a change like any."""
    old = old or NodeStack()
    again = replays.recall(old.emitted, ts_ms, by)
    if again is not None:
        last = old.emitted[0]
        return None, (again.status,) if last is again else (again.status, last.status)
    if same(old.last, status) or (not seen and old.last is None):
        return None, ()
    emitted = replays.remember(Emission(ts_ms, by, status), old.emitted, REMEMBERED)
    return replace(old, emitted=emitted), (status,)


def alert_again(old: NodeStack | None, ts_ms: int, by: str) -> tuple[Alert, ...] | None:
    """The ``stack-broken`` alerts the record (``ts_ms``, ``by``) caused when it was first
    processed (``None``: it caused none, or it is new)."""
    e = replays.recall(old.alerted, ts_ms, by) if old is not None else None
    return e.alerts if e is not None else None


def pending(old: NodeStack, episode: StackEpisode | None) -> NodeStack:
    """The node's stack memory after a record moved its ``stack-broken`` episode and sent
    nothing (one opened within its grace window, or one that ended before it fired): there is
    nothing to send again, so no emission is remembered."""
    return replace(old, broken=episode)


def alerted(
    old: NodeStack, episode: StackEpisode | None, ts_ms: int, by: str, alerts: tuple[Alert, ...]
) -> NodeStack:
    """The node's stack memory after a record moved its ``stack-broken`` alert."""
    emission = AlertEmission(ts_ms, by, alerts)
    return replace(old, broken=episode, alerted=replays.remember(emission, old.alerted, REMEMBERED))
