"""Slot holders: who holds which device, rebuilt from PodResources snapshots and diffs. Pure.

State per ``(node, base device ID)`` is a :class:`SlotHolders` with a short history, so a DCGM
sample joins the holders *at its own timestamp* (an as-of join), not whatever is current when the
worker happens to read it. A per-node :class:`NodeDevices` index maps each device key (what the
hardware reports on) to the base device IDs that occupy it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from contract.inputs import (
    AllocatableDevice,
    DeviceAssignment,
    DraDevice,
    PodResourcesDiff,
    PodResourcesSnapshot,
)
from contract.records import Record, replace
from streams.core.devices.allocation import dra_base, dra_name, via_dra
from streams.core.devices.dra import DeviceRef, Placed, UnplacedMig, place
from streams.core.devices.identity import EMPTY_INVENTORY, Inventory, parse_device_id, resolve
from streams.core.devices.sharing import Advertised, advertised_by_key
from streams.core.lifetimes import HISTORY_MAX, epoch_kept, holders_expired

DraDevices = Mapping[DeviceRef, DraDevice]
NO_DRA: DraDevices = {}


class Epoch(Record, frozen=True):
    """Holders that were in place over ``[from_ms, until_ms)``."""

    from_ms: int
    until_ms: int
    assignments: tuple[DeviceAssignment, ...]


class SlotHolders(Record, frozen=True):
    """Current holders of one base device (all its replicas), since ``since_ms``, and history."""

    node: str
    base: str
    assignments: tuple[DeviceAssignment, ...]
    since_ms: int
    history: tuple[Epoch, ...] = ()
    #: from when the node's PodResources view covers this base: before the first holders (and
    #: after this), nobody held it; before this, nobody knows (additive: ``None`` in old state)
    known_from_ms: int | None = None

    def at(self, ts_ms: int) -> tuple[DeviceAssignment, ...] | None:
        """The holders as of ``ts_ms``: current ones unless the sample predates the last change;
        ``None`` when nothing remembered covers that time — never the later holders' credit."""
        if ts_ms >= self.since_ms:
            return self.assignments
        for epoch in self.history:
            if epoch.from_ms <= ts_ms < epoch.until_ms:
                return epoch.assignments
        if self.known_from_ms is not None and ts_ms >= self.known_from_ms:
            return ()  # the view covered that time and nobody held the device then
        return None

    def changed_at(self, ts_ms: int) -> bool:
        """Whether the holders are remembered to have changed at ``ts_ms``."""
        return self.since_ms == ts_ms or any(e.from_ms == ts_ms for e in self.history)

    def holds(self, ts_ms: int, new: tuple[DeviceAssignment, ...] | None) -> bool:
        """Whether a PodResources record of time ``ts_ms`` is one these holders already hold,
        processed again after later changes (a rebalance, a crash: its offset was not committed):
        older than their last change, and a change at its time is remembered, or (a snapshot,
        making them ``new``) they remember what it says of its time. Applied again, it would set
        the holders back to its time, and a diff, applied to the later holders, would mix two
        generations of them. A record older than their memory, or one saying something they do
        not remember (a node whose clock stepped back), is applied as it comes."""
        if ts_ms >= self.since_ms:
            return False
        return self.changed_at(ts_ms) or (new is not None and self.at(ts_ms) == new)


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
    #: DRA MIG devices held but not placeable on a GPU instance (dynamic MIG: no UUID yet),
    #: by parent GPU UUID: (base, "MIG instance of <parent>, profile <p>, UUID unknown")
    unplaced_mig: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    #: the first snapshot's time: from then on the node's holders are known (additive)
    since_ms: int | None = None
    #: held DRA devices no live slice lists, as the node's slices last described them
    #: (additive): a kubelet restart deletes the node's ResourceSlices and the driver publishes
    #: them again tens of seconds later, while the claims stay allocated
    remembered: tuple[tuple[str, DraDevice], ...] = ()

    def remembered_devices(self) -> dict[DeviceRef, DraDevice]:
        return {ref: d for base, d in self.remembered if (ref := dra_ref(base)) is not None}


