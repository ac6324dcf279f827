"""One input record in, table updates and output records out.

This is the glue between the pure decisions (:mod:`streams.core.holders`,
:mod:`streams.core.attribution`) and the worker's tables. Tables are plain ``MutableMapping``
objects here — Faust tables in the worker, dicts in tests — and every new value is *assigned*
back (Faust persists to the changelog only on assignment). Every key starts with the node, the
key of every input topic, so all state for a node lives in the partition that node's records
arrive on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, fields

from contract.inputs import (
    DcgmSample,
    DcgmScrape,
    DeviceAssignment,
    DeviceInventory,
    NodeRecord,
    PodListSnapshot,
    PodRecord,
    PodResourcesDiff,
    PodResourcesSnapshot,
    ResourceClaimRecord,
    ResourceSliceRecord,
)
from contract.outputs import Alert, AttributionEvent, ExporterMisattribution
from infra.settings import AlertSettings
from streams.core.alerts import DeviceAlerts, policy_for, step
from streams.core.attribution import DeviceContext, PodIdentity, attribute
from streams.core.dra import NodeSlices, device_map, placed_keys
from streams.core.holders import (
    DraDevices,
    NodeDevices,
    SlotHolders,
    apply_podresources,
    base_of,
    reindex,
    unplaced_dra,
)
from streams.core.identity import (
    EMPTY_INVENTORY,
    Inventory,
    MigDevice,
    device_key,
    mig_uuid_for,
)
from streams.core.pods import (
    NodePods,
    PodNames,
    apply_pod,
    apply_pod_list,
    name_key,
    resolve,
    settle,
)
from streams.core.sharing import NodeSharing, sharing_from_labels

Output = AttributionEvent | ExporterMisattribution | Alert


class UnusableRecord(ValueError):
    """A well-formed record that has no place on the input topic (bad input, not a defect)."""


@dataclass
class Tables:
    """The worker's state; every key starts with the node (see docs/ARCHITECTURE.md)."""

    slot_holders: MutableMapping[str, SlotHolders]  # node/base-device-id
    node_devices: MutableMapping[str, NodeDevices]  # node
    inventories: MutableMapping[str, Inventory]  # node
    pods: MutableMapping[str, PodNames]  # node/namespace/name
    node_pods: MutableMapping[str, NodePods]  # node
    nodes: MutableMapping[str, NodeRecord]  # node
    alert_state: MutableMapping[str, DeviceAlerts]  # node/device-uuid
    dra_slices: MutableMapping[str, NodeSlices]  # node
    dra_claims: MutableMapping[str, ResourceClaimRecord]  # node/namespace/name

    @classmethod
    def in_memory(cls) -> Tables:
        """Plain dicts: the processor without Faust (tests, the soak benchmark, tools)."""
        return cls(**{f.name: {} for f in fields(cls)})


def holder_key(node: str, base: str) -> str:
    return f"{node}/{base}"


def claim_key(node: str, namespace: str, name: str) -> str:
    return f"{node}/{namespace}/{name}"


def inventory_of(record: DeviceInventory) -> Inventory:
    return Inventory(
        gpus={g.index: g.uuid for g in record.gpus},
        migs={
            m.mig_uuid: MigDevice(m.mig_uuid, m.parent_uuid, m.gi, m.profile) for m in record.migs
        },
    )


@dataclass(frozen=True, slots=True)
class _NodeView:
    index: NodeDevices | None
    mig_parents: frozenset[str]  # GPUs with MIG instances among the index's device keys
    inventory: Inventory
    node_sharing: NodeSharing | None
    resolve_pod: Callable[[str, str, int], PodIdentity]
    claim: Callable[[str], ResourceClaimRecord | None]
    dra_devices: DraDevices
    dra_keys: frozenset[str]  # device keys (GPU UUIDs) a DRA driver publishes on this node
    dra_lost: tuple[str, ...]  # held DRA devices no slice places (not MIG): any GPU may be one


