"""Slot holders: who holds which device, rebuilt from PodResources snapshots and diffs. Pure.

State per ``(node, base device ID)`` is a :class:`SlotHolders` with a short history, so a DCGM
sample joins the holders *at its own timestamp* (an as-of join), not whatever is current when the
worker happens to read it. A per-node :class:`NodeDevices` index maps each device key (what the
hardware reports on) to the base device IDs that occupy it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from contract.inputs import (
    AllocatableDevice,
    DeviceAssignment,
    PodResourcesDiff,
    PodResourcesSnapshot,
)
from streams.core.identity import EMPTY_INVENTORY, Inventory, parse_device_id, resolve
from streams.core.sharing import Advertised, advertised_by_key

HISTORY_MS = 10 * 60 * 1000
HISTORY_MAX = 16


@dataclass(frozen=True, slots=True)
class Epoch:
    """Holders that were in place over ``[from_ms, until_ms)``."""

    from_ms: int
    until_ms: int
    assignments: tuple[DeviceAssignment, ...]


@dataclass(frozen=True, slots=True)
class SlotHolders:
    """Current holders of one base device (all its replicas), since ``since_ms``, and history."""

    node: str
    base: str
    assignments: tuple[DeviceAssignment, ...]
    since_ms: int
    history: tuple[Epoch, ...] = ()

    def at(self, ts_ms: int) -> tuple[DeviceAssignment, ...]:
        """The holders as of ``ts_ms``: current ones unless the sample predates the last change."""
        if ts_ms >= self.since_ms:
            return self.assignments
        for epoch in self.history:
            if epoch.from_ms <= ts_ms < epoch.until_ms:
                return epoch.assignments
        # Older than anything remembered: the oldest known holders are the best evidence.
        return self.history[-1].assignments if self.history else self.assignments


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """Index of one node's devices: base IDs seen, device key → base IDs, allocatable devices.

    ``advertised`` is the allocatable list grouped by device key (whole, or how many replicas):
    the per-device evidence for sharing, computed when PodResources or the inventory change.
    """

    node: str
    bases: tuple[str, ...]
    keys: Mapping[str, tuple[str, ...]]
    unresolved: tuple[str, ...]
    allocatable: tuple[AllocatableDevice, ...]
    updated_ms: int
    advertised: Mapping[str, Advertised] = field(default_factory=dict)


def empty_index(node: str) -> NodeDevices:
    return NodeDevices(node, (), {}, (), (), 0)


def index_keys(
    bases: Iterable[str], inventory: Inventory
) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """Group base device IDs by the device key they occupy; list the ones we cannot place."""
    keys: dict[str, list[str]] = defaultdict(list)
    unresolved: list[str] = []
    for base in sorted(set(bases)):
        key = resolve(parse_device_id(base), inventory)
        if key is None:
            unresolved.append(base)
        else:
            keys[key].append(base)
    return {k: tuple(v) for k, v in keys.items()}, tuple(unresolved)


def _group(assignments: Iterable[DeviceAssignment]) -> dict[str, list[DeviceAssignment]]:
    by_base: dict[str, list[DeviceAssignment]] = defaultdict(list)
    for a in assignments:
        by_base[parse_device_id(a.device_id).base].append(a)
    return by_base


def _advance(
    node: str, base: str, old: SlotHolders | None, new: tuple[DeviceAssignment, ...], ts_ms: int
) -> SlotHolders | None:
    """The next holders value for a base device, or ``None`` when nothing changed."""
    if old is None:
        return SlotHolders(node, base, new, ts_ms) if new else None
    if old.assignments == new:
        return None
    epoch = Epoch(old.since_ms, ts_ms, old.assignments)
    history = tuple(e for e in (epoch, *old.history) if ts_ms - e.until_ms <= HISTORY_MS)[
        :HISTORY_MAX
    ]
    return SlotHolders(node, base, new, ts_ms, history)


def apply_podresources(
    index: NodeDevices | None,
    current: Mapping[str, SlotHolders],
    record: PodResourcesSnapshot | PodResourcesDiff,
    inventory: Inventory = EMPTY_INVENTORY,
) -> tuple[NodeDevices, dict[str, SlotHolders]]:
    """Apply a snapshot or diff; return the node's new index and the holders that changed.

    ``current`` holds the present :class:`SlotHolders` for the base IDs in ``index.bases``.
    """
    index = index or empty_index(record.node)
    if isinstance(record, PodResourcesSnapshot):
        grouped = _group(record.assignments)
        touched = set(index.bases) | set(grouped)
        allocatable = record.allocatable or index.allocatable
    else:
        removed, added = _group(record.removed), _group(record.added)
        grouped = {}
        for base in set(removed) | set(added):
            old = set(current[base].assignments) if base in current else set()
            grouped[base] = list((old - set(removed.get(base, ()))) | set(added.get(base, ())))
        touched = set(grouped)
        allocatable = index.allocatable
    changed: dict[str, SlotHolders] = {}
    for base in touched:
        new = tuple(sorted(set(grouped.get(base, ()))))
        nxt = _advance(record.node, base, current.get(base), new, record.ts_ms)
        if nxt is not None:
            changed[base] = nxt
    live = {**current, **changed}
    bases = tuple(
        sorted(
            b
            for b, h in live.items()
            if h.assignments or (h.history and record.ts_ms - h.since_ms <= HISTORY_MS)
        )
    )
    keys, unresolved = index_keys(bases, inventory)
    advertised = (
        index.advertised
        if allocatable == index.allocatable and index.advertised
        else advertised_by_key(allocatable, inventory)
    )
    new_index = NodeDevices(
        record.node, bases, keys, unresolved, allocatable, record.ts_ms, advertised
    )
    return new_index, changed


def reindex(index: NodeDevices, inventory: Inventory) -> NodeDevices:
    """Recompute device keys after the node's inventory changed."""
    keys, unresolved = index_keys(index.bases, inventory)
    advertised = advertised_by_key(index.allocatable, inventory)
    return replace(index, keys=keys, unresolved=unresolved, advertised=advertised)