def unplaced_dra(index: NodeDevices) -> tuple[str, ...]:
    """What the node's unheld GPUs must say when held DRA devices are in no slice (MIG devices
    known by their parent excepted): any of those GPUs may be one of them. Empty otherwise."""
    mig = {base for held in index.unplaced_mig.values() for base, _ in held}
    lost = [b for b in index.unresolved if via_dra(b) and b not in mig]
    if not lost:
        return ()
    more = ", …" if len(lost) > 3 else ""
    return (
        f"{len(lost)} DRA device(s) held on this node are in no ResourceSlice "
        f"({', '.join(lost[:3])}{more}): this GPU may be one",
    )


def empty_index(node: str) -> NodeDevices:
    return NodeDevices(node, (), {}, (), (), 0)


def base_of(a: DeviceAssignment) -> str:
    """The base device a row occupies: the plugin's device ID without its replica suffix, or,
    for DRA, ``dra:<driver>/<pool>/<device>`` (a claimed device is named by all three)."""
    if via_dra(a.resource):
        return dra_base(a)
    return parse_device_id(a.device_id).base


def dra_ref(base: str) -> DeviceRef | None:
    """``dra:<driver>/<pool>/<device>`` → (driver, pool, device); driver names hold no ``/``,
    device names neither, pools may."""
    named = dra_name(base)
    if named is None:
        return None
    driver, _, rest = named.partition("/")
    pool, _, device = rest.rpartition("/")
    return (driver, pool, device) if driver and pool and device else None


class IndexKeys(Record, frozen=True):
    """Where a node's held base devices sit: device key → bases, the bases we cannot place, the
    DRA MIG devices known only by their parent GPU, and the DRA devices placed from memory."""

    keys: dict[str, tuple[str, ...]]
    unresolved: tuple[str, ...]
    unplaced_mig: dict[str, tuple[tuple[str, str], ...]]
    remembered: tuple[tuple[str, DraDevice], ...]


def index_keys(
    bases: Iterable[str],
    inventory: Inventory,
    dra: DraDevices = NO_DRA,
    kept: DraDevices = NO_DRA,
) -> IndexKeys:
    """Group base device IDs by the device key they occupy; list the ones we cannot place, and
    the DRA MIG devices known only by their parent GPU.

    ``dra`` is what the node's live slices publish. A held DRA device no live slice lists is
    read as ``kept`` (the slices' last word on it) describes it: a claim's allocation does not
    move while its driver publishes again. A live slice that lists the device decides anew."""
    keys: dict[str, list[str]] = defaultdict(list)
    unresolved: list[str] = []
    unplaced: dict[str, list[tuple[str, str]]] = defaultdict(list)
    remembered: list[tuple[str, DraDevice]] = []
    for base in sorted(set(bases)):
        ref = dra_ref(base)
        if ref is not None:
            if ref not in dra and ref in kept:
                remembered.append((base, kept[ref]))
                placement = place(ref, kept, inventory)
            else:
                placement = place(ref, dra, inventory)
            if isinstance(placement, Placed):
                keys[placement.key].append(base)
                continue
            if isinstance(placement, UnplacedMig):
                unplaced[placement.parent_uuid].append((base, placement.describe()))
            unresolved.append(base)
            continue
        key = resolve(parse_device_id(base), inventory)
        if key is None:
            unresolved.append(base)
        else:
            keys[key].append(base)
    return IndexKeys(
        {k: tuple(v) for k, v in keys.items()},
        tuple(unresolved),
        {k: tuple(v) for k, v in unplaced.items()},
        tuple(remembered),
    )


def _group(assignments: Iterable[DeviceAssignment]) -> dict[str, list[DeviceAssignment]]:
    by_base: dict[str, list[DeviceAssignment]] = defaultdict(list)
    for a in assignments:
        by_base[base_of(a)].append(a)
    return by_base


def _not_taken(rows: set[DeviceAssignment], added: set[DeviceAssignment]) -> set[DeviceAssignment]:
    """The rows a diff's ``added`` rows leave in place. The kubelet allocates a device-plugin ID
    (a whole device or one ``::n`` replica) to one pod at a time, so an ID a diff adds for a pod
    is no longer another pod's: that pod's release is in a record lost or out of order (a diff
    older than the holders it lands on). Kept, both pods would hold one replica and the device's
    accounting would split it between them. A DRA device is not taken: several pods may hold it
    through one claim."""
    taken: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for a in added:
        if not via_dra(a.resource):
            taken[a.device_id].add((a.namespace, a.pod))
    if not taken:
        return rows
    return {
        r
        for r in rows
        if via_dra(r.resource)
        or r.device_id not in taken
        or (r.namespace, r.pod) in taken[r.device_id]
    }


