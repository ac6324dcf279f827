"""A node's supply: its allocated devices per resource, in the terms a pending pod asks for
(:class:`contract.inputs.NodeSupply`), and which of those records the node last emitted. Pure.

**What a node supplies** (:func:`node_supply`). Every device pods hold on the node, grouped by
the resource its holders hold it through (``nvidia.com/gpu``, a renamed shared resource such as
``nvidia.com/gpu.shared``, a MIG resource ``nvidia.com/mig-1g.10gb``; a DRA device by the class
that selects it, ``dra:<device class>`` (:func:`streams.core.devices.dra.device_class`: NVIDIA's MIG
devices are ``dra:mig.nvidia.com``, its whole GPUs ``dra:gpu.nvidia.com``). A device shared
through replicas (time-slicing, MPS) is one device whose ``slots`` are the allocation units its
holders hold (replica IDs; DRA: distinct claim allocations). Its ``product`` is the node's
``nvidia.com/gpu.product`` label; a MIG instance is named as the attribution events name it,
with its profile. ``idle_since_ms`` is the start of the device's idle episode
(:mod:`streams.core.alerts.alerts`, measured below the idle threshold) while that episode is its
current holders' and a fresh reading speaks for the device; not idle, or usage unknown, is
``None`` — never counted as idle; ``measured`` says which (a device without a fresh reading is
``measured=False``: the demand record counts it among ``unmeasured_gpus``).

The demand side asks for DRA devices by device class (``dra:<device class>``) too, so a pod of
class ``mig.nvidia.com`` meets the MIG devices, and one of ``gpu.nvidia.com`` whole GPUs only.

**What it emitted** (:class:`NodeSupplyState`, table ``node-supply`` keyed by node). A record is
emitted per resource whose devices changed — an empty one for a resource no longer held, a
``gone`` one for each resource a node that leaves had — and written to the table only then, so
a steady node writes nothing per sample. Each emission remembers the record that caused it (its
event time and fingerprint): that record, processed again after a crash whose state write
reached the changelog but whose outputs did not, emits the same records again (as
:mod:`streams.core.stack.nodestack`), then what the holders say now where that differs. Records
are stamped with the later of their cause's event time and the node's last emission, so a
node's records never go back in time.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator

from contract.inputs import NodeSupply, SupplyDevice, SupplyHolder
from contract.outputs import Holder, Workload
from contract.records import Record, replace
from streams.core import replays
from streams.core.alerts.episodes import Episode, HolderId, same_holders
from streams.core.devices.dra import class_resource
from streams.core.memo import keep_newest
from streams.core.replays import REMEMBERED

#: resource → its allocated devices (sorted by device)
Supplies = dict[str, tuple[SupplyDevice, ...]]


class AllocatedDevice(Record, frozen=True):
    """One held device as the allocation spine describes it now: its holders (every container,
    every resource), whether a fresh trusted reading speaks for it, and its idle episode."""

    device_uuid: str  # a MIG instance: its UUID, as the attribution events name it
    holders: tuple[Holder, ...]
    measured: bool
    idle: Episode | None = None
    mig_profile: str = ""
    mig: bool = False  # a MIG instance (its profile may be unknown)


def idle_since(device: AllocatedDevice) -> int | None:
    """When the device's current holders' idle episode began; ``None`` when it is not idle, its
    usage is unknown, or the episode was someone else's (holders changed since it began)."""
    if device.idle is None or not device.measured:
        return None
    holders: tuple[HolderId, ...] = tuple(
        sorted({(h.namespace, h.pod, h.uid or "") for h in device.holders})
    )
    return device.idle.since_ms if same_holders(device.idle.holders, holders) else None


def workload_of(workload: Workload | None) -> str | None:
    """A holder's workload as the supply names it (``Kind/name``): one string object per
    workload however many supplied devices name it (:func:`sys.intern`; at 2,744 devices 13,755
    copies of a few hundred names were 0.85 MiB)."""
    return sys.intern(f"{workload.kind}/{workload.name}") if workload is not None else None


def _workload(h: Holder) -> str | None:
    return workload_of(h.workload)


def _supply_holders(holders: Iterable[Holder]) -> tuple[SupplyHolder, ...]:
    """One per pod (its containers folded), sorted."""
    pods = {(h.namespace, h.pod, h.uid, _workload(h)) for h in holders}
    by_pod: dict[tuple[str, str], SupplyHolder] = {}
    for ns, pod, uid, workload in sorted(pods, key=lambda p: (p[0], p[1], p[2] or "", p[3] or "")):
        old = by_pod.get((ns, pod))
        # a pod's containers agree on its identity; keep what any of them knows
        by_pod[(ns, pod)] = SupplyHolder(
            ns,
            pod,
            uid or (old.uid if old is not None else None),
            workload or (old.workload if old is not None else None),
        )
    return tuple(by_pod[k] for k in sorted(by_pod))


