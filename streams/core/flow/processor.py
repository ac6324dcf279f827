"""One input record in, table updates and output records out.

This is the glue between the pure decisions and the worker's tables
(:mod:`streams.core.flow.tables`).
Every new value is *assigned* back (Faust persists to the changelog only on assignment); a key
that goes is deleted (a changelog tombstone), never assigned an empty value.

Allocation is the spine. Besides one event per accepted DCGM sample, every device a node has is
reported on every allocation change, at a heartbeat when no fresh sample speaks for it (usage
unknown, with the reason), once as stale when the node falls silent and a last time when it is
gone (:mod:`streams.core.lifetimes` owns when). Each of those transitions records its event
time in the node's state, so a record processed again after a crash re-emits what it caused.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from contract.bounds import cut
from contract.inputs import (
    AgentStatus,
    ClockTick,
    ClusterPolicyRecord,
    DcgmSample,
    DcgmScrape,
    DeviceInventory,
    DeviceTaintRuleRecord,
    GpuClusterRecord,
    NodeRecord,
    NodeSupply,
    NvidiaDriverRecord,
    OperandPods,
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
    NodeStatus,
    NodeStatusRetired,
    TelemetryRefused,
    UsageUncredited,
)
from contract.quantity import valid as valid_quantity
from contract.records import replace
from infra.settings import AlertSettings
from streams.core.demand import supply
from streams.core.devices.dra import NodeSlices, device_map
from streams.core.devices.holders import DraDevices, apply_podresources, base_of, reindex
from streams.core.devices.identity import (
    EMPTY_INVENTORY,
    Inventory,
    MigDevice,
    device_key,
)
from streams.core.devices.sharing import LABEL_PRODUCT
from streams.core.devices.taintrules import PartitionTaintRules
from streams.core.flow.nodeview import Joins, NodeView, read_node, with_stack
from streams.core.flow.spine import Spine, fingerprint, idle_moved, idle_of
from streams.core.flow.staged import Stage
from streams.core.flow.tables import Tables
from streams.core.keys import (
    alert_key,
    claim_key,
    holder_key,
    name_key,
    partition_key,
    short_key,
    short_name,
)
from streams.core.lifetimes import CLUSTER_ROLE, Lifetimes
from streams.core.node import nodestate, telemetry
from streams.core.node.nodestate import NodeState
from streams.core.node.pods import (
    NodePods,
    PodNames,
    apply_pod,
    apply_pod_list,
    resolve,
    settle,
)
from streams.core.stack import nodestack, stackalerts
from streams.core.stack.nodestack import IntentRecord, PartitionPolicies
from streams.core.stack.operatorstack import node_status, operator_seen

__all__ = ["ClockJump", "Output", "Processor", "Tables", "UnusableRecord", "inventory_of"]

Output = (
    AttributionEvent
    | ExporterMisattribution
    | UsageUncredited
    | Alert
    | TelemetryRefused
    | NodeStatus
    | NodeStatusRetired
    | NodeSupply
)


#: records that can change the devices a node has (its roster)
CHANGES_DEVICES = (
    DeviceInventory,
    PodResourcesSnapshot,
    PodResourcesDiff,
    ResourceSliceRecord,
    DcgmScrape,
    DcgmSample,
)

#: a node's GPU stack inputs (besides the partition's ClusterPolicy and the exporter's answers
#: being refused): a change recomputes its node-status
STACK_INPUTS = (OperandPods, NodeRecord, AgentStatus)

#: records that can change what a node supplies (:mod:`streams.core.demand.supply`): who holds what,
#: the holders' identities, the product label, the devices' names; the agent's word on its
#: exporter. Besides these, a sample's idle episode starting or ending, and the devices a fresh
#: reading speaks for moving (checked on every record and tick, cheaply)
SUPPLY_INPUTS = (
    PodResourcesSnapshot,
    PodResourcesDiff,
    PodRecord,
    PodListSnapshot,
    NodeRecord,
    DeviceInventory,
    ResourceSliceRecord,
    ResourceClaimRecord,
    AgentStatus,
)


class UnusableRecord(ValueError):
    """A well-formed record that has no place on the input topic (bad input, not a defect)."""


class ClockJump(UnusableRecord):
    """A record further ahead of its partition's event time than the jump bound allows."""


