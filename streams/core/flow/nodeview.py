"""What every event of one node reads, read once; and the events built from it. Pure glue.

:func:`read_node` gathers a node's context from the tables (device index, inventory, labels,
DRA slices and claims, pod resolver) once per record. :func:`sample_event` joins one accepted
sample with its device's holders as of the sample's time; :func:`spine_event` describes a
device without a sample (allocation change, heartbeat, stale, gone). Both go through the same
decisions (:mod:`streams.core.devices.attribution`), so a device reads the same with or without
telemetry — only the usage differs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contract.inputs import DcgmSample, DeviceAssignment, DeviceTaintRuleRecord, ResourceClaimRecord
from contract.outputs import (
    AttributionEvent,
    Holder,
    NodeStatus,
    Origin,
    PlaneName,
    Telemetry,
)
from contract.records import Record, replace
from infra.settings import AlertSettings
from streams.core.devices.allocation import through_dra, via_dra
from streams.core.devices.attribution import (
    DeviceContext,
    DeviceFacts,
    Flag,
    Holding,
    PodIdentity,
    accounted_holding,
    describe,
    described,
    describes_mig,
    event_of,
    exporter_view,
    holding,
    sample_holding,
    sample_reading,
    shape_of,
)
from streams.core.devices.dra import device_map, place, placed_keys
from streams.core.devices.healthsources import rule_words, taint_words
from streams.core.devices.holders import DraDevices, NodeDevices, dra_ref, unplaced_dra
from streams.core.devices.identity import EMPTY_INVENTORY, Inventory, device_key, mig_uuid_for
from streams.core.devices.roster import devices, known_gpus
from streams.core.devices.sharing import LABEL_PRODUCT, NodeSharing, sharing_from_labels
from streams.core.flow.deviceframe import Frame, Frames, frame_of
from streams.core.flow.tables import Tables
from streams.core.keys import claim_key, holder_key, name_key, partition_key
from streams.core.node.pods import holder_annotations, resolve
from streams.core.node.telemetry import LABEL_HOSTNAME
from streams.core.stack.operatorstack import telemetry_plane


class NodeView(Record, frozen=True):
    node: str
    index: NodeDevices | None
    mig_parents: frozenset[str]  # GPUs with MIG instances (index, inventory)
    inventory: Inventory
    node_sharing: NodeSharing | None
    product: str | None
    host_names: tuple[str, ...]  # names the node's exporter may report as its Hostname
    resolve_pod: Callable[[str, str, int], PodIdentity]
    claim: Callable[[str], ResourceClaimRecord | None]
    dra_devices: DraDevices
    dra_keys: frozenset[str]  # device keys (GPU UUIDs) a DRA driver publishes on this node
    dra_lost: tuple[str, ...]  # held DRA devices no slice places (not MIG): any GPU may be one
    #: the GPU stack's word on the node's telemetry (its last node-status): why it is unknown,
    #: and whether the exporter is off on purpose
    stack_reason: str | None = None
    stack_intended: bool = False
    stack_plane: PlaneName | None = None  # the first broken boundary behind stack_reason
    #: the live DeviceTaintRules of the node's partition (:mod:`streams.core.devices.taintrules`)
    taint_rules: tuple[DeviceTaintRuleRecord, ...] = ()
    #: the node's records this view was read from (all but the live claim and pod lookups):
    #: what a device's frame (:mod:`streams.core.flow.deviceframe`) checks it was read from
    sig: tuple[object, ...] = ()

    def known_gpus(self) -> frozenset[str]:
        unplaced = set()
        for base in self.index.unresolved if self.index is not None else ():
            ref = dra_ref(base)
            device = self.dra_devices.get(ref) if ref is not None else None
            if device is not None and device.parent_uuid:
                unplaced.add(device.parent_uuid)
        return known_gpus(self.inventory, self.index, self.dra_keys, unplaced)


def read_node(t: Tables, node: str) -> NodeView:
    node_rec = t.nodes.get(node)
    labels = dict(node_rec.labels) if node_rec else {}
    index = t.node_devices.get(node)
    claims, pods = t.dra_claims, t.pods
    watched = node in t.node_pods

    def claim(ref: str) -> ResourceClaimRecord | None:
        namespace, _, name = ref.partition("/")
        return claims.get(claim_key(node, namespace, name))

    def resolve_pod(namespace: str, name: str, ts_ms: int) -> PodIdentity:
        return resolve(pods.get(name_key(node, namespace, name)), ts_ms, watched)

    node_slices = t.dra_slices.get(node)
    dra = device_map(node_slices.slices) if node_slices else {}
    if index is not None and index.remembered:  # held devices no live slice lists
        dra = {**index.remembered_devices(), **dra}
    stored_inventory = t.inventories.get(node)
    inventory = stored_inventory if stored_inventory is not None else EMPTY_INVENTORY
    node_stack = t.node_stack.get(node)
    state = t.node_state.get(node)
    rules = t.device_taint_rules.get(partition_key(state.partition)) if state is not None else None
    taint_rules = rules.rules if rules is not None else ()
    parents = {m.parent_uuid for m in inventory.migs.values()}
    if index is not None:
        parents |= {k.partition("/gi")[0] for k in index.keys if "/gi" in k}
        parents |= set(index.unplaced_mig)
    return NodeView(
        node=node,
        index=index,
        mig_parents=frozenset(parents),
        inventory=inventory,
        node_sharing=sharing_from_labels(labels) if node_rec else None,
        product=labels.get(LABEL_PRODUCT),
        host_names=tuple(n for n in (node, labels.get(LABEL_HOSTNAME, "")) if n),
        resolve_pod=resolve_pod,
        claim=claim,
        dra_devices=dra,
        dra_keys=placed_keys(dra, inventory) if dra else frozenset(),
        dra_lost=unplaced_dra(index) if index is not None else (),
        taint_rules=taint_rules,
        sig=(node_rec, index, node_slices, stored_inventory, watched, taint_rules),
        **_stack_word(node_stack.last if node_stack is not None else None),
    )


def with_stack(view: NodeView, stack: NodeStatus | None) -> NodeView:
    """The view after the node's GPU stack was judged anew (``stack``: its last node-status)."""
    return replace(view, **_stack_word(stack))