def _slots(holders: Iterable[Holder]) -> int:
    """The allocation units held: distinct device IDs (replicas), per claim for DRA."""
    return len({(h.claim or "", d) for h in holders for d in h.device_ids}) or 1


def node_supply(product: str | None, devices: Iterable[AllocatedDevice]) -> Supplies:
    """The node's allocated devices per resource (module docstring); a device held through two
    resources is listed under each, with that resource's holders and slots."""
    return _grouped(device_supply(product, device) for device in devices)


def _grouped(supplied: Iterable[tuple[tuple[str, SupplyDevice], ...]]) -> Supplies:
    grouped: dict[str, list[SupplyDevice]] = {}
    for pairs in supplied:
        for resource, device in pairs:
            grouped.setdefault(resource, []).append(device)
    return {r: tuple(sorted(ds, key=lambda d: d.device_uuid)) for r, ds in sorted(grouped.items())}


def device_supply(
    product: str | None, device: AllocatedDevice
) -> tuple[tuple[str, SupplyDevice], ...]:
    """What one held device supplies, per resource its holders hold it through."""
    since = idle_since(device)
    by_resource: dict[str, list[Holder]] = {}
    for h in device.holders:
        if h.resource:  # a row naming no resource: nothing can ask for it
            by_resource.setdefault(class_resource(h.resource, device.mig), []).append(h)
    return tuple(
        (
            resource,
            SupplyDevice(
                device_uuid=device.device_uuid,
                product=product or "",
                mig_profile=device.mig_profile,
                idle_since_ms=since,
                holders=_supply_holders(holders),
                slots=_slots(holders),
                measured=device.measured,  # usage unknown: counted apart, never idle
            ),
        )
        for resource, holders in by_resource.items()
    )


#: nodes :class:`Supplied` keeps: a worker at saturation owns ~1,000 (bench.run)
MAX_SUPPLIED_NODES = 4_096

#: one device's entry in :class:`Supplied`: the node's product, the device as it was described,
#: what it supplied then
_Kept = tuple[str | None, AllocatedDevice, tuple[tuple[str, SupplyDevice], ...]]


class Supplied:
    """What each device of a node supplied at the node's last supply, so that the next one
    decides again only the devices that changed — their holders, reading, idle episode or
    profile, or the node's product. A device is compared with its entry by value, holder tuple
    first by identity: the holders of a device whose frame holds
    (:mod:`streams.core.flow.deviceframe`) are the same tuple from one supply to the next, so an
    unchanged device costs a comparison, not a hash of its holders.

    A memo, not state: bounded by what is live (each node keeps the devices of its last supply
    only, replaced whole every time; a node that leaves is forgotten) and by ``max_nodes`` (the
    node supplied longest ago dropped first: a node whose partition moved to another worker
    leaves there, not here), recomputable, and no output depends on whether it hit. A restarted
    worker starts without it."""

    def __init__(self, max_nodes: int = MAX_SUPPLIED_NODES) -> None:
        self._nodes: dict[str, dict[str, _Kept]] = {}
        self._max = max_nodes
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        """Devices kept, over every node."""
        return sum(map(len, self._nodes.values()))

    def node_supply(
        self, node: str, product: str | None, devices: Iterable[AllocatedDevice]
    ) -> Supplies:
        """:func:`node_supply` of the node's devices now, each device's part reused when it
        is the same as at the node's last supply."""
        before = self._nodes.get(node, {})
        now: dict[str, _Kept] = {}
        parts = []
        for device in devices:
            kept = before.get(device.device_uuid)
            if kept is not None and kept[0] == product and kept[1] == device:
                self.hits += 1
                part = kept[2]
            else:
                self.misses += 1
                part = device_supply(product, device)
            now[device.device_uuid] = (product, device, part)
            parts.append(part)
        keep_newest(self._nodes, node, now, self._max)
        return _grouped(parts)

    def forget(self, node: str) -> None:
        """The node left: its devices go."""
        self._nodes.pop(node, None)


# --- what the node emitted: table node-supply


class Emission(Record, frozen=True):
    """The records the node's record of event time ``ts_ms`` and fingerprint ``by`` emitted."""

    ts_ms: int
    by: str
    records: tuple[NodeSupply, ...]


