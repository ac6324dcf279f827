"""One resource's supply summed over its nodes, per product and MIG profile, kept in step with
the nodes' supply records by changing only what a changed record changes. Pure (in memory).

The demand stage reads a resource's supply on every record that touches it. Read node by node
(even through each node's memoized :func:`streams.core.demand.demand.summarize`), a pool's record
cost
a pass over every node of the resource: 66 % of the stage on the bench fleet's 250 nodes
(bench.run). :class:`SupplyIndex` keeps the sums instead: per (product, MIG profile),
the allocated and unmeasured counts and every idle device in one sorted list, and per node the
record it last read and that record's summary. :meth:`SupplyIndex.sync` is handed the
resource's nodes and the table's ``get``: every node's record is read and compared by identity
with the one the index holds (a C-level loop: ``map`` and ``operator.is_not``), and only a
node whose record is another object has its old summary taken out and the new one put in; a
node no longer listed is taken out. So a recovered table (new objects, equal or not) is read
afresh, and nothing is ever answered from a record the table no longer holds. A pool's record
then reads a few groups, not every node (:func:`streams.core.demand.demand.pool_record`: the same
record either way, a property test holds it).

Bounded by what is live: the nodes of the resource's last sync, and their idle devices.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import compress
from operator import is_not

from contract.inputs import NodeSupply
from streams.core.demand.demand import IdleEntry, Summarize, SupplyGroup, summarize


@dataclass(slots=True)
class GroupTotals:
    """A group summed over the nodes (:class:`streams.core.demand.demand.Group`)."""

    product: str
    mig_profile: str
    allocated: int = 0
    unmeasured: int = 0
    idle: list[IdleEntry] = field(default_factory=list)  # sorted: longest idle first

    @property
    def latest(self) -> int | None:
        return self.idle[-1][0] if self.idle else None


class SupplyIndex:
    """One resource's supply (module doc). ``summarize``: how a node's record is read."""

    def __init__(self, resource: str, summarize: Summarize = summarize) -> None:
        self.resource = resource
        self._summarize = summarize
        self._nodes: dict[str, tuple[NodeSupply, tuple[SupplyGroup, ...]]] = {}
        # the last sync's nodes (as listed), their table keys and the records read, in step
        self._order: tuple[str, ...] = ()
        self._keys: list[str] = []
        self._records: list[NodeSupply | None] = []
        self._groups: dict[tuple[str, str], GroupTotals] = {}
        self._supplying = 0  # nodes whose record has devices (and is not gone)

    def __len__(self) -> int:
        """The nodes it holds a record of."""
        return len(self._nodes)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted(self._nodes))

    @property
    def supplying(self) -> bool:
        """Some node's record has devices of the resource (its plain pool is live)."""
        return self._supplying > 0

    def groups(self) -> list[GroupTotals]:
        """The groups with devices, by product and MIG profile."""
        return [self._groups[k] for k in sorted(self._groups) if self._groups[k].allocated]

    def sync(
        self,
        nodes: tuple[str, ...],
        key_of: Callable[[str], str],
        get: Callable[[str], NodeSupply | None],
    ) -> None:
        """Make the sums those of the records ``get`` returns now for ``nodes`` (each node once;
        ``key_of``: a node's key in the table; a node without a record counts for nothing)."""
        if nodes != self._order:  # a node came or went: every node read
            keys = [key_of(n) for n in nodes]
            self._order, self._keys = nodes, keys
            self._records = list(map(get, keys))
            self._resync((n, r) for n, r in zip(nodes, self._records, strict=True) if r is not None)
            return
        now = list(map(get, self._keys))
        for i in compress(range(len(now)), map(is_not, now, self._records)):
            record, node = now[i], nodes[i]
            held = self._nodes.pop(node, None)
            if held is not None:
                self._take(held)
            if record is not None:
                self._put(node, record)
        self._records = now

    def _resync(self, records: Iterable[tuple[str, NodeSupply]]) -> None:
        seen: set[str] = set()
        for node, record in records:
            seen.add(node)
            held = self._nodes.get(node)
            if held is not None and held[0] is record:
                continue
            if held is not None:
                self._take(held)
            self._put(node, record)
        if len(seen) != len(self._nodes):
            for node in [n for n in self._nodes if n not in seen]:
                self._take(self._nodes.pop(node))

    def _summary(self, record: NodeSupply) -> tuple[SupplyGroup, ...]:
        # a record of another resource under this key counts for no pool (as a walk skips it)
        return self._summarize(record) if record.resource == self.resource else ()

    def _put(self, node: str, record: NodeSupply) -> None:
        groups = self._summary(record)
        self._nodes[node] = (record, groups)
        self._supplying += bool(record.devices) and not record.gone
        for g in groups:
            key = (g.product, g.mig_profile)
            totals = self._groups.get(key)
            if totals is None:
                totals = self._groups[key] = GroupTotals(g.product, g.mig_profile)
            totals.allocated += g.allocated
            totals.unmeasured += g.unmeasured
            for entry in g.idle:
                bisect.insort(totals.idle, entry)

    def _take(self, held: tuple[NodeSupply, tuple[SupplyGroup, ...]]) -> None:
        record, groups = held
        self._supplying -= bool(record.devices) and not record.gone
        for g in groups:
            key = (g.product, g.mig_profile)
            totals = self._groups[key]
            totals.allocated -= g.allocated
            totals.unmeasured -= g.unmeasured
            for entry in g.idle:
                i = bisect.bisect_left(totals.idle, entry)
                assert totals.idle[i] is entry  # put in with this record: there, by identity
                del totals.idle[i]
            if not totals.allocated:
                del self._groups[key]