def _stack_word(stack: NodeStatus | None) -> dict[str, Any]:
    """What a view keeps of the node's last node-status (:class:`NodeView`'s ``stack_*``)."""
    if stack is None:
        return {"stack_reason": None, "stack_intended": False, "stack_plane": None}
    return {
        "stack_reason": stack.telemetry_reason,
        "stack_intended": stack.telemetry_disabled,
        "stack_plane": telemetry_plane(stack.planes),
    }


def roster(view: NodeView, scraped: tuple[str, ...]) -> Mapping[str, DeviceFacts]:
    """The node's devices (:func:`streams.core.devices.roster.devices`) as the view and the
    devices its last fresh scrape listed (``scraped``) say."""
    return devices(
        view.node,
        view.inventory,
        view.index,
        view.dra_devices,
        view.dra_keys,
        scraped,
        view.product,
    )


def bases_of(view: NodeView, key: str) -> tuple[str, ...]:
    """The base device IDs that occupy device ``key`` (a held ID we cannot place is its own)."""
    if view.index is None:
        return ()
    if key in view.index.unresolved:
        return (key,)
    return view.index.keys.get(key, ())


def holder_rows(
    t: Tables, view: NodeView, key: str, ts_ms: int
) -> tuple[DeviceAssignment, ...] | None:
    """The device's holders as of ``ts_ms``; ``None`` when nothing remembered covers that time."""
    rows: list[DeviceAssignment] = []
    for base in bases_of(view, key):
        holders = t.slot_holders.get(holder_key(view.node, base))
        if holders is None:
            continue
        at = holders.at(ts_ms)
        if at is None:
            return None
        rows.extend(at)
    return tuple(rows)