class NodeSupplyState(Record, frozen=True):
    """The node's last record per held resource (its event time: the emission's), its last emissions
    (newest first, :func:`streams.core.replays.remember`), the devices a fresh reading spoke for
    when it was last judged (``measured``: when that moves, idle devices may have become unknown, or
    back) and the event time of its last emitted record (``stamped_ms``; 0 in values written before
    it was kept)."""

    current: tuple[NodeSupply, ...] = ()
    emitted: tuple[Emission, ...] = ()
    measured: tuple[str, ...] = ()
    stamped_ms: int = 0  # additive

    def stamp(self, ts_ms: int) -> int:
        """The event time of a record emitted now: never before the node's last emission."""
        if self.stamped_ms:  # every record emitted so far is stamped at or before it
            return max(ts_ms, self.stamped_ms)
        stamps = (r.ts_ms for e in self.emitted for r in e.records)
        return max((ts_ms, *(r.ts_ms for r in self.current), *stamps))


def again(old: NodeSupplyState | None, ts_ms: int, by: str) -> tuple[NodeSupply, ...] | None:
    """What the record (``ts_ms``, ``by``) emitted when it was first processed (``None``: it
    emitted nothing, or it is new) — and, for a resource a later record spoke of since, that
    record's word after it: a record delivered twice never leaves an older word as the last."""
    e = replays.recall(old.emitted, ts_ms, by) if old is not None else None
    if old is None or e is None:
        return None
    latest = [_latest(old, r.resource) for r in e.records]
    return (*e.records, *(w for r, w in zip(e.records, latest, strict=True) if w != r))


def _latest(state: NodeSupplyState, resource: str) -> NodeSupply:
    """The last record of ``resource`` the node emitted: its current one while held, else the
    first remembered (the emissions are kept last made first)."""
    held = next((r for r in state.current if r.resource == resource), None)
    if held is not None:
        return held
    return next(r for e in state.emitted for r in e.records if r.resource == resource)


def stated_holders(old: NodeSupplyState | None) -> Iterator[SupplyHolder]:
    """Every pod the node's last word lists, as it names them (UID, workload; a pod holding
    several devices once per device): all a pod's own record can change in the node's supply —
    a pod it does not list enters it through the allocation records (PodResources, DRA claims)
    instead."""
    for r in old.current if old is not None else ():
        for d in r.devices:
            yield from d.holders


def emitted_at(old: NodeSupplyState | None, ts_ms: int) -> bool:
    """Some record of event time ``ts_ms`` emitted (a cheap test before a fingerprint)."""
    return old is not None and any(e.ts_ms == ts_ms for e in old.emitted)


#: a record's fingerprint, or how to take it: taken only when the record emits, or may have
By = str | Callable[[], str]


def _taken(by: By) -> str:
    return by if isinstance(by, str) else by()


def step(
    old: NodeSupplyState | None,
    node: str,
    supplies: Supplies,
    ts_ms: int,
    by: By,
    measured: tuple[str, ...] = (),
) -> tuple[NodeSupplyState | None, tuple[NodeSupply, ...]]:
    """The node's new supply memory (``None``: unchanged, no write) and the records to emit:
    one per resource whose devices changed, empty for a resource no longer held. A record that
    emitted before emits the same again (:func:`again`), then — as any record — whatever the
    holders say now that its last word does not: memory says what was emitted, never what is
    held (an old record delivered again out of order may have reset the holders it names).
    ``by`` (the record's fingerprint) is taken only when a record of its time emitted before or
    this one emits."""
    repeated = (again(old, ts_ms, _taken(by)) if emitted_at(old, ts_ms) else None) or ()
    state = old or NodeSupplyState()
    # never before the node's last emission, nor before an idle episode it reports (a record
    # of the node processed out of event-time order can reveal one that began after it)
    at = state.stamp(max((ts_ms, *_idle_starts(supplies))))
    before = {r.resource: r for r in state.current}
    out = []
    for resource in sorted({*before, *supplies}):
        devices = supplies.get(resource, ())
        last = before.get(resource)
        if (last.devices if last is not None else ()) != devices:
            out.append(NodeSupply(at, node, resource, devices))
    if not out:
        if old is None or old.measured == measured:
            return None, repeated
        return replace(old, measured=measured), repeated
    changed = {r.resource: r for r in out}
    emission = Emission(ts_ms, _taken(by), tuple(out))
    new = NodeSupplyState(
        current=tuple(changed.get(r) or before[r] for r in sorted(supplies)),
        emitted=replays.remember(emission, state.emitted, REMEMBERED),
        measured=measured,
        stamped_ms=at,
    )
    return new, (*repeated, *out)


def _idle_starts(supplies: Supplies) -> tuple[int, ...]:
    return tuple(
        d.idle_since_ms for ds in supplies.values() for d in ds if d.idle_since_ms is not None
    )


def gone(old: NodeSupplyState | None, node: str, ts_ms: int) -> tuple[NodeSupply, ...]:
    """The node leaves: a ``gone`` record for each resource it had (its key goes after)."""
    if old is None:
        return ()
    at = old.stamp(ts_ms)
    return tuple(NodeSupply(at, node, r.resource, (), gone=True) for r in old.current)
