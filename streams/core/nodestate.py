"""One node's life in the worker: when it was last heard from, its telemetry's standing, the
devices it has, and the keys it owns elsewhere. Pure; a table value keyed by node.

Times that move with every record (``last_ms``, ``scrape_ms``) are kept at
:data:`streams.core.lifetimes.QUANTUM_MS` resolution, so a steady node writes this value a few
times a minute rather than once per record (:func:`streams.core.lifetimes.quantized`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from contract.inputs import SourceStatus
from contract.outputs import RefusalCause
from streams.core.lifetimes import quantized


@dataclass(frozen=True, slots=True)
class Refusal:
    """The node's exporter answers are refused as not provably its own, since ``since_ms``."""

    since_ms: int
    cause: RefusalCause
    reason: str


@dataclass(frozen=True, slots=True)
class Gone:
    """The node left at ``ts_ms`` (deleted, or silent past its TTL): its devices' last events
    went out then; its keys are deleted at the next tick or record of its partition."""

    ts_ms: int
    why: str


@dataclass(frozen=True, slots=True)
class NodeState:
    """Every transition that emits outputs records its event time here (``heartbeat_ms``,
    ``stale_ms``, ``gone``, ``departed_ms``): a record processed again after a crash, at that
    same time, emits those outputs again instead of finding nothing left to do."""

    first_ms: int  # the first record of this life of the node
    last_ms: int  # its latest record (quantized)
    heartbeat_ms: int  # the last heartbeat (or the first record: the first is a beat later)
    partition: int = 0  # the input partition the node's records arrive on
    beat_by: str = ""  # the fingerprint of the record that made the last beat
    stale_ms: int | None = None  # its devices were reported stale then; None while it speaks
    gone: Gone | None = None
    scrape_ms: int | None = None  # the latest accepted scrape (quantized)
    scraped: tuple[str, ...] = ()  # device keys that scrape had rows for
    refused: Refusal | None = None  # the exporter's answers refused since the latest accepted
    sources: tuple[SourceStatus, ...] = ()  # the agent's word on its sources
    #: the devices last reported, as (device key, device id in events): a device that leaves
    #: gets its last event and its alert state is deleted
    devices: tuple[tuple[str, str], ...] = ()
    #: devices that left at ``departed_ms`` (their last events went out then); their alert
    #: state is deleted at the next heartbeat
    departed: tuple[tuple[str, str], ...] = ()
    departed_ms: int | None = None
    claims: tuple[str, ...] = ()  # namespace/name of the node's claims kept in dra-claims

    def source(self, name: str) -> SourceStatus | None:
        return next((s for s in self.sources if s.source == name), None)


def first_record(ts_ms: int, partition: int) -> NodeState:
    return NodeState(ts_ms, ts_ms, ts_ms, partition)


def heard(state: NodeState, ts_ms: int, quantum_ms: int) -> NodeState:
    """A record of the node arrived: it is live (no longer stale) as of ``ts_ms``."""
    last = quantized(state.last_ms, ts_ms, quantum_ms)
    if last == state.last_ms and state.stale_ms is None:
        return state
    return replace(state, last_ms=last, stale_ms=None)


def accepted(state: NodeState, ts_ms: int, keys: tuple[str, ...], quantum_ms: int) -> NodeState:
    """An exporter answer was accepted with rows for ``keys``."""
    scrape = quantized(state.scrape_ms, ts_ms, quantum_ms)
    if scrape == state.scrape_ms and keys == state.scraped and state.refused is None:
        return state
    return replace(state, scrape_ms=scrape, scraped=keys, refused=None)


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


@dataclass(frozen=True, slots=True)
class PartitionNodes:
    """The nodes whose records arrive on one input partition: what its clock ticks age."""

    nodes: tuple[str, ...] = ()

    def with_node(self, node: str) -> PartitionNodes:
        return self if node in self.nodes else PartitionNodes(tuple(sorted({*self.nodes, node})))

    def without(self, node: str) -> PartitionNodes:
        return PartitionNodes(tuple(n for n in self.nodes if n != node))
