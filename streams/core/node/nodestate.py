"""One node's life in the worker: when it was last heard from, its telemetry's standing, the
devices it has, and the keys it owns elsewhere. Pure; a table value keyed by node.

Times that move with every record (``last_ms``, ``scrape_ms``) are kept at
:data:`streams.core.lifetimes.QUANTUM_MS` resolution, so a steady node writes this value a few
times a minute rather than once per record (:func:`streams.core.lifetimes.quantized`).

**No output lost at any crash point.** A worker's state writes (changelogs) and its outputs are
flushed through different partitions, and an input is committed only after both: after a crash
the state may already hold the writes of inputs whose outputs never went out, and those inputs
are processed again. So every transition that emits something remembers it: the beats by their
record (``beats``), the devices that left with what their leaving emitted (``departures``), a
node's going stale by its time (``stale_ms``), a node gone with all it emitted (in its
partition's :class:`PartitionNodes`, since its own keys are deleted). Processing a remembered
input again emits the same outputs again; the memory keeps the last few transitions — more
than can happen between two commits of a partition (seconds apart).
"""

from __future__ import annotations

from contract.inputs import NodeSupply, SourceStatus
from contract.outputs import Alert, RefusalCause
from contract.records import Record, replace
from streams.core import replays
from streams.core.lifetimes import departure_kept, quantized, quantum_start
from streams.core.replays import GONE_REMEMBERED, SCRAPES_REMEMBERED, TICKS_REMEMBERED

Emitted = tuple[Alert, ...]


class Refusal(Record, frozen=True):
    """The node's exporter answers are refused as not provably its own, since ``since_ms``."""

    since_ms: int
    cause: RefusalCause
    reason: str


class Beat(Record, frozen=True):
    """A heartbeat: when, and the fingerprint of the record that made it."""

    ts_ms: int
    by: str


class Departure(Record, frozen=True):
    """Devices that left a live node at ``ts_ms`` (no source lists them), and the alerts their
    leaving resolved (their last events are made again from the rest)."""

    ts_ms: int
    devices: tuple[tuple[str, str], ...]
    alerts: Emitted = ()


class NodeState(Record, frozen=True):
    first_ms: int  # the first record of this life of the node
    last_ms: int  # its latest record (quantized)
    partition: int = 0  # the input partition the node's records arrive on
    beats: tuple[Beat, ...] = ()  # newest first
    stale: bool = False  # reported stale: nothing more is charged until it speaks again
    stale_ms: int | None = None  # when it last went stale
    scrape_ms: int | None = None  # the latest accepted scrape (quantized)
    scraped: tuple[str, ...] = ()  # device keys that scrape had rows for
    refused: Refusal | None = None  # the exporter's answers refused since the latest accepted
    sources: tuple[SourceStatus, ...] = ()  # the agent's word on its sources
    #: the devices it has, as (device key, device id in events), as of the last change
    devices: tuple[tuple[str, str], ...] = ()
    departures: tuple[Departure, ...] = ()  # newest first
    claims: tuple[str, ...] = ()  # namespace/name of the node's claims kept in dra-claims
    #: additive: the event time of this life's first accepted scrape, exact (None:
    #: none yet, or a value written before it was kept). Before it, no sample had come, whatever
    #: came since: a record processed again after later scrapes says what it said the first time
    first_scrape_ms: int | None = None
    #: additive: the event time of the first accepted scrape of each of the node's
    #: last :data:`SCRAPES_REMEMBERED` quanta that had one, newest first (empty: none yet, or a
    #: value written before it was kept). ``scrape_ms`` is the latest scrape as the records
    #: came; a record processed again after later scrapes reads the one it read the first time
    #: (:meth:`scrape_at`)
    scrape_starts: tuple[int, ...] = ()

    def source(self, name: str) -> SourceStatus | None:
        return next((s for s in self.sources if s.source == name), None)

    def scraped_by(self, ts_ms: int) -> bool:
        """Whether an accepted scrape had come by ``ts_ms``: never before this life's first
        (a record processed again after later scrapes is judged as it was the first time)."""
        if self.scrape_ms is None:
            return False
        return self.first_scrape_ms is None or ts_ms >= self.first_scrape_ms

    def scrape_at(self, ts_ms: int, quantum_ms: int) -> int | None:
        """The latest accepted scrape (at quantum resolution, as ``scrape_ms``) a record of
        event time ``ts_ms`` reads: ``None`` before this life's first. A record processed again
        after later scrapes (a rebalance, a crash: its partition's offsets were committed before
        it) reads the scrape it read the first time, from :attr:`scrape_starts`, never one from
        after its own time. A record from further back than that memory, or a value written
        before it was kept, reads the latest."""
        if not self.scraped_by(ts_ms):
            return None
        for start in self.scrape_starts:
            if start <= ts_ms:
                return quantum_start(start, quantum_ms)
        return self.scrape_ms

    @property
    def heartbeat_ms(self) -> int:
        """The last beat; the first record before any (the first beat is one interval later)."""
        return self.beats[0].ts_ms if self.beats else self.first_ms


def first_record(ts_ms: int, partition: int) -> NodeState:
    return NodeState(ts_ms, ts_ms, partition)


def heard(state: NodeState, ts_ms: int, quantum_ms: int) -> NodeState:
    """A record of the node arrived: it is live (no longer stale) as of ``ts_ms``. A record
    older than the latest (late: its collector retried it after an outage) says nothing about
    the node's time: last heard never moves back, and a stale node stays stale."""
    if ts_ms < state.last_ms:  # last_ms is a quantum's start: a record of its quantum is not older
        return state
    last = quantized(state.last_ms, ts_ms, quantum_ms)
    if last == state.last_ms and not state.stale:
        return state
    return replace(state, last_ms=last, stale=False)