PREDATES = "the sample predates the holder history of this device: holders unknown at its time"


def _context(
    view: NodeView,
    key: str,
    gpu_uuid: str,
    mig_gi: int | None,
    rows: tuple[DeviceAssignment, ...] | None,
) -> DeviceContext:
    index = view.index
    unplaced_key = index is not None and key in index.unresolved
    mig_parent = (
        index is not None and mig_gi is None and not unplaced_key and gpu_uuid in view.mig_parents
    )
    if unplaced_key:
        unplaced: tuple[str, ...] = ()
    elif index is not None and mig_gi is not None:
        unplaced = tuple(text for _, text in index.unplaced_mig.get(gpu_uuid, ()))
    else:
        unplaced = view.dra_lost
    mig = mig_uuid_for(gpu_uuid, mig_gi, view.inventory) if mig_gi is not None else None
    return DeviceContext(
        node_sharing=view.node_sharing,
        advertised=index.advertised.get(key) if index is not None else None,
        mig_uuid=mig,
        mig_parent=mig_parent,
        holders_known=index is not None and rows is not None,
        resolve_pod=view.resolve_pod,
        claim=view.claim,
        dra_devices=view.dra_devices,
        dra_device=key in view.dra_keys or via_dra(key),
        unplaced=unplaced,
        placement_notes=_remembered_notes(index, key),
        taints=(
            (
                *taint_words(view.dra_devices.values(), mig or gpu_uuid),
                *rule_words(view.taint_rules, view.dra_devices, mig or gpu_uuid),
            )
            if key in view.dra_keys
            else ()
        ),
        allocatable=index.allocatable if index is not None else (),
        holders_note=(
            PREDATES
            if index is not None
            else "no PodResources snapshot from this node yet: holders unknown"
        ),
    )


def _remembered_notes(index: NodeDevices | None, key: str) -> tuple[str, ...]:
    if index is None or not index.remembered:
        return ()
    remembered = {base for base, _ in index.remembered}
    kept = [b for b in index.keys.get(key, ()) if b in remembered]
    if not kept:
        return ()
    return (
        f"DRA device(s) {', '.join(kept)} kept where the node's ResourceSlices last placed them: "
        "no slice lists them now (their driver is publishing again, e.g. after a kubelet "
        "restart) and their claims are still allocated",
    )


def sample_event(
    t: Tables, view: NodeView, sample: DcgmSample, thresholds: AlertSettings
) -> tuple[AttributionEvent, tuple[Flag, ...], Sequence[dict[str, str]]]:
    """One accepted sample joined with its device's holders at the sample's time (health marks
    judged by the alerts' ``thresholds``), and its holders' pod annotations (for the alert
    step)."""
    event, flags, annotations, _ = _sample_join(t, view, sample, thresholds)
    return event, flags, annotations


def _sample_join(
    t: Tables, view: NodeView, sample: DcgmSample, thresholds: AlertSettings
) -> tuple[
    AttributionEvent,
    tuple[Flag, ...],
    tuple[dict[str, str], ...],
    tuple[tuple[DeviceAssignment, ...] | None, DeviceContext, Holding],
]:
    """:func:`sample_event`, and the join it was made from (rows, context, holding)."""
    key = device_key(sample.uuid, sample.mig_instance_id)
    rows = holder_rows(t, view, key, sample.ts_ms)
    ctx = _context(view, key, sample.uuid, sample.mig_instance_id, rows)
    held = sample_holding(sample, rows or (), ctx)
    facts, reading = sample_reading(sample, ctx, thresholds)
    shape = shape_of(rows or (), ctx, held, describes_mig(facts))
    event, flags = event_of(facts, sample.ts_ms, reading, held, shape, exporter_view(sample, shape))
    annotations = tuple(holder_annotations(t.pods.get, view.node, event.holders))
    return event, flags, annotations, (rows, ctx, held)


