"""Lifetimes: how long each piece of the worker's state lives, and what a tombstone removes.

Pure, and the one owner of these rules (the modules that keep state call them):

* **Holders' as-of history** (:data:`HISTORY_MS`): a base device remembers who held it for ten
  minutes of event time, so a late sample joins the holders of its own time; a base nobody holds
  leaves the node's index, and its table key is deleted, once that history has run out.
* **Pod lives**: a pod life that is gone is remembered as long as the holders' history (a late
  sample that joins an old holder still resolves its UID), then forgotten.
* **Nodes** (:class:`Lifetimes`): a node whose agent has sent nothing for ``stale_after_ms`` is
  *stale* (its devices are reported once as such; nothing more is charged to their holders);
  silent for ``node_ttl_ms``, or deleted in the API, it is *gone*: its devices' last events go
  out and every key it has in every table is deleted (:func:`node_keys`). Silence is measured
  against the partition's clock (``clock.tick``), never against a wall clock, and a node
  leaves only when it is past its TTL at two accepted ticks (no single record ages it out).
* **Time is checked** (:func:`jump`): a tick or record further ahead of its partition's
  accepted event time than ``max_clock_jump_ms`` is refused, until a record of another source
  as far ahead confirms the jump (the whole cluster back after a long stop).
* **Devices of a live node** leave when no source lists them any more (inventory, allocatable
  list, slices, holders, the last accepted scrape): a MIG reconfiguration's old instance UUIDs
  go, with their alert state.
* **Records that change every sample** (a node's last-seen time, its last scrape) are kept at
  :data:`QUANTUM_MS` resolution (at most a quarter of the heartbeat), so a steady node writes its
  state a few times a minute, not once per record.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from contract.records import Record
from streams.core import keys
from streams.core.keys import PER_NODE_TABLES as PER_NODE_TABLES  # where the spine reads it

MINUTE_MS = 60_000
#: how long the holders of a base device and a gone pod life are remembered (event time)
HISTORY_MS = 10 * MINUTE_MS
#: at most this many past holder sets per base device
HISTORY_MAX = 16
#: how long a gone pod life is remembered: as long as the holders' history, so a late sample
#: that joins an old holder still resolves that holder's UID
LIFE_KEPT_MS = HISTORY_MS
#: at most this many lives per pod name on a node
LIVES_MAX = 8
#: resolution of the per-node times that move with every record
QUANTUM_MS = 15_000

Phase = Literal["live", "stale", "gone"]


class Lifetimes(Record, frozen=True):
    """The spine's clock settings (``GPUATTR_SPINE_*``), in event-time milliseconds."""

    heartbeat_ms: int = MINUTE_MS
    stale_after_ms: int = 3 * MINUTE_MS
    node_ttl_ms: int = 10 * MINUTE_MS
    #: the furthest a tick or record may be ahead of its partition's accepted event time; under
    #: ``stale_after_ms`` less a quantum, so a clock skewed within it makes no talking node stale
    max_clock_jump_ms: int = 2 * MINUTE_MS

    @property
    def quantum_ms(self) -> int:
        """The resolution of the per-node times that move with every record."""
        return min(QUANTUM_MS, self.heartbeat_ms // 4)

    @property
    def departure_ms(self) -> int:
        """How long a live node remembers devices that left it (two heartbeats), with what
        their leaving emitted: a record of that time processed again emits it again."""
        return 2 * self.heartbeat_ms

    @property
    def fresh_ms(self) -> int:
        """A device whose last accepted sample is at most this old is spoken for by its sample
        events: the heartbeat leaves it out."""
        return self.heartbeat_ms


def epoch_kept(until_ms: int, now_ms: int) -> bool:
    """A past holder set (ended at ``until_ms``) is still remembered at ``now_ms``."""
    return now_ms - until_ms <= HISTORY_MS


def holders_expired(held_now: bool, since_ms: int, now_ms: int) -> bool:
    """A base device nobody holds since ``since_ms`` leaves the node's index (and the table) once
    its history has run out."""
    return not held_now and now_ms - since_ms > HISTORY_MS


def life_forgotten(gone_ms: int | None, now_ms: int) -> bool:
    """A pod life gone at ``gone_ms`` is forgotten at ``now_ms``."""
    return gone_ms is not None and now_ms - gone_ms > LIFE_KEPT_MS


def departure_kept(departed_ms: int, now_ms: int, keep_ms: int) -> bool:
    """Devices that left a live node at ``departed_ms`` are still remembered at ``now_ms``
    (``keep_ms``: :attr:`Lifetimes.departure_ms`)."""
    return now_ms - departed_ms <= keep_ms


def quantum_start(ts_ms: int, quantum_ms: int = QUANTUM_MS) -> int:
    """The start of the quantum ``ts_ms`` is in."""
    return ts_ms - ts_ms % quantum_ms


def quantized(previous_ms: int | None, ts_ms: int, quantum_ms: int = QUANTUM_MS) -> int:
    """``ts_ms`` at quantum resolution (the quantum's start), or ``previous_ms`` when that is in
    the same quantum. Aligned to the quantum, times that move together (a node's last record,
    its last scrape) change in the same record: one write."""
    aligned = quantum_start(ts_ms, quantum_ms)
    if previous_ms is not None and quantum_start(previous_ms, quantum_ms) == aligned:
        return previous_ms
    return aligned


def phase(last_ms: int, now_ms: int, life: Lifetimes) -> Phase:
    """What a node whose latest record is at ``last_ms`` is at ``now_ms`` (the partition clock)."""
    silent = now_ms - last_ms
    if silent >= life.node_ttl_ms:
        return "gone"
    if silent >= life.stale_after_ms:
        return "stale"
    return "live"


def judged_phase(last_ms: int, now_ms: int, before_ms: int | None, life: Lifetimes) -> Phase:
    """What a node whose latest record is at ``last_ms`` (a quantum's start) is at the tick
    ``now_ms``, the partition's accepted tick before it being ``before_ms``. ``last_ms`` lags
    the node's true last record by up to a quantum: it is judged that much later, so a node is
    never called silent early; and a node is gone only when it is past its TTL at both ticks
    (no single record ages it out): past it at one only, it is stale."""
    judged = last_ms + life.quantum_ms
    now = phase(judged, now_ms, life)
    if now == "gone" and (before_ms is None or phase(judged, before_ms, life) != "gone"):
        return "stale"
    return now


def jump(clock_ms: int | None, ts_ms: int, life: Lifetimes) -> int | None:
    """How far ``ts_ms`` is ahead of a partition's accepted clock ``clock_ms`` (a quantum's
    start: it lags its latest record by up to a quantum), when that is past the bound; ``None``
    when it is within it, or the partition has no clock yet."""
    if clock_ms is None:
        return None
    ahead = ts_ms - clock_ms
    return ahead if ahead > life.max_clock_jump_ms + life.quantum_ms else None


#: a partition's first refused jump ahead not yet confirmed: its time, and whose it was
Pending = tuple[int, str] | None

#: whose time a tick, a ClusterPolicy and a node's deletion carry (one clock: one source)
CLUSTER_ROLE = "the cluster role"


def admit(
    clock_ms: int | None, ts_ms: int, by: str, pending: Pending, life: Lifetimes
) -> tuple[int | None, Pending]:
    """A record of source ``by`` (a node, the cluster role) at ``ts_ms`` against its
    partition's accepted clock: how far past the bound ahead it is (``None``: accepted), and
    the partition's pending jump after it. A jump is accepted once a record of another source
    confirms it (within the bound of it): the whole cluster back after a long stop moves the
    clock, one skewed or forged record never does. A node's own records confirm its jump once
    they have kept it up for the bound (a node alone on its partition, back after a long silence
    while no tick comes): a node's time ages no other node, the cluster role's ticks do, so the
    cluster role's jump is confirmed by another source only."""
    if jump(clock_ms, ts_ms, life) is not None:
        confirmed = pending is not None and (
            (pending[1] != by and abs(ts_ms - pending[0]) <= life.max_clock_jump_ms)
            or (pending[1] == by != CLUSTER_ROLE and ts_ms - pending[0] >= life.max_clock_jump_ms)
        )
        if not confirmed:
            keep = pending is not None and pending[1] == by  # its source repeating it
            assert clock_ms is not None  # a jump is measured from a clock
            return ts_ms - clock_ms, pending if keep else (ts_ms, by)
    if pending is not None and pending[0] <= ts_ms:
        pending = None
    return None, pending


def jumped(
    by: str, ts_ms: int, ahead: int, partition: int, clock: int | None, life: Lifetimes
) -> str:
    """Why a record too far ahead of its partition's clock is refused (both stages')."""
    return (
        f"{by} at {ts_ms} is {ahead / 1000:.0f}s ahead of partition {partition}'s event time "
        f"{clock} (more than {life.max_clock_jump_ms / 1000:.0f}s)"
    )


def heartbeat_due(last_heartbeat_ms: int, now_ms: int, life: Lifetimes) -> bool:
    return now_ms - last_heartbeat_ms >= life.heartbeat_ms


class NodeKeys(Record, frozen=True):
    """Every key a node has, table by table: what its tombstones remove."""

    per_node: tuple[str, ...]  # tables keyed by the node itself
    slot_holders: tuple[str, ...]
    pods: tuple[str, ...]
    alert_state: tuple[str, ...]
    dra_claims: tuple[str, ...]


def node_keys(
    node: str,
    bases: Iterable[str],
    pod_names: Iterable[str],
    device_ids: Iterable[str],
    claims: Iterable[str],
) -> NodeKeys:
    """The keys a gone node leaves behind: its base devices' holders, its pod names, its
    devices' alert state and its DRA claims (``namespace/name``), plus the per-node tables'
    (:data:`streams.core.keys.PER_NODE_TABLES`); the keys as :mod:`streams.core.keys` makes them."""
    return NodeKeys(
        per_node=(node,),
        slot_holders=tuple(sorted(keys.holder_key(node, b) for b in set(bases))),
        pods=tuple(sorted(keys.short_key(node, n) for n in set(pod_names))),
        alert_state=tuple(sorted(keys.alert_key(node, d) for d in set(device_ids))),
        dra_claims=tuple(sorted(keys.short_key(node, c) for c in set(claims))),
    )
