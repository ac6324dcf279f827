"""The allocation spine's glue: a node's life in the tables, and the events it owes.

Every device a node has is reported on every allocation change (:meth:`Spine.allocation`), at a
heartbeat when no fresh sample speaks for it (:meth:`Spine.beat`), once as stale when the node
falls silent and a last time when it leaves — deleted in the API, or silent past its TTL, both in
its partition's event time (:meth:`Spine.tick`, :meth:`Spine.leave`); a device that no source
of a live node lists any more leaves on its own (:meth:`Spine.sync`). When is decided by
:mod:`streams.core.lifetimes`; what each transition emitted is remembered
(:mod:`streams.core.node.nodestate`), so a record processed again after a crash emits it again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

from contract import codec
from contract.inputs import NodeSupply
from contract.outputs import (
    Alert,
    AttributionEvent,
    Holder,
    NodeStatusRetired,
    Origin,
    Telemetry,
)
from contract.records import Record, replace
from infra.settings import AlertSettings
from streams.core import lifetimes
from streams.core.alerts.alerts import DeviceAlerts, policy_for, step
from streams.core.alerts.episodes import Episode
from streams.core.devices.attribution import DeviceFacts, describes_mig, device_name
from streams.core.devices.holders import NodeDevices
from streams.core.devices.roster import device_ids
from streams.core.flow.nodeview import (
    Joins,
    NodeView,
    bases_of,
    gone_event,
    unplaced_reason,
)
from streams.core.flow.tables import Tables
from streams.core.keys import PER_NODE_TABLES, alert_key, partition_key
from streams.core.lifetimes import Lifetimes
from streams.core.node import nodestate, telemetry
from streams.core.node.nodestate import Departure, GoneNode, NodeState, PartitionNodes
from streams.core.node.pods import holder_annotations
from streams.core.stack.stackalerts import HeldDevice

Event = AttributionEvent | Alert | NodeStatusRetired | NodeSupply


class HeldNow(Record, frozen=True):
    """A device pods hold now (:meth:`Spine.holding`), named as its events name it."""

    device_uuid: str
    holders: tuple[Holder, ...]
    measured: bool  # a fresh trusted reading speaks for it
    mig_profile: str = ""
    mig: bool = False  # a MIG instance (its profile may be unknown)


def fingerprint(record: object) -> str:
    """A record's identity (its content): what tells a record processed again after a crash
    from another record of the same node at the same millisecond. The last record's is
    remembered (several decisions ask for it while one record is processed; a record is
    immutable, and the memo holds it, so the object is the same record)."""
    last = _LAST_FINGERPRINT[0]
    if last is not None and last[0] is record:
        return last[1]
    try:
        content = codec.encode(record)  # a tenth of what ``repr`` costs for a scrape
    except TypeError:  # not a record of the contract
        content = repr(record).encode()
    found = hashlib.sha256(content).hexdigest()[:16]
    _LAST_FINGERPRINT[0] = (record, found)
    return found


_LAST_FINGERPRINT: list[tuple[object, str] | None] = [None]


DEPARTED = "no source of the node lists this device any more"


def _gone_facts(node: str, key: str, device_id: str) -> DeviceFacts:
    return DeviceFacts(node, key.partition("/gi")[0], device_uuid=device_id)


class Beat(Record, frozen=True):
    """A heartbeat the record owes its node (:meth:`Spine.beat_due`): made for the first time
    (``again`` false: remembered by the record's fingerprint ``by``), or made again."""

    state: NodeState
    by: str
    again: bool


class Due(Record, frozen=True):
    """A node a tick judges (:meth:`Spine.tick`): stale (``why`` is ``None``) or gone, and why."""

    node: str
    state: NodeState
    why: str | None


class Spine:
    """A node's life in the tables. Every method that describes devices is handed the node's
    view (:func:`streams.core.flow.nodeview.read_node`), read once per record by its caller."""

    def __init__(
        self,
        tables: Tables,
        life: Lifetimes,
        policy: AlertSettings,
        joins: Joins,
    ) -> None:
        self.tables = tables
        self.joins = joins  # the devices' joins, shared with the sample path
        self.life = life
        self.policy = policy
        #: per partition, the first refused jump ahead not yet confirmed, and whose it was
        self._ahead: dict[int, tuple[int, str]] = {}

    def step_alerts(
        self,
        event: AttributionEvent,
        annotations: Sequence[dict[str, str]] | None = None,
        previous_ms: int | None = None,
    ) -> list[Alert]:
        """The device's alert step after ``event`` (``annotations``: its holders' pod
        annotations, :func:`streams.core.node.pods.holder_annotations`, when the caller has them;
        ``previous_ms``: a sample's previous scrape of the device, where the agent knew it)."""
        t = self.tables
        key = alert_key(event.node, event.device_uuid)
        if annotations is None:
            annotations = holder_annotations(t.pods.get, event.node, event.holders)
        old = t.alert_state.get(key)
        new, alerts = step(old, event, policy_for(self.policy, annotations), previous_ms)
        if new is not old:
            t.alert_state[key] = new
        return alerts

    def describe(
        self,
        view: NodeView,
        key: str,
        facts: DeviceFacts,
        ts_ms: int,
        origin: Origin,
        why: Telemetry,
        holders: bool,
    ) -> list[Event]:
        """One spine event, and what it does to its device's alerts."""
        if holders:
            event = self.joins.spine_event(self.tables, view, key, facts, ts_ms, origin, why)
        else:
            event = gone_event(facts, ts_ms, why)
        return [event, *self.step_alerts(event)]

    def _gone_events(
        self, node: str, devices: Iterable[tuple[str, str]], ts_ms: int, why: str
    ) -> list[Event]:
        """The last events of devices that left, made again (no alert is stepped: what their
        leaving resolved is remembered with it)."""
        gone = telemetry.gone(why, ts_ms)
        return [
            gone_event(_gone_facts(node, key, device_id), ts_ms, gone) for key, device_id in devices
        ]

    def devices(self, view: NodeView, state: NodeState, ts_ms: int) -> Mapping[str, DeviceFacts]:
        """The node's devices at ``ts_ms`` (:func:`streams.core.flow.nodeview.roster`)."""
        return self.joins.roster(view, self._scraped(state, ts_ms))

    # --- state

    def state(self, node: str) -> NodeState | None:
        return self.tables.node_state.get(node)

    def put(self, node: str, old: NodeState | None, new: NodeState) -> None:
        """A node's new state (the tables are staged: a record that moves several of its fields
        writes one changelog record at its end, :mod:`streams.core.flow.staged`)."""
        if new is not old:
            self.tables.node_state[node] = new

    def _index(self, partition: int) -> PartitionNodes:
        return self.tables.partition_nodes.get(partition_key(partition), PartitionNodes())

    def _put_index(self, partition: int, old: PartitionNodes, new: PartitionNodes) -> None:
        key = partition_key(partition)
        if new == old:
            return
        if new.nodes or new.gone or new.clock_ms is not None or new.ticks:
            self.tables.partition_nodes[key] = new
        elif key in self.tables.partition_nodes:
            del self.tables.partition_nodes[key]

    # --- a node's records

    def late(self, node: str, ts_ms: int, partition: int) -> GoneNode | None:
        """The node left at or after ``ts_ms`` and has not come back: the record is late."""
        if self.state(node) is not None:
            return None
        return self._index(partition).left_after(node, ts_ms)

    def heard(self, node: str, ts_ms: int, partition: int) -> None:
        """A record of the node: it is live. A node seen for the first time (or again, after
        it left) joins its partition's index."""
        state = self.state(node)
        if state is None:
            index = self._index(partition)
            self._put_index(partition, index, index.with_node(node))
            self.put(node, None, nodestate.first_record(ts_ms, partition))
            return
        self.put(node, state, nodestate.heard(state, ts_ms, self.life.quantum_ms))

    def _scraped(self, state: NodeState, ts_ms: int) -> tuple[str, ...]:
        """The devices the exporter's last accepted answer had rows for, while it is fresh: a
        device only an old answer listed is no longer one the node has."""
        scrape = state.scrape_at(ts_ms, self.life.quantum_ms)
        fresh = scrape is not None and ts_ms - scrape <= self.life.fresh_ms
        return state.scraped if fresh else ()

    def unknown(self, view: NodeView, state: NodeState, key: str, ts_ms: int) -> Telemetry | None:
        """Why no fresh sample speaks for device ``key`` (``None``: one does)."""
        if view.index is not None and key in view.index.unresolved:
            return telemetry.unplaced(unplaced_reason(view, key))
        why = telemetry.unknown(state, key, ts_ms, self.life)
        if why is not None and why.cause == "no-row" and key in view.mig_parents:
            return replace(
                why,
                reason="a MIG-enabled GPU: dcgm-exporter reports its instances, not the GPU itself",
            )
        if why is not None:
            return telemetry.with_stack(
                why, view.stack_reason, view.stack_intended, view.stack_plane
            )
        return why

    def held(self, view: NodeView, ts_ms: int) -> tuple[HeldDevice, ...]:
        """The devices pods hold on the node now, with their holders (as the spine's events name
        them) and whether a fresh trusted reading speaks for each."""
        return tuple(
            HeldDevice(event.device_uuid, event.holders, measured=measured)
            for event, measured in self.allocated(view, ts_ms)
        )

    def allocated(self, view: NodeView, ts_ms: int) -> list[tuple[AttributionEvent, bool]]:
        """Each device pods hold on the node now, described as the spine's events describe it
        (holders, MIG instance), and whether a fresh trusted reading speaks for it."""
        state = self.state(view.node)
        if state is None:
            return []
        out = []
        for key, facts in self.devices(view, state, ts_ms).items():
            why = self.unknown(view, state, key, ts_ms)
            event = self.joins.spine_event(
                self.tables, view, key, facts, ts_ms, "heartbeat", why or Telemetry()
            )
            if event.holders and event.state != "mig-parent":
                out.append((event, why is None))
        return out

    def holding(self, view: NodeView, ts_ms: int) -> list[HeldNow]:
        """Each device pods hold on the node now — its holders as the spine's events name them,
        whether a fresh trusted reading speaks for it — without describing it in full (what a
        node's supply reads on every change of its holders)."""
        state = self.state(view.node)
        if state is None:
            return []
        out = []
        for key, facts in self.devices(view, state, ts_ms).items():
            holders = self.joins.device_holders(self.tables, view, key, facts, ts_ms)
            if holders:
                measured = self.unknown(view, state, key, ts_ms) is None
                out.append(
                    HeldNow(
                        device_name(facts),
                        holders,
                        measured,
                        facts.mig_profile or "",
                        describes_mig(facts),
                    )
                )
        return out

    def allocation(self, view: NodeView, bases: set[str], ts_ms: int) -> list[Event]:
        """Every device whose holders changed: its holders now; usage not measured since."""
        if not bases:
            return []
        state = self.state(view.node)
        assert state is not None
        outputs: list[Event] = []
        for key, facts in self.devices(view, state, ts_ms).items():
            if not bases & set(bases_of(view, key)):
                continue
            why = self.unknown(view, state, key, ts_ms)
            if why is None:
                why = telemetry.holders_changed(ts_ms, state.scrape_at(ts_ms, self.life.quantum_ms))
            outputs += self.describe(view, key, facts, ts_ms, "allocation", why, True)
        return outputs

    def beat_due(self, node: str, ts_ms: int, record: object) -> Beat | None:
        """The heartbeat the record owes the node, if any: every device no fresh sample speaks
        for is reported (:meth:`beat`). The record that made a beat, processed again, beats
        again."""
        state = self.state(node)
        if state is None:
            return None
        due = lifetimes.heartbeat_due(state.heartbeat_ms, ts_ms, self.life)
        beaten_then = any(b.ts_ms == ts_ms for b in state.beats)
        if not due and not beaten_then:
            return None  # no beat due, none made at this time: no need for the fingerprint
        by = fingerprint(record)
        again = beaten_then and any(b.ts_ms == ts_ms and b.by == by for b in state.beats)
        if not again and not due:
            return None
        return Beat(state, by, again)

    def beat(self, view: NodeView, beat: Beat, ts_ms: int) -> list[Event]:
        """The heartbeat (:meth:`beat_due`): every device no fresh sample speaks for, with its
        holders and why its usage is unknown."""
        state = beat.state
        outputs: list[Event] = []
        for key, facts in self.devices(view, state, ts_ms).items():
            why = self.unknown(view, state, key, ts_ms)
            if why is not None:
                outputs += self.describe(view, key, facts, ts_ms, "heartbeat", why, True)
        if not beat.again:
            self.put(view.node, state, nodestate.beaten(state, ts_ms, beat.by))
        return outputs

    def sync(self, view: NodeView, ts_ms: int) -> list[Event]:
        """Devices no source of the node lists any more: their last events and alert state now;
        a departure at this time already applied is emitted again as it was."""
        node = view.node
        state = self.state(node)
        if state is None:
            return []
        outputs: list[Event] = []
        for d in state.departures:
            if d.ts_ms == ts_ms:  # processed again: the same devices leave again
                outputs += self._gone_events(node, d.devices, ts_ms, DEPARTED)
                outputs += d.alerts
        now = device_ids(self.devices(view, state, ts_ms))
        present = set(now)
        left = tuple(d for d in state.devices if d not in present)
        if not left:
            if now != state.devices:
                self.put(node, state, replace(state, devices=now))
            return outputs
        why = telemetry.gone(DEPARTED, ts_ms)
        emitted: list[Event] = []
        for key, device_id in left:
            facts = _gone_facts(node, key, device_id)
            emitted += self.describe(view, key, facts, ts_ms, "gone", why, False)
            self._drop(alert_key(node, device_id))
        alerts = tuple(o for o in emitted if isinstance(o, Alert))
        departure = Departure(ts_ms, left, alerts)
        keep_ms = self.life.departure_ms
        self.put(node, state, nodestate.departed(state, departure, now, keep_ms))
        return [*outputs, *emitted]

    # --- the partition's clock

    def clock(self, partition: int, ts_ms: int, by: str) -> str | None:
        """A record of ``by`` (a node, or the cluster role) at ``ts_ms`` read from
        ``partition``: accepted (``None``; the partition's clock moves to it), or why it is
        refused — too far ahead of the partition's accepted event time, unconfirmed
        (:func:`streams.core.lifetimes.admit`). A refused record changes no table: the jump it
        waits to have confirmed is held here, in memory (a worker that restarts meets two
        sources again)."""
        index = self._index(partition)
        pending = self._ahead.get(partition)
        ahead, pending = lifetimes.admit(index.clock_ms, ts_ms, by, pending, self.life)
        if pending is None:
            self._ahead.pop(partition, None)
        else:
            self._ahead[partition] = pending
        if ahead is not None:
            return lifetimes.jumped(by, ts_ms, ahead, partition, index.clock_ms, self.life)
        self._put_index(partition, index, index.clocked(ts_ms, self.life.quantum_ms))
        return None

    def tick(self, partition: int, ts_ms: int) -> tuple[list[Event], list[Due]]:
        """What a tick emits again (a tick processed again: what its leaving emitted), and the
        nodes it finds silent too long, in the partition's order: stale, or leaving (with every
        key they have) once they are past their TTL at this tick and the accepted one before
        it. The caller describes them (:meth:`stale`, :meth:`leave`) from their views."""
        index = self._index(partition)
        before = index.tick_before(ts_ms)
        self._put_index(partition, index, index.ticked(ts_ms))
        outputs: list[Event] = []
        for g in index.gone:
            if g.ts_ms == ts_ms:  # processed again: what this tick's leaving emitted
                outputs += [
                    *self._gone_events(g.node, g.devices, ts_ms, g.why),
                    *g.alerts,
                    *g.supply,
                ]
                outputs.append(NodeStatusRetired(g.node))
        due: list[Due] = []
        for node in index.nodes:
            state = self.state(node)
            if state is None:
                continue
            phase = lifetimes.judged_phase(state.last_ms, ts_ms, before, self.life)
            if phase == "gone":
                silent_s = (ts_ms - state.last_ms) / 1000
                why = f"no record from the node's agent for {silent_s:.0f}s (its TTL)"
                due.append(Due(node, state, why))
            elif phase == "stale" and (not state.stale or state.stale_ms == ts_ms):
                due.append(Due(node, state, None))
        return outputs, due

    def stale(self, view: NodeView, state: NodeState, ts_ms: int) -> list[Event]:
        """The node fell silent: every device's events say so, once."""
        why = telemetry.silent(state.last_ms)
        outputs: list[Event] = []
        for key, facts in self.devices(view, state, ts_ms).items():
            outputs += self.describe(view, key, facts, ts_ms, "stale", why, True)
        self.put(view.node, state, replace(state, stale=True, stale_ms=ts_ms))
        return outputs

    def left_again(self, node: str, ts_ms: int, partition: int) -> list[Event]:
        """What the node's leaving at ``ts_ms`` emitted, for a record processed again after it
        left (nothing if it did not leave then)."""
        again = self._index(partition).gone_at(node, ts_ms)
        if again is None:
            return []
        gone_events = self._gone_events(node, again.devices, ts_ms, again.why)
        return [*gone_events, *again.alerts, *again.supply, NodeStatusRetired(node)]

    def leave(
        self,
        view: NodeView,
        state: NodeState,
        ts_ms: int,
        why: str,
        farewell: Sequence[Alert | NodeSupply],
    ) -> list[Event]:
        """The node is gone: its devices' last events, its alerts resolved (``farewell``: what
        its leaving resolves of its node-wide alerts and withdraws of its supply, emitted after
        its devices'), its node-status retired (a tombstone), every key it has deleted
        (:func:`streams.core.lifetimes.node_keys`); its partition remembers what went out."""
        node = view.node
        devices = dict(state.devices)
        devices.update(dict(device_ids(self.devices(view, state, ts_ms))))
        gone = telemetry.gone(why, ts_ms)
        outputs: list[Event] = []
        for key, device_id in sorted(devices.items()):
            facts = _gone_facts(node, key, device_id)
            outputs += self.describe(view, key, facts, ts_ms, "gone", gone, False)
        outputs += farewell
        self._forget(node, state, view.index, devices.values())
        index = self._index(state.partition)
        alerts = tuple(o for o in outputs if isinstance(o, Alert))
        supply = tuple(o for o in outputs if isinstance(o, NodeSupply))
        left = GoneNode(node, ts_ms, why, tuple(sorted(devices.items())), alerts, supply)
        self._put_index(state.partition, index, index.left(left))
        return [*outputs, NodeStatusRetired(node)]  # its node-status key goes too

    def _drop(self, key: str, table: str = "alert_state") -> None:
        mapping = getattr(self.tables, table)
        if key in mapping:
            del mapping[key]

    def _forget(
        self, node: str, state: NodeState, index: NodeDevices | None, device_ids: Iterable[str]
    ) -> None:
        t = self.tables
        node_pods = t.node_pods.get(node)
        keys = lifetimes.node_keys(
            node,
            bases=index.bases if index is not None else (),
            pod_names=node_pods.names if node_pods is not None else (),
            device_ids=device_ids,
            claims=state.claims,
        )
        for table in PER_NODE_TABLES:
            for key in keys.per_node:
                self._drop(key, table)
        for table, table_keys in (
            ("slot_holders", keys.slot_holders),
            ("pods", keys.pods),
            ("alert_state", keys.alert_state),
            ("dra_claims", keys.dra_claims),
        ):
            for key in table_keys:
                self._drop(key, table)


def idle_moved(changes: Iterable[tuple[str, object, object]], node: str) -> bool:
    """Some device of ``node`` had its idle episode move: the supply's word on it may have
    moved (``changes``: the record's writes to ``alert_state``, each key's value before and
    after, :meth:`streams.core.flow.staged.Stage.changes`)."""
    prefix = node + "/"
    for key, old, new in changes:
        if key.startswith(prefix):
            assert isinstance(old, DeviceAlerts | None)
            assert isinstance(new, DeviceAlerts | None)
            if idle_of(old) != idle_of(new) and _idle(old) != _idle(new):
                return True
    return False


def idle_of(alerts: DeviceAlerts | None) -> Episode | None:
    """A device's idle episode as its alert state holds it (equal ones: no move to look for; the
    supply reads only when it began, and whose: :func:`streams.core.demand.supply.idle_since`)."""
    return alerts.idle if alerts is not None else None


def _idle(alerts: DeviceAlerts | None) -> Episode | None:
    """A device's idle episode, firing or not: whether the supply's word on it moved."""
    idle = alerts.idle if alerts is not None else None
    return replace(idle, firing=False) if idle is not None and idle.firing else idle