def spine_event(
    t: Tables,
    view: NodeView,
    key: str,
    facts: DeviceFacts,
    ts_ms: int,
    origin: Origin,
    telemetry: Telemetry,
) -> AttributionEvent:
    """A device's state without a sample, with its holders at ``ts_ms``."""
    rows = holder_rows(t, view, key, ts_ms)
    ctx = _context(view, key, facts.gpu_uuid, facts.mig_instance_id, rows)
    return describe(facts, ts_ms, rows or (), ctx, origin, telemetry)


def gone_event(facts: DeviceFacts, ts_ms: int, telemetry: Telemetry) -> AttributionEvent:
    """The last event of a device that is gone: no holders, whatever the tables say."""
    ctx = DeviceContext(holders_known=False, holders_note=telemetry.reason or "gone")
    return describe(facts, ts_ms, (), ctx, "gone", telemetry)


def device_holders(
    t: Tables, view: NodeView, key: str, facts: DeviceFacts, ts_ms: int
) -> tuple[Holder, ...]:
    """The device's holders at ``ts_ms`` as its spine event would list them, without the
    event: what a node's supply reads (identities, resources, device IDs, claims), joined
    without the accounting (:func:`streams.core.devices.attribution.holding`,
    ``allocation_share`` ``None``). The supply never reads the share."""
    rows = holder_rows(t, view, key, ts_ms)
    if not rows:
        return ()  # nobody holds it, or its holders are unknown: no holder to list either way
    ctx = _context(view, key, facts.gpu_uuid, facts.mig_instance_id, rows)
    return holding(facts, ts_ms, rows, ctx)


