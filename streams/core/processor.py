"""One input record in, table updates and output records out.

This is the glue between the pure decisions and the worker's tables (:mod:`streams.core.tables`).
Every new value is *assigned* back (Faust persists to the changelog only on assignment); a key
that goes is deleted (a changelog tombstone), never assigned an empty value.

Allocation is the spine. Besides one event per accepted DCGM sample, every device a node has is
reported on every allocation change, at a heartbeat when no fresh sample speaks for it (usage
unknown, with the reason), once as stale when the node falls silent and a last time when it is
gone (:mod:`streams.core.lifetimes` owns when). Each of those transitions records its event
time in the node's state, so a record processed again after a crash re-emits what it caused.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import replace

from contract.inputs import (
    AgentStatus,
    ClockTick,
    DcgmSample,
    DcgmScrape,
    DeviceInventory,
    NodeRecord,
    PodListSnapshot,
    PodRecord,
    PodResourcesDiff,
    PodResourcesSnapshot,
    ResourceClaimRecord,
    ResourceSliceRecord,
)
from contract.outputs import (
    Alert,
    AttributionEvent,
    ExporterMisattribution,
    Origin,
    Telemetry,
    TelemetryRefused,
)
from contract.quantity import valid as valid_quantity
from infra.settings import AlertSettings
from streams.core import lifetimes, nodestate, telemetry
from streams.core.alerts import policy_for, step
from streams.core.attribution import DeviceFacts
from streams.core.dra import NodeSlices, device_map
from streams.core.holders import DraDevices, apply_podresources, base_of, reindex
from streams.core.identity import (
    EMPTY_INVENTORY,
    Inventory,
    MigDevice,
    device_key,
)
from streams.core.lifetimes import Lifetimes
from streams.core.nodestate import Gone, NodeState, PartitionNodes
from streams.core.nodeview import (
    NodeView,
    bases_of,
    read_node,
    roster,
    sample_event,
    spine_event,
    unplaced_reason,
)
from streams.core.pods import (
    NodePods,
    PodNames,
    apply_pod,
    apply_pod_list,
    name_key,
    settle,
)
from streams.core.roster import device_ids
from streams.core.tables import Tables, alert_key, claim_key, holder_key

__all__ = ["Output", "Processor", "Tables", "UnusableRecord", "inventory_of"]

Output = AttributionEvent | ExporterMisattribution | Alert | TelemetryRefused


def fingerprint(record: object) -> str:
    """A record's identity (its content): what tells a record processed again after a crash
    from another record of the same node at the same millisecond."""
    return hashlib.sha256(repr(record).encode()).hexdigest()[:16]


class UnusableRecord(ValueError):
    """A well-formed record that has no place on the input topic (bad input, not a defect)."""


def inventory_of(record: DeviceInventory) -> Inventory:
    return Inventory(
        gpus={g.index: g.uuid for g in record.gpus},
        models={g.uuid: g.model for g in record.gpus if g.model},
        migs={
            m.mig_uuid: MigDevice(m.mig_uuid, m.parent_uuid, m.gi, m.profile) for m in record.migs
        },
    )


class Processor:
    """Applies records to :class:`Tables` and returns what to publish."""

    def __init__(
        self,
        tables: Tables,
        policy: AlertSettings | None = None,
        life: Lifetimes | None = None,
    ) -> None:
        self.tables = tables
        self.policy = policy or AlertSettings.model_construct()  # defaults, no environment read
        self.life = life or Lifetimes()

    # --- dispatch

    def handle(self, record: object, partition: int = 0) -> list[Output]:
        """Apply one record read from input partition ``partition``; return its outputs."""
        if isinstance(record, ClockTick):
            return self._on_tick(record)
        if isinstance(record, NodeRecord) and record.deleted:
            return self._leave(record.node, record.ts_ms, "the node was deleted from the API")
        node = getattr(record, "node", None)
        ts_ms = getattr(record, "ts_ms", None)
        if not isinstance(node, str) or not isinstance(ts_ms, int):
            raise UnusableRecord(f"the worker does not handle {type(record).__name__}")
        if isinstance(record, DcgmScrape):
            self._check_scrape(record)  # before any state changes: all or nothing
        if isinstance(record, ResourceClaimRecord | ResourceSliceRecord):
            _check_quantities(record)
        if not self._heard(node, ts_ms, partition):
            gone = self._state(node)
            assert gone is not None
            assert gone.gone is not None
            raise UnusableRecord(  # bad input, dead-lettered: it predates the node's leaving
                f"{type(record).__name__} of {node!r} at {ts_ms} predates the node leaving at "
                f"{gone.gone.ts_ms} ({gone.gone.why})"
            )
        outputs = self._apply(record)
        outputs += self._beat(node, ts_ms, record)
        return outputs

    def _apply(self, record: object) -> list[Output]:
        if isinstance(record, DcgmScrape):
            return self._on_scrape(record)
        if isinstance(record, DcgmSample):  # an older agent's: one record per device
            return self._on_scrape(DcgmScrape(record.node, record.ts_ms, (record,)), merge=True)
        if isinstance(record, PodResourcesSnapshot | PodResourcesDiff):
            return self._on_podresources(record)
        if isinstance(record, PodRecord):
            self._on_pod(record)
        elif isinstance(record, PodListSnapshot):
            self._on_pod_list(record)
        elif isinstance(record, DeviceInventory):
            self.set_inventory(record.node, inventory_of(record))
        elif isinstance(record, NodeRecord):
            if self.tables.nodes.get(record.node) != record:
                self.tables.nodes[record.node] = record
        elif isinstance(record, ResourceSliceRecord):
            self._on_slice(record)
        elif isinstance(record, ResourceClaimRecord):
            self._on_claim(record)
        elif isinstance(record, AgentStatus):
            self._on_status(record)
        else:
            raise UnusableRecord(f"the worker does not handle {type(record).__name__}")
        return []

    # --- the node's life

    def _state(self, node: str) -> NodeState | None:
        return self.tables.node_state.get(node)

    def _put_state(self, node: str, old: NodeState | None, new: NodeState) -> None:
        if new != old:
            self.tables.node_state[node] = new

    def _heard(self, node: str, ts_ms: int, partition: int) -> bool:
        """A record of the node: it is live. A node seen for the first time (or again, later
        than it left) joins its partition's index; ``False``: a late record of a gone node."""
        t = self.tables
        state = self._state(node)
        if state is not None and state.gone is not None:
            if ts_ms <= state.gone.ts_ms:
                return False
            self._forget(node, state)  # a new life: nothing of the old one carries over
            state = None
        if state is None:
            key = str(partition)
            index = t.partition_nodes.get(key, PartitionNodes())
            if node not in index.nodes:
                t.partition_nodes[key] = index.with_node(node)
            self._put_state(node, None, nodestate.first_record(ts_ms, partition))
            return True
        self._put_state(node, state, nodestate.heard(state, ts_ms, self.life.quantum_ms))
        return True

    def _beat(self, node: str, ts_ms: int, record: object) -> list[Output]:
        """The heartbeat: every device no fresh sample speaks for, with its holders and why its
        usage is unknown; devices that left get their last event."""
        state = self._state(node)
        if state is None or state.gone is not None:
            return []
        # the record that made the last beat, processed again after a crash, beats again
        again = ts_ms == state.heartbeat_ms and state.beat_by == fingerprint(record)
        if not again and not lifetimes.heartbeat_due(state.heartbeat_ms, ts_ms, self.life):
            return []
        view = read_node(self.tables, node)
        facts = roster(view, state.scraped)
        outputs: list[Output] = []
        for key, f in facts.items():
            reason = self._unknown(view, state, key, ts_ms)
            if reason is not None:
                outputs += self._event(view, key, f, ts_ms, "heartbeat", reason)
        outputs += self._departures(node, state, view, facts, ts_ms, fingerprint(record))
        return outputs

    def _unknown(self, view: NodeView, state: NodeState, key: str, ts_ms: int) -> Telemetry | None:
        if view.index is not None and key in view.index.unresolved:
            return telemetry.unplaced(unplaced_reason(view, key))
        why = telemetry.unknown(state, key, ts_ms, self.life)
        if why is not None and why.cause == "no-row" and key in view.mig_parents:
            return replace(
                why,
                reason="a MIG-enabled GPU: dcgm-exporter reports its instances, not the GPU itself",
            )
        return why

    def _departures(
        self,
        node: str,
        state: NodeState,
        view: NodeView,
        facts: dict[str, DeviceFacts],
        ts_ms: int,
        beat_by: str,
    ) -> list[Output]:
        """Devices in the last roster but in no source now: their last events; their alert
        state goes at the next heartbeat (a crash in between re-emits these, at this time)."""
        now = device_ids(facts)
        outputs: list[Output] = []
        departed = state.departed
        if state.departed_ms == ts_ms:  # processed again: the same devices leave again
            left = state.departed
        else:
            for _, device_id in state.departed:
                if alert_key(node, device_id) in self.tables.alert_state:
                    del self.tables.alert_state[alert_key(node, device_id)]
            left = tuple(d for d in state.devices if d not in set(now))
            departed = left
        for key, device_id in left:
            gone_facts = DeviceFacts(node, key.partition("/gi")[0], device_uuid=device_id)
            why = telemetry.gone("no source of the node lists this device any more", ts_ms)
            outputs += self._event(view, key, gone_facts, ts_ms, "gone", why, holders=False)
        new = state
        if (now, departed) != (state.devices, state.departed) or state.heartbeat_ms != ts_ms:
            new = replace(
                state,
                devices=now,
                departed=departed,
                departed_ms=ts_ms if left else state.departed_ms,
                heartbeat_ms=ts_ms,
                beat_by=beat_by,
            )
        self._put_state(node, state, new)
        return outputs

    def _on_tick(self, tick: ClockTick) -> list[Output]:
        """The partition's clock: nodes silent too long go stale, then leave; nodes that left
        at an earlier tick have their keys deleted now."""
        t = self.tables
        index = t.partition_nodes.get(str(tick.partition))
        outputs: list[Output] = []
        for node in index.nodes if index is not None else ():
            state = self._state(node)
            if state is None:
                continue
            if state.gone is not None:
                if tick.ts_ms == state.gone.ts_ms:
                    outputs += self._gone_events(node, state)
                elif tick.ts_ms > state.gone.ts_ms:
                    self._forget(node, state)
                continue
            phase = lifetimes.phase(state.last_ms, tick.ts_ms, self.life)
            if phase == "gone":
                silent = (tick.ts_ms - state.last_ms) / 1000
                why = f"no record from the node's agent for {silent:.0f}s (its TTL)"
                outputs += self._leave(node, tick.ts_ms, why)
            elif phase == "stale" and (state.stale_ms is None or state.stale_ms == tick.ts_ms):
                outputs += self._stale(node, state, tick.ts_ms)
        return outputs

    def _stale(self, node: str, state: NodeState, ts_ms: int) -> list[Output]:
        view = read_node(self.tables, node)
        facts = roster(view, state.scraped)
        why = telemetry.silent(state.last_ms)
        outputs: list[Output] = []
        for key, f in facts.items():
            outputs += self._event(view, key, f, ts_ms, "stale", why)
        self._put_state(node, state, replace(state, stale_ms=ts_ms))
        return outputs

    def _leave(self, node: str, ts_ms: int, why: str) -> list[Output]:
        """The node is gone: its devices' last events now; its keys at the next tick."""
        state = self._state(node)
        if state is None:
            return []
        if state.gone is None:
            view = read_node(self.tables, node)
            devices = device_ids(roster(view, state.scraped))
            known = dict(state.devices)
            known.update(dict(devices))
            state_gone = replace(state, gone=Gone(ts_ms, why), devices=tuple(sorted(known.items())))
            self._put_state(node, state, state_gone)
            state = state_gone
        elif state.gone.ts_ms != ts_ms:
            return []  # already gone: its keys go at the next tick
        return self._gone_events(node, state)

    def _gone_events(self, node: str, state: NodeState) -> list[Output]:
        assert state.gone is not None
        view = read_node(self.tables, node)
        why = telemetry.gone(state.gone.why, state.gone.ts_ms)
        outputs: list[Output] = []
        for key, device_id in state.devices:
            facts = DeviceFacts(node, key.partition("/gi")[0], device_uuid=device_id)
            outputs += self._event(view, key, facts, state.gone.ts_ms, "gone", why, holders=False)
        return outputs

    def _forget(self, node: str, state: NodeState) -> None:
        """Delete every key the node has (:func:`streams.core.lifetimes.node_keys`)."""
        t = self.tables
        index = t.node_devices.get(node)
        node_pods = t.node_pods.get(node)
        keys = lifetimes.node_keys(
            node,
            bases=index.bases if index is not None else (),
            pod_names=node_pods.names if node_pods is not None else (),
            device_ids=[d for _, d in (*state.devices, *state.departed)],
            claims=state.claims,
        )
        for table in lifetimes.PER_NODE_TABLES:
            mapping = getattr(t, table)
            for key in keys.per_node:
                if key in mapping:
                    del mapping[key]
        for mapping, table_keys in (
            (t.slot_holders, keys.slot_holders),
            (t.pods, keys.pods),
            (t.alert_state, keys.alert_state),
            (t.dra_claims, keys.dra_claims),
        ):
            for key in table_keys:
                if key in mapping:
                    del mapping[key]
        part = str(state.partition)
        index_p = t.partition_nodes.get(part)
        if index_p is not None and node in index_p.nodes:
            rest = index_p.without(node)
            if rest.nodes:
                t.partition_nodes[part] = rest
            else:
                del t.partition_nodes[part]

    # --- events

    def _event(
        self,
        view: NodeView,
        key: str,
        facts: DeviceFacts,
        ts_ms: int,
        origin: Origin,
        why: Telemetry,
        *,
        holders: bool = True,
    ) -> list[Output]:
        event = spine_event(
            self.tables,
            view,
            key,
            facts,
            ts_ms,
            origin,
            why,
            holders=holders,
        )
        return [event, *self._alerts(event)]

    def _check_scrape(self, scrape: DcgmScrape) -> None:
        if foreign := {s.node for s in scrape.samples} - {scrape.node}:
            raise UnusableRecord(
                f"dcgm.scrape of {scrape.node!r} carries samples of {sorted(foreign)}"
            )

    def _on_scrape(self, scrape: DcgmScrape, *, merge: bool = False) -> list[Output]:
        """``merge``: the scrape is one device's row (older agents): the devices with rows are
        the ones seen before and this one."""
        view = read_node(self.tables, scrape.node)
        verdict = telemetry.verify(scrape, view.known_gpus(), view.host_names)
        state = self._state(scrape.node)
        assert state is not None  # _heard made it
        outputs: list[Output] = []
        if verdict.refused:
            assert verdict.cause is not None
            outputs.append(
                TelemetryRefused(
                    node=scrape.node,
                    ts_ms=scrape.ts_ms,
                    cause=verdict.cause,
                    reason=verdict.reason,
                    hostname=", ".join(sorted({s.hostname for s in verdict.refused})),
                    exporter=" ".join(filter(None, (scrape.exporter, scrape.exporter_pod))),
                    uuids=tuple(sorted({s.uuid for s in verdict.refused})),
                    rows=len(verdict.refused),
                )
            )
        if verdict.accepted:
            rows = {device_key(s.uuid, s.mig_instance_id) for s in verdict.accepted}
            keys = tuple(sorted(rows | set(state.scraped) if merge else rows))
            self._put_state(
                scrape.node,
                state,
                nodestate.accepted(state, scrape.ts_ms, keys, self.life.quantum_ms),
            )
        elif verdict.cause is not None:
            new = nodestate.refused(state, scrape.ts_ms, verdict.cause, verdict.reason)
            self._put_state(scrape.node, state, new)
        for sample in verdict.accepted:
            event, flags = sample_event(self.tables, view, sample)
            outputs += [event, *flags, *self._alerts(event)]
        return outputs

    def _alerts(self, event: AttributionEvent) -> list[Output]:
        t = self.tables
        key = alert_key(event.node, event.device_uuid)
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
        return list(alerts)

    # --- inputs

    def _inventory(self, node: str) -> Inventory:
        return self.tables.inventories.get(node, EMPTY_INVENTORY)

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
        t = self.tables
        key = claim_key(record.node, record.namespace, record.name)
        short = f"{record.namespace}/{record.name}"
        state = self._state(record.node)
        if record.deleted:
            if key in t.dra_claims:
                del t.dra_claims[key]
            claims = tuple(c for c in state.claims if c != short) if state else ()
        else:
            if t.dra_claims.get(key) != record:
                t.dra_claims[key] = record
            claims = tuple(sorted({*(state.claims if state else ()), short}))
        if state is not None and claims != state.claims:
            self._put_state(record.node, state, replace(state, claims=claims))

    def _on_status(self, record: AgentStatus) -> None:
        state = self._state(record.node)
        if state is not None:
            self._put_state(record.node, state, nodestate.with_sources(state, record.sources))

    def _on_podresources(self, record: PodResourcesSnapshot | PodResourcesDiff) -> list[Output]:
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
        for base in set(index.bases if index else ()) - set(new_index.bases):
            if holder_key(node, base) in t.slot_holders:  # its history ran out: nobody held it
                del t.slot_holders[holder_key(node, base)]
        if new_index != index:
            t.node_devices[node] = new_index
        # a change at this time (or one already applied, when processed again after a crash)
        moved = set(changed) | {b for b, h in current.items() if h.since_ms == record.ts_ms}
        return self._allocation_events(node, moved, record.ts_ms)

    def _allocation_events(self, node: str, bases: set[str], ts_ms: int) -> list[Output]:
        """Every device whose holders changed: its holders now; usage not measured since."""
        if not bases:
            return []
        state = self._state(node)
        assert state is not None
        view = read_node(self.tables, node)
        facts = roster(view, state.scraped)
        outputs: list[Output] = []
        for key, f in facts.items():
            if not bases & set(bases_of(view, key)):
                continue
            why = self._unknown(view, state, key, ts_ms)
            if why is None:
                why = telemetry.holders_changed(ts_ms, state.scrape_ms)
            outputs += self._event(view, key, f, ts_ms, "allocation", why)
        return outputs

    def _dra_devices(self, node: str) -> DraDevices:
        node_slices = self.tables.dra_slices.get(node)
        return device_map(node_slices.slices) if node_slices else {}

    def set_inventory(self, node: str, inventory: Inventory) -> None:
        t = self.tables
        if t.inventories.get(node) == inventory:
            return
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


def _check_quantities(record: ResourceClaimRecord | ResourceSliceRecord) -> None:
    """Every quantity a DRA record carries is one Kubernetes could have written: a malformed or
    oversized one makes the record bad input (dead-lettered), never a defect in the worker."""
    if isinstance(record, ResourceClaimRecord):
        pairs = [pair for r in record.results for pair in r.consumed]
    else:
        pairs = [pair for d in record.devices for pair in d.capacity]
    for name, text in pairs:
        if not valid_quantity(text):
            raise UnusableRecord(
                f"{type(record).__name__} {record.name!r} of {record.node!r}: {name} = "
                f"{text[:40]!r}{'…' if len(text) > 40 else ''} is not a Kubernetes quantity"
            )