def inventory_of(record: DeviceInventory) -> Inventory:
    return Inventory(
        gpus={g.index: g.uuid for g in record.gpus},
        models={g.uuid: g.model for g in record.gpus if g.model},
        pci_buses={g.uuid: g.pci_bus_id for g in record.gpus if g.pci_bus_id},
        migs={
            m.mig_uuid: MigDevice(m.mig_uuid, m.parent_uuid, m.gi, m.profile) for m in record.migs
        },
    )


class Processor:
    """Applies records to :class:`Tables` and returns what to publish.

    A record is decided against staged views of the tables (:mod:`streams.core.flow.staged`):
    its writes reach the tables together once its pass is decided, only where a value changed,
    and not at all when it is refused part way."""

    def __init__(
        self,
        tables: Tables,
        policy: AlertSettings | None = None,
        life: Lifetimes | None = None,
    ) -> None:
        self._stage = Stage(tables)
        self.tables = self._stage.tables
        self.policy = policy or AlertSettings.model_construct()  # defaults, no environment read
        self.life = life or Lifetimes()
        #: what a device's sample events share (a memo, not state; ``None``: joined afresh)
        #: what each device of a node supplied at its last supply (a memo: no output depends
        #: on whether it hit)
        self.supplied = supply.Supplied()
        self.spine = Spine(self.tables, self.life, self.policy, Joins())
        #: the views of the nodes this record touches (:func:`read_node`), each read once
        self._views: dict[str, NodeView] = {}

    # --- dispatch

    def handle(self, record: object, partition: int = 0) -> list[Output]:
        """Apply one record read from input partition ``partition``; return its outputs."""
        try:
            outputs = self._handle(record, partition)
        except BaseException:
            self._stage.discard()
            raise
        else:
            self._stage.commit()
            return outputs
        finally:
            self._views.clear()

    def _view(self, node: str) -> NodeView:
        """The node's view for this record, read from the tables once (after the record's own
        writes to what it reads: the processor writes those first)."""
        view = self._views.get(node)
        if view is None:
            view = self._views[node] = read_node(self.tables, node)
        return view

    def _handle(self, record: object, partition: int) -> list[Output]:
        if isinstance(record, ClockTick):
            if record.partition != partition:  # the partition aged is the one it was read from
                raise UnusableRecord(
                    f"clock.tick of partition {record.partition} read from partition {partition}"
                )
            self._clock(partition, record.ts_ms, CLUSTER_ROLE)
            return [
                *self._tick(partition, record.ts_ms),
                *self._stack_tick(record, partition),
                *self._supply_tick(record, partition),
            ]
        if getattr(record, "node", None) == "":  # no node is named "": its keys would be ""
            raise UnusableRecord(f"{type(record).__name__} names no node")
        if isinstance(record, NodeRecord) and record.deleted:
            self._clock(partition, record.ts_ms, CLUSTER_ROLE)
            why = "the node was deleted from the API"
            return self._leave(record.node, record.ts_ms, why, partition)
        if isinstance(record, ClusterPolicyRecord | GpuClusterRecord | NvidiaDriverRecord):
            self._clock(partition, record.ts_ms, CLUSTER_ROLE)
            return self._on_policy(record, partition)
        if isinstance(record, DeviceTaintRuleRecord):
            self._clock(partition, record.ts_ms, CLUSTER_ROLE)
            self._on_taint_rule(record, partition)
            return []
        node = getattr(record, "node", None)
        ts_ms = getattr(record, "ts_ms", None)
        if not isinstance(node, str) or not isinstance(ts_ms, int):
            raise UnusableRecord(f"the worker does not handle {type(record).__name__}")
        if isinstance(record, DcgmScrape):
            self._check_scrape(record)  # before any state changes: all or nothing
        if isinstance(record, ResourceClaimRecord | ResourceSliceRecord):
            _check_quantities(record)
        if (gone := self.spine.late(node, ts_ms, partition)) is not None:
            raise UnusableRecord(  # bad input, dead-lettered: it predates the node's leaving
                f"{type(record).__name__} of {node!r} at {ts_ms} predates the node leaving at "
                f"{gone.ts_ms} ({gone.why})"
            )
        self._clock(partition, ts_ms, f"node {node!r}")  # the last check: it moves the clock
        self.spine.heard(node, ts_ms, partition)
        before = self._state(node)
        outputs = self._apply(record)
        after = self._state(node)
        refusal_moved = before is not None and after is not None and before.refused != after.refused
        if isinstance(record, STACK_INPUTS) or refusal_moved:
            outputs += self._stack(node, ts_ms, record)
        if isinstance(record, CHANGES_DEVICES):
            outputs += self.spine.sync(self._view(node), ts_ms)
        outputs += self._stack_alert(node, ts_ms, record)
        if (beat := self.spine.beat_due(node, ts_ms, record)) is not None:
            outputs += self.spine.beat(self._view(node), beat, ts_ms)
        outputs += self._supply(node, ts_ms, record, self._changes_supply(node, record))
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
            self._set_inventory(record.node, inventory_of(record))
        elif isinstance(record, NodeRecord):
            self.tables.nodes[record.node] = record
        elif isinstance(record, ResourceSliceRecord):
            self._on_slice(record)
        elif isinstance(record, ResourceClaimRecord):
            self._on_claim(record)
        elif isinstance(record, AgentStatus):
            self._on_status(record)
        elif isinstance(record, OperandPods):
            self.tables.operand_pods[record.node] = record
        else:
            raise UnusableRecord(f"the worker does not handle {type(record).__name__}")
        return []

    # --- the node's GPU stack: streams.core.stack.operatorstack, streams.core.stack.nodestack

    def _on_policy(self, record: IntentRecord, partition: int) -> list[Output]:
        """The GPU Operator's intent (published into every partition): kept for the partition;
        every node of the partition judged anew."""
        t = self.tables
        key = partition_key(partition)
        old = t.cluster_policies.get(key, PartitionPolicies())
        new = old.apply(record)
        if new != old:
            if not new.empty:
                t.cluster_policies[key] = new
            elif key in t.cluster_policies:
                del t.cluster_policies[key]
        index = t.partition_nodes.get(key)
        outputs: list[Output] = []
        for node in index.nodes if index is not None else ():
            if self._state(node) is not None:
                outputs += self._stack(node, record.ts_ms, record)
                outputs += self._stack_alert(node, record.ts_ms, record)
        return outputs

    # --- DRA device taint rules: streams.core.devices.taintrules

    def _on_taint_rule(self, record: DeviceTaintRuleRecord, partition: int) -> None:
        """A DeviceTaintRule (published into every partition): kept for the partition. Every
        node's view reads the partition's rules, so each device it selects is judged anew on its
        next event (its next sample, or its next heartbeat), as a slice's own taint is."""
        t = self.tables
        key = partition_key(partition)
        old = t.device_taint_rules.get(key, PartitionTaintRules())
        new = old.apply(record)
        if new == old:
            return
        if new.rules:
            t.device_taint_rules[key] = new
        elif key in t.device_taint_rules:
            del t.device_taint_rules[key]

    def _stack(self, node: str, ts_ms: int, record: object) -> list[Output]:
        """The node's stack judged from what the tables hold now; emitted when it changed (or
        again, for a record processed again: :func:`streams.core.stack.nodestack.step`)."""
        t = self.tables
        state = self._state(node)
        assert state is not None  # heard, or in the partition's index
        node_rec = t.nodes.get(node)
        policies = t.cluster_policies.get(str(state.partition))
        labels = dict(node_rec.labels) if node_rec is not None else None
        policy = policies.in_charge() if policies is not None else None
        cluster = policies.gpu_cluster() if policies is not None else None
        pods = t.operand_pods.get(node)
        status = node_status(
            node,
            ts_ms,
            labels,
            policy,
            pods,
            AgentStatus(node, ts_ms, state.sources) if state.sources else None,
            state.refused.reason if state.refused is not None else None,
            cluster,
            policies.drivers if policies is not None else (),
        )
        seen = operator_seen(labels, policy, pods, cluster)
        old = t.node_stack.get(node)
        new, emit = nodestack.step(old, status, ts_ms, fingerprint(record), seen)
        if new is not None:
            t.node_stack[node] = new
            if node in self._views and (old is None or new.last is not old.last):
                self._views[node] = with_stack(self._views[node], new.last)
        return list(emit)

    def _stack_alert(self, node: str, ts_ms: int, record: object) -> list[Output]:
        """The node's ``stack-broken`` alert (:mod:`streams.core.stack.stackalerts`) after a record:
        its status now and the GPUs held there. A record that moved it before (processed again
        after a crash) emits what it emitted then and changes nothing."""
        t = self.tables
        old = t.node_stack.get(node)
        if old is None:
            return []  # no status ever: the GPU Operator is not seen on this node
        by = fingerprint(record)
        if (again := nodestack.alert_again(old, ts_ms, by)) is not None:
            return list(again)
        status = old.last
        if old.broken is None and (status is None or status.state != "broken"):
            return []  # nothing open, nothing to open: no need to read the held GPUs
        held = self.spine.held(self._view(node), ts_ms)
        episode, alerts = stackalerts.step(
            old.broken,
            status,
            held,
            node,
            ts_ms,
            grace_ms=round(self.policy.stack_grace_s * 1000),
            holddown_ms=round(self.policy.stack_holddown_s * 1000),
        )
        if alerts:
            t.node_stack[node] = nodestack.alerted(old, episode, ts_ms, by, tuple(alerts))
        elif episode != old.broken:
            t.node_stack[node] = nodestack.pending(old, episode)
        return list(alerts)

    def _clock(self, partition: int, ts_ms: int, by: str) -> None:
        """The record's time checked against its partition's (:meth:`Spine.clock`)."""
        if (why := self.spine.clock(partition, ts_ms, by)) is not None:
            raise ClockJump(why)

    def _stack_tick(self, tick: ClockTick, partition: int) -> list[Output]:
        """The partition's clock: a node's pending ``stack-broken`` episode whose grace window
        has run out fires, and a fired one whose hold-down without holders has run out resolves,
        without waiting for a new record of the node. A tick processed again sends what it sent
        (:func:`streams.core.stack.nodestack.alert_again`)."""
        t = self.tables
        index = t.partition_nodes.get(partition_key(partition))
        by = fingerprint(tick)
        outputs: list[Output] = []
        for node in index.nodes if index is not None else ():
            stack = t.node_stack.get(node)
            if stack is None or self._state(node) is None:
                continue  # no status ever, or it left on this tick
            episode = stack.broken
            timed = episode is not None and (episode.fired is None or episode.unheld_ms is not None)
            if timed or nodestack.alert_again(stack, tick.ts_ms, by) is not None:
                outputs += self._stack_alert(node, tick.ts_ms, tick)
        return outputs

    def _tick(self, partition: int, ts_ms: int) -> list[Output]:
        """The partition's clock: nodes silent too long go stale, then leave
        (:meth:`Spine.tick`); a tick processed again emits what it caused again."""
        again, due = self.spine.tick(partition, ts_ms)
        outputs: list[Output] = list(again)
        for d in due:
            if d.why is None:
                outputs += self.spine.stale(self._view(d.node), d.state, ts_ms)
            else:
                outputs += self._leave(d.node, ts_ms, d.why, partition)
        return outputs

    def _leave(self, node: str, ts_ms: int, why: str, partition: int) -> list[Output]:
        """The node is gone (:meth:`Spine.leave`), or went at ``ts_ms`` already (a record
        processed again: what its leaving emitted)."""
        state = self._state(node)
        if state is None:
            return list(self.spine.left_again(node, ts_ms, partition))
        view = self._view(node)
        outputs = self.spine.leave(view, state, ts_ms, why, self._node_gone(node, ts_ms, why))
        del self._views[node]  # its keys are gone, and what the memos kept for it
        self.spine.joins.forget(node)
        self.supplied.forget(node)
        return list(outputs)

    def _node_gone(self, node: str, ts_ms: int, why: str) -> list[Alert | NodeSupply]:
        """The node leaves: its open ``stack-broken`` alert resolves, and each resource it
        supplied is withdrawn (its keys go after)."""
        old = self.tables.node_stack.get(node)
        alerts = stackalerts.gone(old.broken if old is not None else None, ts_ms, why)
        return [*alerts, *supply.gone(self.tables.node_supply.get(node), node, ts_ms)]

    # --- the node's supply: streams.core.demand.supply

    def _changes_supply(self, node: str, record: object) -> bool:
        """The record is one that can change the node's supply whatever it says. A pod's record
        is judged by what it says, at the node's time (:meth:`_identities_moved`)."""
        return isinstance(record, SUPPLY_INPUTS) and not isinstance(record, PodRecord)

    def _identities_moved(self, node: str, old: supply.NodeSupplyState | None, at: int) -> bool:
        """Some pod the node's supply lists no longer resolves, at the node's time ``at``, to
        the UID and workload the supply names it by: all the pod watch tells the supply. A pod
        record that moves none of them (a deletion the kubelet has not acted on yet, a change
        of annotations, churn of pods that hold nothing here) costs the supply a lookup per
        listed pod, not its node's holders joined afresh. Checked for every listed pod, not only
        the record's: a name's lives resolve by time, so a pod's identity can move with the
        node's time as well as with its own record. A pod the supply names by a DRA claim's
        ``reservedFor`` UID where the pod watch knows another always counts as moved: such a
        node's supply is recomputed on every pod record."""
        get = self.tables.pods.get
        watched = node in self.tables.node_pods
        seen: set[tuple[str, str]] = set()
        for h in supply.stated_holders(old):
            if (h.namespace, h.pod) in seen:
                continue
            seen.add((h.namespace, h.pod))
            who = resolve(get(name_key(node, h.namespace, h.pod)), at, watched)
            if who.uid != h.uid or supply.workload_of(who.workload) != h.workload:
                return True
        return False

    def _supply(self, node: str, ts_ms: int, record: object, changed: bool) -> list[Output]:
        """The node's supply after a record, emitted per resource when it changed (``changed``:
        the record is one that can change it; otherwise only an idle episode that moved, or the
        devices a fresh reading speaks for). A record that emitted before (processed again after
        a crash) emits what it emitted then, and then anything the holders now say differently."""
        t = self.tables
        old = t.node_supply.get(node)
        by = fingerprint(record) if supply.emitted_at(old, ts_ms) else None
        again = supply.again(old, ts_ms, by) if by is not None else None
        state = self._state(node)
        if state is None:
            return list(again or ())
        changed = changed or again is not None  # emitted again: then checked against the holders
        # the node's time (a partition's clock may lag it): its holders now, its readings' age
        at = max(old.stamp(ts_ms) if old is not None else ts_ms, state.last_ms)
        if not changed and isinstance(record, PodRecord):
            changed = self._identities_moved(node, old, at)
        measured = telemetry.measured(state, at, self.life)
        moved = idle_moved(self._stage.changes("alert_state"), node) or (
            old is not None and bool(old.current) and old.measured != measured
        )
        if not changed and not moved:
            return []
        node_rec = t.nodes.get(node)
        product = dict(node_rec.labels).get(LABEL_PRODUCT) if node_rec is not None else None
        devices = [
            supply.AllocatedDevice(
                held.device_uuid,
                held.holders,
                held.measured,
                idle_of(t.alert_state.get(alert_key(node, held.device_uuid))),
                held.mig_profile,
                held.mig,
            )
            for held in self.spine.holding(self._view(node), at)
        ]
        supplies = self.supplied.node_supply(node, product, devices)
        taken = by if by is not None else functools.partial(fingerprint, record)
        new, emit = supply.step(old, node, supplies, ts_ms, taken, measured)
        if new is not None:
            t.node_supply[node] = new
        return list(emit)

    def _supply_tick(self, tick: ClockTick, partition: int) -> list[Output]:
        """The partition's clock: a node whose readings stopped (stale, silent) no longer calls
        its devices idle, without waiting for a record of its own."""
        index = self.tables.partition_nodes.get(partition_key(partition))
        outputs: list[Output] = []
        for node in index.nodes if index is not None else ():
            outputs += self._supply(node, tick.ts_ms, tick, False)
        return outputs

    # --- the node's life: streams.core.flow.spine

    def _state(self, node: str) -> NodeState | None:
        return self.spine.state(node)

    def _put_state(self, node: str, old: NodeState | None, new: NodeState) -> None:
        self.spine.put(node, old, new)

    def _check_scrape(self, scrape: DcgmScrape) -> None:
        if foreign := {s.node for s in scrape.samples} - {scrape.node}:
            raise UnusableRecord(
                f"dcgm.scrape of {scrape.node!r} carries samples of {sorted(foreign)}"
            )

    def _on_scrape(self, scrape: DcgmScrape, *, merge: bool = False) -> list[Output]:
        """``merge``: the scrape is one device's row (older agents): the devices with rows are
        the ones seen before and this one."""
        view = self._view(scrape.node)
        verdict = telemetry.verify(
            scrape, view.known_gpus(), view.host_names, view.inventory.pci_buses
        )
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
                    hostname=cut(", ".join(sorted({s.hostname for s in verdict.refused}))),
                    exporter=cut(" ".join(filter(None, (scrape.exporter, scrape.exporter_pod)))),
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
            event, flags, annotations = self.spine.joins.sample_event(
                self.tables, view, sample, self.policy
            )
            since = sample.since_last
            previous_ms = sample.ts_ms - since.interval_ms if since is not None else None
            outputs += [event, *flags, *self.spine.step_alerts(event, annotations, previous_ms)]
        return outputs

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
                index,
                self._inventory(record.node),
                device_map(new.slices),
                previous=device_map(old.slices),
            )

    def _on_claim(self, record: ResourceClaimRecord) -> None:
        t = self.tables
        key = claim_key(record.node, record.namespace, record.name)
        short = short_name(record.namespace, record.name)
        state = self._state(record.node)
        if record.deleted:
            if key in t.dra_claims:
                del t.dra_claims[key]
            claims = tuple(c for c in state.claims if c != short) if state else ()
        else:
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
        # a change at this time, or one already applied (processed again after a crash: the
        # holders changed then, whatever changed since)
        moved = set(changed) | {b for b, h in current.items() if h.changed_at(record.ts_ms)}
        return list(self.spine.allocation(self._view(node), moved, record.ts_ms))

    def _dra_devices(self, node: str) -> DraDevices:
        node_slices = self.tables.dra_slices.get(node)
        return device_map(node_slices.slices) if node_slices else {}

    def _set_inventory(self, node: str, inventory: Inventory) -> None:
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
        changed[short_name(rec.namespace, rec.name)] = apply_pod(
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
        return {short: self.tables.pods.get(short_key(node, short)) for short in shorts}

    def _settle(
        self, node: str, index: NodePods, changed: dict[str, PodNames | None], now_ms: int
    ) -> None:
        """Prune (pure :func:`settle`), then write back what is kept (the stage passes on only
        what changed); forgotten keys are deleted (a changelog tombstone), never assigned an
        empty value."""
        t = self.tables
        kept, new_index = settle(index, changed, now_ms)
        for short, names in kept.items():
            key = short_key(node, short)
            if names is None:
                if key in t.pods:
                    del t.pods[key]
            else:
                t.pods[key] = names
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