def _advance(
    node: str,
    base: str,
    old: SlotHolders | None,
    new: tuple[DeviceAssignment, ...],
    ts_ms: int,
    view_since_ms: int | None,
) -> SlotHolders | None:
    """The next holders value for a base device, or ``None`` when nothing changed."""
    if old is None:
        if not new:
            return None
        start = view_since_ms if view_since_ms is not None and view_since_ms <= ts_ms else ts_ms
        return SlotHolders(node, base, new, ts_ms, (), start)
    if old.assignments == new:
        return None
    epochs = (Epoch(old.since_ms, ts_ms, old.assignments), *old.history)
    history = tuple(e for e in epochs if epoch_kept(e.until_ms, ts_ms))[:HISTORY_MAX]
    known = old.known_from_ms
    if len(history) < len(epochs):  # forgotten: the view no longer covers their time
        known = history[-1].from_ms if history else ts_ms
    return SlotHolders(node, base, new, ts_ms, history, known)


def apply_podresources(
    index: NodeDevices | None,
    current: Mapping[str, SlotHolders],
    record: PodResourcesSnapshot | PodResourcesDiff,
    inventory: Inventory = EMPTY_INVENTORY,
    dra: DraDevices = NO_DRA,
) -> tuple[NodeDevices, dict[str, SlotHolders]]:
    """Apply a snapshot or diff; return the node's new index and the holders that changed.

    ``current`` holds the present :class:`SlotHolders` for the base IDs in ``index.bases``.
    """
    index = index or empty_index(record.node)
    if isinstance(record, PodResourcesSnapshot) and index.since_ms is None:
        index = replace(index, since_ms=record.ts_ms)
    if isinstance(record, PodResourcesSnapshot):
        grouped = _group(record.assignments)
        touched = set(index.bases) | set(grouped)
        allocatable = record.allocatable or index.allocatable
    else:
        removed, added = _group(record.removed), _group(record.added)
        grouped = {}
        for base in set(removed) | set(added):
            old = set(current[base].assignments) if base in current else set()
            new_rows = set(added.get(base, ()))
            kept = _not_taken(old - set(removed.get(base, ())), new_rows)
            grouped[base] = list(kept | new_rows)
        touched = set(grouped)
        allocatable = index.allocatable
    changed: dict[str, SlotHolders] = {}
    snapshot = isinstance(record, PodResourcesSnapshot)
    for base in touched:
        new = tuple(sorted(set(grouped.get(base, ()))))
        held = current.get(base)
        if held is not None and held.holds(record.ts_ms, new if snapshot else None):
            continue  # processed again: its change is in the holders already
        nxt = _advance(record.node, base, held, new, record.ts_ms, index.since_ms)
        if nxt is not None:
            changed[base] = nxt
    live = {**current, **changed}
    bases = tuple(
        sorted(
            b
            for b, h in live.items()
            if not holders_expired(bool(h.assignments), h.since_ms, record.ts_ms)
        )
    )
    placed = index_keys(bases, inventory, dra, index.remembered_devices())
    advertised = (
        index.advertised
        if allocatable == index.allocatable and index.advertised
        else advertised_by_key(allocatable, inventory)
    )
    new_index = NodeDevices(
        record.node,
        bases,
        placed.keys,
        placed.unresolved,
        allocatable,
        record.ts_ms,
        advertised,
        placed.unplaced_mig,
        index.since_ms,
        placed.remembered,
    )
    return new_index, changed


def reindex(
    index: NodeDevices,
    inventory: Inventory,
    dra: DraDevices = NO_DRA,
    previous: DraDevices = NO_DRA,
) -> NodeDevices:
    """Recompute device keys after the node's inventory or its DRA slices changed (``previous``:
    what the slices published before the change)."""
    placed = index_keys(index.bases, inventory, dra, {**previous, **index.remembered_devices()})
    advertised = advertised_by_key(index.allocatable, inventory)
    return replace(
        index,
        keys=placed.keys,
        unresolved=placed.unresolved,
        advertised=advertised,
        unplaced_mig=placed.unplaced_mig,
        remembered=placed.remembered,
    )