def beaten(state: NodeState, ts_ms: int, by: str) -> NodeState:
    return replace(state, beats=replays.latest(Beat(ts_ms, by), state.beats))


def departed(
    state: NodeState, departure: Departure, now: tuple[tuple[str, str], ...], keep_ms: int
) -> NodeState:
    """Devices left; departures older than ``keep_ms`` before this one are forgotten."""
    kept = tuple(d for d in state.departures if departure_kept(d.ts_ms, departure.ts_ms, keep_ms))
    departures = replays.latest(departure, kept)
    return replace(state, devices=now, departures=departures)


def accepted(state: NodeState, ts_ms: int, keys: tuple[str, ...], quantum_ms: int) -> NodeState:
    """An exporter answer was accepted with rows for ``keys``."""
    scrape = quantized(state.scrape_ms, ts_ms, quantum_ms)
    first = state.first_scrape_ms  # None after scrapes: a value from before it was kept
    if state.scrape_ms is None or (first is not None and ts_ms < first):
        first = ts_ms  # this life's first accepted scrape, or an older one come late
    starts = started(state.scrape_starts, ts_ms, quantum_ms)
    if (
        scrape == state.scrape_ms
        and keys == state.scraped
        and state.refused is None
        and first == state.first_scrape_ms
        and starts == state.scrape_starts
    ):
        return state
    return replace(
        state,
        scrape_ms=scrape,
        scraped=keys,
        refused=None,
        first_scrape_ms=first,
        scrape_starts=starts,
    )


def started(starts: tuple[int, ...], ts_ms: int, quantum_ms: int) -> tuple[int, ...]:
    """The first scrapes of the node's last quanta (newest first) with one at ``ts_ms``: a
    quantum's first, or an earlier one of a quantum already kept come late; one from before
    every quantum a full memory keeps is not kept. Changes only when a quantum begins, as
    ``scrape_ms`` does: no write of its own."""
    aligned = quantum_start(ts_ms, quantum_ms)
    for i, start in enumerate(starts):
        if quantum_start(start, quantum_ms) == aligned:
            if ts_ms >= start:
                return starts
            return (*starts[:i], ts_ms, *starts[i + 1 :])
    return replays.newest(starts, ts_ms, SCRAPES_REMEMBERED)


def refused(state: NodeState, ts_ms: int, cause: RefusalCause, reason: str) -> NodeState:
    """An exporter answer was refused whole."""
    if state.refused is not None and (state.refused.cause, state.refused.reason) == (
        cause,
        reason,
    ):
        return state
    return replace(state, refused=Refusal(ts_ms, cause, reason))


def with_sources(state: NodeState, sources: tuple[SourceStatus, ...]) -> NodeState:
    return state if sources == state.sources else replace(state, sources=sources)


class GoneNode(Record, frozen=True):
    """A node that left at ``ts_ms`` (deleted, or silent past its TTL): its keys are gone, so
    its partition remembers its devices and the alerts its leaving resolved, for a record
    processed again."""

    node: str
    ts_ms: int
    why: str
    devices: tuple[tuple[str, str], ...] = ()
    alerts: Emitted = ()
    #: additive: the gone supply records it emitted (:mod:`streams.core.demand.supply`)
    supply: tuple[NodeSupply, ...] = ()


class PartitionNodes(Record, frozen=True):
    """The nodes whose records arrive on one input partition (what its clock ticks age), and
    the last nodes that left it."""

    nodes: tuple[str, ...] = ()
    gone: tuple[GoneNode, ...] = ()  # newest first
    #: additive: the partition's accepted event time (quantized): the latest of the ticks and
    #: records it accepted (None: none yet, or a value written before it was kept). A record
    #: further ahead of it than the jump bound is refused (:func:`streams.core.lifetimes.jump`)
    clock_ms: int | None = None
    #: additive: the last accepted ticks' times, newest first: a node leaves only when it is
    #: past its TTL at two of them (no single record ages a node out)
    ticks: tuple[int, ...] = ()

    def with_node(self, node: str) -> PartitionNodes:
        if node in self.nodes:
            return self
        return replace(self, nodes=tuple(sorted({*self.nodes, node})))

    def left(self, gone: GoneNode) -> PartitionNodes:
        return replace(
            self,
            nodes=tuple(n for n in self.nodes if n != gone.node),
            gone=replays.latest(gone, self.gone, GONE_REMEMBERED),
        )

    def clocked(self, ts_ms: int, quantum_ms: int) -> PartitionNodes:
        """A record at ``ts_ms`` was accepted: the clock moves to it, never back."""
        if self.clock_ms is not None and ts_ms < self.clock_ms:
            return self
        clock = quantized(self.clock_ms, ts_ms, quantum_ms)
        return self if clock == self.clock_ms else replace(self, clock_ms=clock)

    def ticked(self, ts_ms: int) -> PartitionNodes:
        if ts_ms in self.ticks:
            return self
        return replace(self, ticks=replays.newest(self.ticks, ts_ms, TICKS_REMEMBERED))

    def tick_before(self, ts_ms: int) -> int | None:
        """The latest accepted tick before ``ts_ms`` (a tick processed again finds the same)."""
        return next((t for t in self.ticks if t < ts_ms), None)

    def gone_at(self, node: str, ts_ms: int) -> GoneNode | None:
        return next((g for g in self.gone if (g.node, g.ts_ms) == (node, ts_ms)), None)

    def left_after(self, node: str, ts_ms: int) -> GoneNode | None:
        """The node's leaving at or after ``ts_ms``, remembered: a record that old is late."""
        return next((g for g in self.gone if g.node == node and g.ts_ms >= ts_ms), None)