class Joins:
    """:func:`roster`, :func:`sample_event`, :func:`spine_event` and :func:`device_holders`,
    memoized: the same answers, read from what a device's events share while their inputs stay
    the same (its frame, :mod:`streams.core.flow.deviceframe`) and from a node's roster kept per
    view and scrape. A property test holds every answer equal to the plain function's."""

    def __init__(self) -> None:
        self.frames = Frames()

    def forget(self, node: str) -> None:
        """The node left: what was kept for it goes."""
        self.frames.forget(node)

    def roster(self, view: NodeView, scraped: tuple[str, ...]) -> Mapping[str, DeviceFacts]:
        """:func:`roster`; the one kept for the node when its view was read from the same
        records (its view token) and the same scrape."""
        frames = self.frames
        if not view.sig:
            return roster(view, scraped)
        token = frames.token(view.node, view.sig)
        kept = frames.roster(view.node, token, scraped)
        if kept is not None:
            return kept
        out = roster(view, scraped)
        frames.keep_roster(view.node, token, scraped, out)
        return out

    def sample_event(
        self, t: Tables, view: NodeView, sample: DcgmSample, thresholds: AlertSettings
    ) -> tuple[AttributionEvent, tuple[Flag, ...], Sequence[dict[str, str]]]:
        """:func:`sample_event`; from the join kept for the device (by an earlier sample, or by
        its node's supply or allocation events) while its inputs are the same."""
        key = device_key(sample.uuid, sample.mig_instance_id)
        frame = self._frame_at(t, view, key, sample.ts_ms)
        if frame is not None:
            shape, said = self.frames.sampled(view.node, key, frame, sample)
            facts, reading = sample_reading(sample, frame.ctx, thresholds)
            event, flags = event_of(facts, sample.ts_ms, reading, frame.held, shape, said)
            return event, flags, frame.annotations
        event, flags, annotations, (rows, ctx, held) = _sample_join(t, view, sample, thresholds)
        self._keep_frame(t, view, key, sample.ts_ms, rows, (ctx, held, annotations))
        return event, flags, annotations

    def spine_event(
        self,
        t: Tables,
        view: NodeView,
        key: str,
        facts: DeviceFacts,
        ts_ms: int,
        origin: Origin,
        telemetry: Telemetry,
    ) -> AttributionEvent:
        """:func:`spine_event`; from the device's frame when it holds, as :meth:`device_holders`
        reads it."""
        frame = self._joined(t, view, key, facts, ts_ms)
        if frame is None:
            return spine_event(t, view, key, facts, ts_ms, origin, telemetry)
        shape = self.frames.shape(view.node, key, frame, describes_mig(facts))
        return described(facts, ts_ms, frame.held, shape, origin, telemetry)

    def device_holders(
        self, t: Tables, view: NodeView, key: str, facts: DeviceFacts, ts_ms: int
    ) -> tuple[Holder, ...]:
        """:func:`device_holders`; from the device's frame when it holds — its events' holders,
        allocation shares included (the supply never reads them), the same tuple while the
        frame lasts."""
        frame = self._joined(t, view, key, facts, ts_ms)
        if frame is None:
            return device_holders(t, view, key, facts, ts_ms)
        return frame.held.holders if frame.rows else ()

    def _frame_at(self, t: Tables, view: NodeView, key: str, ts_ms: int) -> Frame | None:
        """The device's kept frame if it holds for a join at ``ts_ms`` of this view."""
        if not view.sig:
            return None
        token = self.frames.token(view.node, view.sig)
        return self.frames.get(view.node, key, token, ts_ms, t.slot_holders.get, t.pods.get)

    def _keep_frame(
        self,
        t: Tables,
        view: NodeView,
        key: str,
        ts_ms: int,
        rows: tuple[DeviceAssignment, ...] | None,
        join: tuple[DeviceContext, Holding, tuple[dict[str, str], ...]],
    ) -> Frame | None:
        """Keep a fresh join as the device's frame, when it may be kept
        (:func:`streams.core.flow.deviceframe.frame_of`)."""
        if not view.sig:
            return None
        frames = self.frames
        token = frames.token(view.node, view.sig)
        bases = bases_of(view, key)
        kept = frame_of(view.node, token, bases, rows, join, ts_ms, t.slot_holders.get, t.pods.get)
        if kept is not None:
            frames.put(view.node, key, kept)
        return kept

    def _joined(
        self, t: Tables, view: NodeView, key: str, facts: DeviceFacts, ts_ms: int
    ) -> Frame | None:
        """The device's frame for a description at ``ts_ms``: the one kept if it holds, else
        the join made afresh and kept, when a frame may be kept (not through a DRA claim,
        holders known, a time the answer no longer depends on) — so the node's next records and
        the device's next sample read it instead of joining again. ``None``: join without a
        frame — also for a device described as MIG by its profile alone: a frame decides MIG as
        samples do, by the GPU instance."""
        if not view.sig or (facts.mig_instance_id is None and facts.mig_profile):
            return None
        frame = self._frame_at(t, view, key, ts_ms)
        if frame is not None:
            return frame
        rows = holder_rows(t, view, key, ts_ms)
        if not rows or through_dra(rows):
            # unknown or DRA: no frame for these (frame_of); nobody: the plain path is cheaper
            return None
        ctx = _context(view, key, facts.gpu_uuid, facts.mig_instance_id, rows)
        held = accounted_holding(facts, ts_ms, rows, ctx)
        annotations = tuple(holder_annotations(t.pods.get, view.node, held.holders))
        return self._keep_frame(t, view, key, ts_ms, rows, (ctx, held, annotations))


def unplaced_reason(view: NodeView, key: str) -> str:
    """Why a held device has no telemetry of its own: it is on no GPU the exporter reports on."""
    ref = dra_ref(key)
    if ref is not None:
        placement = place(ref, view.dra_devices, view.inventory)
        describe_ = getattr(placement, "describe", None)
        text = describe_() if callable(describe_) else getattr(placement, "reason", "")
        return f"held DRA device {key} is not placeable on a GPU instance: {text}"
    return (
        f"held device {key} is on no GPU the node's inventory lists: its usage cannot be "
        "joined (no NVML inventory for this device)"
    )