class Processor:
    """Applies records to :class:`Tables` and returns what to publish."""

    def __init__(self, tables: Tables, policy: AlertSettings | None = None) -> None:
        self.tables = tables
        self.policy = policy or AlertSettings.model_construct()  # defaults, no environment read

    def handle(self, record: object) -> list[Output]:
        if isinstance(record, DcgmScrape):
            return self._on_scrape(record)
        if isinstance(record, DcgmSample):
            return self._on_sample(record, self._node_view(record.node))
        if isinstance(record, PodResourcesSnapshot | PodResourcesDiff):
            self._on_podresources(record)
            return []
        if isinstance(record, PodRecord):
            self._on_pod(record)
            return []
        if isinstance(record, PodListSnapshot):
            self._on_pod_list(record)
            return []
        if isinstance(record, DeviceInventory):
            self.set_inventory(record.node, inventory_of(record))
            return []
        if isinstance(record, NodeRecord):
            self.tables.nodes[record.node] = record
            return []
        if isinstance(record, ResourceSliceRecord):
            self._on_slice(record)
            return []
        if isinstance(record, ResourceClaimRecord):
            self._on_claim(record)
            return []
        raise UnusableRecord(f"the worker does not handle {type(record).__name__}")

    def _inventory(self, node: str) -> Inventory:
        return self.tables.inventories.get(node, EMPTY_INVENTORY)

    def _dra_devices(self, node: str) -> DraDevices:
        node_slices = self.tables.dra_slices.get(node)
        return device_map(node_slices.slices) if node_slices else {}

    def _on_slice(self, record: ResourceSliceRecord) -> None:
        """A slice changed: keep the node's live slices, and place its DRA devices anew."""
        t = self.tables
        old = t.dra_slices.get(record.node, NodeSlices())
        new = old.apply(record)
        if new == old:
            return
        if new.slices:
            t.dra_slices[record.node] = new
        elif record.node in t.dra_slices:
            del t.dra_slices[record.node]
        index = t.node_devices.get(record.node)
        if index is not None:
            t.node_devices[record.node] = reindex(
                index, self._inventory(record.node), device_map(new.slices)
            )

    def _on_claim(self, record: ResourceClaimRecord) -> None:
        key = claim_key(record.node, record.namespace, record.name)
        if record.deleted:
            if key in self.tables.dra_claims:
                del self.tables.dra_claims[key]
        elif self.tables.dra_claims.get(key) != record:
            self.tables.dra_claims[key] = record

    def _on_podresources(self, record: PodResourcesSnapshot | PodResourcesDiff) -> None:
        t = self.tables
        node = record.node
        index = t.node_devices.get(node)
        rows = (
            record.assignments
            if isinstance(record, PodResourcesSnapshot)
            else (*record.added, *record.removed)
        )
        bases = set(index.bases if index else ()) | {base_of(a) for a in rows}
        current = {b: h for b in bases if (h := t.slot_holders.get(holder_key(node, b)))}
        new_index, changed = apply_podresources(
            index, current, record, self._inventory(node), self._dra_devices(node)
        )
        for base, holders in changed.items():
            t.slot_holders[holder_key(node, base)] = holders
        t.node_devices[node] = new_index

    def set_inventory(self, node: str, inventory: Inventory) -> None:
        t = self.tables
        t.inventories[node] = inventory
        index = t.node_devices.get(node)
        if index is not None:
            t.node_devices[node] = reindex(index, inventory, self._dra_devices(node))

    def _on_pod(self, rec: PodRecord) -> None:
        t = self.tables
        index = t.node_pods.get(rec.node, NodePods())
        changed = self._read(rec.node, index.due(rec.ts_ms))
        changed[f"{rec.namespace}/{rec.name}"] = apply_pod(
            t.pods.get(name_key(rec.node, rec.namespace, rec.name)), rec
        )
        self._settle(rec.node, index, changed, rec.ts_ms)

    def _on_pod_list(self, listing: PodListSnapshot) -> None:
        """A relist walks every remembered name of the node (and rebuilds its index)."""
        index = self.tables.node_pods.get(listing.node, NodePods())
        changed = {
            short: (apply_pod_list(names, listing) or names) if names is not None else None
            for short, names in self._read(listing.node, index.names).items()
        }
        self._settle(listing.node, index, changed, listing.ts_ms)

    def _read(self, node: str, shorts: Iterable[str]) -> dict[str, PodNames | None]:
        return {short: self.tables.pods.get(f"{node}/{short}") for short in shorts}

    def _settle(
        self, node: str, index: NodePods, changed: dict[str, PodNames | None], now_ms: int
    ) -> None:
        """Prune (pure :func:`settle`), then write only what changed; forgotten keys are deleted
        (a changelog tombstone), never assigned an empty value."""
        t = self.tables
        kept, new_index = settle(index, changed, now_ms)
        for short, names in kept.items():
            key = f"{node}/{short}"
            if names is None:
                if key in t.pods:
                    del t.pods[key]
            elif names != t.pods.get(key):
                t.pods[key] = names
        if new_index != index or node not in t.node_pods:
            t.node_pods[node] = new_index

    def _resolver(self, node: str) -> Callable[[str, str, int], PodIdentity]:
        pods, watched = self.tables.pods, node in self.tables.node_pods

        def resolve_pod(namespace: str, name: str, ts_ms: int) -> PodIdentity:
            return resolve(pods.get(name_key(node, namespace, name)), ts_ms, watched)

        return resolve_pod

    def _node_view(self, node: str) -> _NodeView:
        """What every sample of a node reads, read once (per scrape, not per device)."""
        t = self.tables
        node_rec = t.nodes.get(node)
        index = t.node_devices.get(node)
        claims = t.dra_claims

        def claim(ref: str) -> ResourceClaimRecord | None:
            namespace, _, name = ref.partition("/")
            return claims.get(claim_key(node, namespace, name))

        dra_devices = self._dra_devices(node)
        inventory = self._inventory(node)
        return _NodeView(
            index=index,
            mig_parents=frozenset(k.partition("/gi")[0] for k in index.keys if "/gi" in k)
            | frozenset(index.unplaced_mig)
            if index is not None
            else frozenset(),
            inventory=inventory,
            node_sharing=sharing_from_labels(dict(node_rec.labels)) if node_rec else None,
            resolve_pod=self._resolver(node),
            claim=claim,
            dra_devices=dra_devices,
            dra_keys=placed_keys(dra_devices, inventory) if dra_devices else frozenset(),
            dra_lost=unplaced_dra(index) if index is not None else (),
        )

    def _on_scrape(self, scrape: DcgmScrape) -> list[Output]:
        if foreign := {s.node for s in scrape.samples} - {scrape.node}:
            raise UnusableRecord(  # checked before any state changes: all or nothing
                f"dcgm.scrape of {scrape.node!r} carries samples of {sorted(foreign)}"
            )
        view = self._node_view(scrape.node)
        outputs: list[Output] = []
        for sample in scrape.samples:
            outputs += self._on_sample(sample, view)
        return outputs

    def _on_sample(self, sample: DcgmSample, view: _NodeView) -> list[Output]:
        t = self.tables
        node = sample.node
        index = view.index
        key = device_key(sample.uuid, sample.mig_instance_id)
        rows: list[DeviceAssignment] = []
        mig_parent = False
        if index is not None:
            for base in index.keys.get(key, ()):
                holders = t.slot_holders.get(holder_key(node, base))
                if holders is not None:
                    rows.extend(holders.at(sample.ts_ms))
            if sample.mig_instance_id is None:
                mig_parent = sample.uuid in view.mig_parents
        mig_uuid = (
            mig_uuid_for(sample.uuid, sample.mig_instance_id, view.inventory)
            if sample.mig_instance_id is not None
            else None
        )
        unplaced = (
            tuple(text for _, text in index.unplaced_mig.get(sample.uuid, ()))
            if index is not None and sample.mig_instance_id is not None
            else view.dra_lost
        )
        ctx = DeviceContext(
            node_sharing=view.node_sharing,
            advertised=index.advertised.get(key) if index is not None else None,
            mig_uuid=mig_uuid,
            mig_parent=mig_parent,
            holders_known=index is not None,
            resolve_pod=view.resolve_pod,
            claim=view.claim,
            dra_devices=view.dra_devices,
            dra_device=key in view.dra_keys,
            unplaced=unplaced,
        )
        event, flags = attribute(sample, rows, ctx)
        return [event, *flags, *self._alerts(event)]

    def _alerts(self, event: AttributionEvent) -> list[Alert]:
        t = self.tables
        key = f"{event.node}/{event.device_uuid}"
        annotations = []
        for h in event.holders:
            names = t.pods.get(name_key(event.node, h.namespace, h.pod))
            for life in names.lives if names else ():
                if life.uid == h.uid and life.annotations:
                    annotations.append(dict(life.annotations))
        old = t.alert_state.get(key)
        new, alerts = step(old, event, policy_for(self.policy, annotations))
        if new != old:
            t.alert_state[key] = new
        return alerts
