"""Attribution: one DCGM sample joined with the device's holders at the sample's time. Pure.

Honesty rules (docs/ARCHITECTURE.md): usage is device-wide; on a shared device every holder is
listed with its *allocation* share and nobody is credited with a usage number; MIG instances are
devices of their own and their utilization comes from the profiling field, never GPU_UTIL.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from contract.inputs import (
    AllocatableDevice,
    DcgmSample,
    DeviceAssignment,
    DeviceUsage,
    DraDevice,
    ResourceClaimRecord,
    ResourceHealth,
)
from contract.outputs import (
    Activity,
    Allocation,
    AttributionEvent,
    ClaimedPod,
    CreditScope,
    ExporterMisattribution,
    ExporterMode,
    ExporterVerdict,
    ExporterView,
    Health,
    HealthSaid,
    Holder,
    MigInstance,
    Origin,
    PodShare,
    Sharing,
    State,
    Telemetry,
    UidStatus,
    Usage,
    UsageUncredited,
    Workload,
)
from contract.records import Record, replace
from infra.settings import AlertSettings
from streams.core.devices.accounting import Accounting, Held, account, claim_unit, device_id_unit
from streams.core.devices.allocation import through_dra, via_dra
from streams.core.devices.dra import ClaimView, DeviceRef, claim_view, split_row
from streams.core.devices.efficiency import activity
from streams.core.devices.health import health
from streams.core.devices.healthsources import allocatable_words, judged, kubelet_words
from streams.core.devices.identity import parse_device_id
from streams.core.devices.measured import credit
from streams.core.devices.sharing import Advertised, NodeSharing, SharingDecision, decide


class PodIdentity(Record, frozen=True):
    """What our own join (PodResources x pod watch) knows of a holder at a time."""

    uid: str | None
    status: UidStatus
    workload: Workload | None = None
    #: the kubelet's word on the pod's allocated devices (its status), at the same time
    health: tuple[ResourceHealth, ...] = ()


PodResolver = Callable[[str, str, int], PodIdentity]
ClaimLookup = Callable[[str], ResourceClaimRecord | None]  # "namespace/name" → claim


def no_pod_watch(namespace: str, pod: str, ts_ms: int) -> PodIdentity:
    return PodIdentity(None, "no-pod-watch")


def no_claims(ref: str) -> ResourceClaimRecord | None:
    return None


@dataclass(frozen=True, slots=True)
class DeviceContext:
    """What the worker's tables know about the sample's device besides its holders."""

    node_sharing: NodeSharing | None = None
    advertised: Advertised | None = None  # how the kubelet advertises this very device
    mig_uuid: str | None = None
    mig_parent: bool = False
    holders_known: bool = True
    resolve_pod: PodResolver = no_pod_watch
    # DRA: the node's claims and slice devices, whether this device is one a DRA driver
    # publishes, and DRA MIG devices held on it that cannot be placed on an instance
    claim: ClaimLookup = no_claims
    dra_devices: Mapping[DeviceRef, DraDevice] = field(default_factory=dict)
    dra_device: bool = False
    unplaced: tuple[str, ...] = ()
    holders_note: str = "no PodResources snapshot from this node yet: holders unknown"
    #: how a held device was placed when not by a live slice (said in the event's notes)
    placement_notes: tuple[str, ...] = ()
    #: what the taints on the device's DRA device say (:mod:`streams.core.devices.healthsources`)
    taints: tuple[HealthSaid, ...] = ()
    #: the node's allocatable devices (``GetAllocatableResources``): a held ID missing is unhealthy
    allocatable: tuple[AllocatableDevice, ...] = ()


def _usage(sample: DcgmSample) -> Usage:
    if sample.mig_instance_id is not None:
        active = sample.gr_engine_active
        util = None if active is None else round(active * 100.0, 2)
        source = "DCGM_FI_PROF_GR_ENGINE_ACTIVE" if active is not None else None
        scope = "mig-instance"
    elif sample.util_pct is not None:
        util, source, scope = sample.util_pct, "DCGM_FI_DEV_GPU_UTIL", "device"
    elif sample.gr_engine_active is not None:
        util = round(sample.gr_engine_active * 100.0, 2)
        source, scope = "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "device"
    else:
        util, source, scope = None, None, "device"
    return Usage(
        scope=scope,  # type: ignore[arg-type]
        util_pct=util,
        util_source=source,
        fb_used_mib=sample.fb_used_mib,
        fb_free_mib=sample.fb_free_mib,
        power_w=sample.power_w,
        temp_c=sample.temp_c,
        xid=sample.xid,
    )


def _holds(
    rows: Sequence[DeviceAssignment],
    replicas: int | None,
    who: Sequence[PodIdentity],
    views: Mapping[DeviceAssignment, ClaimView | None],
) -> list[Held]:
    """Each row as a hold of one allocation unit (:mod:`streams.core.devices.accounting`), with the
    identity of its pod (``who``, row by row)."""
    out = []
    for a, identity in zip(rows, who, strict=True):
        if via_dra(a.resource):
            view = views.get(a)
            identity = _reserved_identity(a.pod, identity, view)
            unit = claim_unit(
                a.claim, a.share_id or a.device_id, view.allocation_share if view else None
            )
        else:
            unit = device_id_unit(
                a.device_id, parse_device_id(a.device_id).replica is not None, replicas
            )
        out.append(
            Held(
                a.namespace,
                a.pod,
                a.container,
                unit,
                identity.uid,
                identity.status,
                identity.workload,
                a.claim,
            )
        )
    return out


def _holders(
    rows: Sequence[DeviceAssignment], held: Sequence[Held], shares: Accounting
) -> tuple[Holder, ...]:
    grouped: dict[tuple[str, str, str, str, str], list[DeviceAssignment]] = defaultdict(list)
    for a in rows:
        grouped[(a.namespace, a.pod, a.container, a.resource, a.claim)].append(a)
    identity = {(h.namespace, h.pod, h.container, h.claim): h for h in held}
    out = []
    for (ns, pod, container, resource, claim), rows_held in sorted(grouped.items()):
        ids = [a.device_id for a in rows_held]
        h = identity[(ns, pod, container, claim)]
        out.append(
            Holder(
                ns,
                pod,
                container,
                resource,
                tuple(sorted(ids)),
                len(ids),
                shares.containers.get((ns, pod, container, claim)),
                h.uid,
                h.uid_status,
                h.workload,
                claim or None,
            )
        )
    return tuple(out)


def _reserved_identity(pod: str, who: PodIdentity, view: ClaimView | None) -> PodIdentity:
    """The UID the claim's ``reservedFor`` names for the pod wins over the pod watch's."""
    if view is None:
        return who
    reserved = next((c for c in view.consumers if c.name == pod), None)
    if reserved is not None and reserved.uid != who.uid:
        # the pod watch knows another life of the name (or none yet): its workload is not
        # this pod's
        return PodIdentity(reserved.uid, "resolved", None)
    return who


def _dra_views(
    rows: Sequence[DeviceAssignment], ctx: DeviceContext
) -> tuple[
    list[DeviceAssignment], list[DeviceAssignment], dict[DeviceAssignment, ClaimView | None]
]:
    """Split DRA rows into holders and observers (``adminAccess`` claims), with each holder
    row's claim view (``None``: the claim is not known on this node yet)."""
    kept: list[DeviceAssignment] = []
    observers: list[DeviceAssignment] = []
    views: dict[DeviceAssignment, ClaimView | None] = {}
    for a in rows:
        ref = split_row(a.resource, a.device_id)
        if ref is None:
            kept.append(a)
            continue
        claim = ctx.claim(a.claim) if a.claim else None
        view = claim_view(claim, ref, ctx.dra_devices.get(ref), a.share_id) if claim else None
        if view is not None and view.observer:
            observers.append(a)
            continue
        kept.append(a)
        views[a] = view
    return kept, observers, views


def _dra_decision(
    rows: Sequence[DeviceAssignment],
    views: Mapping[DeviceAssignment, ClaimView | None],
    is_mig: bool,
) -> SharingDecision:
    """Sharing of a device held through DRA claims: the claims' driver config names the mode;
    several pods or several claims on one device share it."""
    pods = {(a.namespace, a.pod) for a in rows}
    claims = sorted({a.claim for a in rows})
    modes = sorted({v.sharing for v in views.values() if v is not None and v.sharing})
    notes: list[str] = []
    unknown = sorted({a.claim or "?" for a, v in views.items() if v is None})
    if unknown:
        notes.append(
            f"claim(s) {', '.join(unknown)} not seen allocated on this node yet: "
            "their sharing config is unknown"
        )
    shared = len(pods) > 1 or len(claims) > 1
    mode = modes[0] if len(modes) == 1 else None
    if len(modes) > 1:
        notes.append(f"claims on this device configure different sharing: {', '.join(modes)}")
    sharing: Sharing
    if len(modes) > 1:
        sharing = "unknown"
    elif mode == "time-slicing":
        sharing = "mig+time-slicing" if is_mig else "time-slicing"
    elif mode == "mps":
        sharing = "unknown" if is_mig else "mps"
        if is_mig:
            notes.append("MPS configured on a MIG device: reported as unknown")
    elif mode is not None:
        sharing = "unknown"
        notes.append(f"claim config names sharing strategy {mode!r}")
    elif shared:
        sharing = "unknown"
        notes.append(
            f"{len(pods)} pod(s) hold this device through DRA claim(s) {', '.join(claims)} "
            "whose config names no sharing strategy: shared, strategy unknown"
        )
    else:
        sharing = "mig" if is_mig else "none"
    return SharingDecision(sharing, None, tuple(notes))


def _held_through(holders: Sequence[Holder]) -> Mapping[tuple[str, str], frozenset[str]]:
    """Each holder pod's DRA claims (a pod without one is absent)."""
    through: dict[tuple[str, str], set[str]] = defaultdict(set)
    for h in holders:
        if h.claim:
            through[h.namespace, h.pod].add(h.claim)
    if not through:
        return _NO_CLAIMS  # device-plugin holders (most devices): one shared empty mapping
    return {who: frozenset(claims) for who, claims in through.items()}


_NO_CLAIMS: Mapping[tuple[str, str], frozenset[str]] = MappingProxyType({})


def _exporter_view(
    sample: DcgmSample,
    holding: Collection[tuple[str, str]],
    held_through: Mapping[tuple[str, str], frozenset[str]],
    state: State,
) -> tuple[ExporterView, tuple[ClaimedPod, ...]]:
    """``holding``: the holders' pods (namespace, name); ``held_through``: their claims."""
    claims = tuple(
        dict.fromkeys(
            ClaimedPod(c.namespace, c.pod, c.container, c.dra_claim) for c in sample.exporter_claims
        )
    )
    mode = _mode(sample, claims)
    if state == "unknown":
        reason = "holders unknown yet: the claim cannot be checked"
        return ExporterView(claims, False, reason, mode, "unchecked"), ()
    strangers = tuple(c for c in claims if (c.namespace, c.pod) not in holding)
    wrong_claim = [
        c
        for c in claims
        if c.claim
        and held_through.get((c.namespace, c.pod))
        and c.claim not in held_through[c.namespace, c.pod]
    ]
    trusted = False
    verdict: ExporterVerdict
    if strangers:
        reason = "exporter credits a pod that holds no slot here"
        verdict = "stranger"
    elif wrong_claim:
        c = wrong_claim[0]
        through = ", ".join(sorted(held_through[c.namespace, c.pod]))
        reason = (
            f"exporter names DRA claim {c.claim} for {c.namespace}/{c.pod}, "
            f"which holds this device through {through}"
        )
        verdict = "wrong-claim"
    elif not claims:
        reason = sys.intern(  # one object per wording, not one per device
            "exporter credited no pod"
            + (f" although {len(holding)} pod(s) hold slots" if holding else "")
        )
        trusted, verdict = not holding, "uncredited" if holding else "trusted"
    elif state == "shared" and len(holding) > 1:
        how = (
            "identical per-pod copies of one device-wide row"
            if len(claims) > 1
            else "one arbitrary holder stamped on a device-wide value"
        )
        reason, verdict = f"shared device: {how}", "shared-device"
    else:
        reason, trusted, verdict = "exporter's pod is the only holder", True, "trusted"
    if mode == "per-process" and _per_pod_rows(sample):
        if verdict == "shared-device":  # one device-wide row per tenant for the other fields
            trusted, verdict = False, "per-process"
            reason = (
                "per-pod rows read as per-process measurements, credited by our own join; the "
                "device's own row is the device-wide figure, the other fields per-pod copies of it"
            )
    elif mode == "per-process":
        trusted = False
        reason = (
            "per-process rows (values differ per pod: "
            + ", ".join(sample.exporter_split_fields)
            + ") are not a device-wide "
            "reading and are left out; unreliable under MPS"
        )
        # a pod that holds nothing here is the worse lie: it stays the verdict
        verdict = verdict if verdict in ("stranger", "wrong-claim") else "per-process"
    return ExporterView(claims, trusted, reason, mode, verdict), strangers


#: the exporter's word on a sample's pods (:func:`exporter_view`): its view, and the pods it
#: credits that hold no slot here
ExporterWord = tuple[ExporterView, tuple[ClaimedPod, ...]]
#: what an event raises beside itself: the exporter's pods that hold no slot, and per-process
#: readings credited to nobody
Flag = ExporterMisattribution | UsageUncredited


def exporter_view(sample: DcgmSample, shape: Shape) -> ExporterWord:
    """What the exporter's pod labels on ``sample`` say, checked against the holders its
    device's events are shaped by: it reads only the sample's claims, split fields and whether
    it came with per-pod rows (:func:`exporter_labels`), so a caller may keep it for the next
    sample of the device that carries the same."""
    return _exporter_view(sample, shape.pods_held, shape.held_through, shape.state)


def exporter_labels(sample: DcgmSample) -> tuple[object, ...]:
    """All that :func:`exporter_view` reads of a sample."""
    return (sample.exporter_claims, sample.exporter_split_fields, _per_pod_rows(sample))


def _per_pod_rows(sample: DcgmSample) -> bool:
    """Whether the exporter printed per-pod rows of per-process values for this device."""
    return sample.usage is not None and sample.usage.source == "exporter"


def _mode(sample: DcgmSample, claims: Sequence[ClaimedPod]) -> ExporterMode:
    if sample.exporter_split_fields or _per_pod_rows(sample):
        return "per-process"
    if len(claims) > 1:
        return "per-pod-copies"
    return "single" if claims else "none"


def _summary(
    ev_state: State,
    sharing: str,
    pods: Sequence[str],
    usage: Usage,
    key: str,
    telemetry: Telemetry,
) -> str:
    """``pods``: the holders' pods (``namespace/name``), sorted."""
    if telemetry.status == "unknown":
        util = f"usage unknown ({telemetry.reason})"
    else:
        util = "util n/a" if usage.util_pct is None else f"util {usage.util_pct:g}%"
    if ev_state == "unallocated":
        return f"{key}: no holder, {util}"
    if ev_state == "unknown":
        return f"{key}: holders not known, {util}"
    if ev_state == "mig-parent":
        return f"{key}: MIG parent GPU, instances are reported separately; {util}"
    if ev_state == "exclusive" or len(pods) == 1:
        return f"{key}: held by {pods[0]} ({sharing}), {util}"
    device_wide = "device-wide " + util if telemetry.status == "measured" else util
    return f"{key}: {len(pods)} tenants share this GPU ({sharing}), {device_wide}: " + ", ".join(
        pods
    )


class DeviceFacts(Record, frozen=True):
    """What identifies a device in an event when no sample describes it (the allocation
    spine): from the node's inventory, slices and labels (:mod:`streams.core.devices.roster`)."""

    node: str
    gpu_uuid: str
    gpu_index: int | None = None
    model: str = ""
    mig_instance_id: int | None = None
    mig_profile: str | None = None
    #: the event's device id when it is not the key's (a MIG UUID; a held ID we cannot place)
    device_uuid: str | None = None


UNKNOWN_USAGE_SCOPE: dict[bool, Literal["device", "mig-instance"]] = {
    False: "device",
    True: "mig-instance",
}


def _unknown_usage(is_mig: bool) -> Usage:
    return Usage(UNKNOWN_USAGE_SCOPE[is_mig], None, None, None, None, None, None, None)


#: a sample's telemetry: what the hardware measured (immutable, shared)
MEASURED = Telemetry()
#: the alert thresholds health marks are judged by when none are given (the defaults)
DEFAULT_THRESHOLDS = AlertSettings.model_construct()


def attribute(
    sample: DcgmSample,
    rows: Sequence[DeviceAssignment],
    ctx: DeviceContext,
    thresholds: AlertSettings = DEFAULT_THRESHOLDS,
) -> tuple[AttributionEvent, tuple[Flag, ...]]:
    """Join one sample with the holders of its device at the sample's time; its activity
    (:mod:`streams.core.devices.efficiency`) and health (:mod:`streams.core.devices.health`,
    marks judged by ``thresholds``) ride along, device-wide."""
    facts, reading = sample_reading(sample, ctx, thresholds)
    held = sample_holding(sample, rows, ctx)
    shape = shape_of(rows, ctx, held, describes_mig(facts))
    return event_of(facts, sample.ts_ms, reading, held, shape, exporter_view(sample, shape))


def sample_reading(
    sample: DcgmSample, ctx: DeviceContext, thresholds: AlertSettings = DEFAULT_THRESHOLDS
) -> tuple[DeviceFacts, Reading]:
    """What a sample says of its device — what identifies it in the event, and its reading
    (usage, activity, health marks judged by ``thresholds``) — whoever holds it."""
    profile = sample.mig_profile
    facts = DeviceFacts(
        # the strings the event keeps (the worker's live view holds a device's latest), one
        # copy per value: a decoded scrape's are its own (contract.inputs.READ_AND_LET_GO)
        node=sys.intern(sample.node),
        gpu_uuid=sys.intern(sample.uuid),
        gpu_index=sample.gpu_index,
        model=sys.intern(sample.model),
        mig_instance_id=sample.mig_instance_id,
        # a profile without an instance is not a MIG row (GPU_I_PROFILE needs GPU_I_ID)
        mig_profile=sys.intern(profile)
        if profile is not None and sample.mig_instance_id is not None
        else None,
        device_uuid=ctx.mig_uuid,
    )
    usage = _usage(sample)
    return facts, Reading(sample, usage, activity(sample, usage), health(sample, thresholds))


def sample_holding(
    sample: DcgmSample, rows: Sequence[DeviceAssignment], ctx: DeviceContext
) -> Holding:
    """The :class:`Holding` a sample's event is built from (accounted), as :func:`attribute`
    decides it."""
    is_mig = sample.mig_instance_id is not None
    return _holding(rows, sample.ts_ms, ctx, is_mig, accounted=True)


def accounted_holding(
    facts: DeviceFacts, ts_ms: int, rows: Sequence[DeviceAssignment], ctx: DeviceContext
) -> Holding:
    """The :class:`Holding` a description of the device at ``ts_ms`` is built from
    (accounted), as :func:`describe` decides it."""
    return _holding(rows, ts_ms, ctx, describes_mig(facts), accounted=True)


def describe(
    facts: DeviceFacts,
    ts_ms: int,
    rows: Sequence[DeviceAssignment],
    ctx: DeviceContext,
    origin: Origin,
    telemetry: Telemetry,
) -> AttributionEvent:
    """A device's state without a sample (the allocation spine): every holder, usage unknown
    with its reason — never 0, never idle, never absent."""
    held = accounted_holding(facts, ts_ms, rows, ctx)
    shape = shape_of(rows, ctx, held, describes_mig(facts))
    return described(facts, ts_ms, held, shape, origin, telemetry)


def described(
    facts: DeviceFacts,
    ts_ms: int,
    held: Holding,
    shape: Shape,
    origin: Origin,
    telemetry: Telemetry,
) -> AttributionEvent:
    """:func:`describe` from the device's holding and shape (:func:`accounted_holding`,
    :func:`shape_of`)."""
    reading = Reading(None, _unknown_usage(describes_mig(facts)), Activity(), Health())
    event, _ = event_of(facts, ts_ms, reading, held, shape, None, origin, telemetry)
    return event


def device_name(facts: DeviceFacts) -> str:
    """The device as its events name it (``device_uuid``): a MIG instance by its UUID when the
    inventory knows it."""
    return facts.device_uuid or (
        sys.intern(f"{facts.gpu_uuid}/gi{facts.mig_instance_id}")
        if facts.mig_instance_id is not None
        else facts.gpu_uuid
    )


def describes_mig(facts: DeviceFacts) -> bool:
    """Whether the device's events describe a MIG instance."""
    return facts.mig_instance_id is not None or facts.mig_profile is not None


class Holding(Record, frozen=True):
    """What a device's holder rows decide: the rows that hold it (DRA observers set apart), its
    sharing decision, its holders as events list them and each pod's share."""

    rows: tuple[DeviceAssignment, ...]
    observers: tuple[DeviceAssignment, ...]
    decision: SharingDecision
    holders: tuple[Holder, ...]
    pods: tuple[PodShare, ...]  # () when not accounted
    tenants: int  # the pods holding it
    names: tuple[str, ...]  # the holders' pods (namespace/name), sorted
    #: what the kubelet says of the device in its holders' pod statuses, and by its allocatable
    #: list of the held device-plugin IDs
    kubelet: tuple[HealthSaid, ...] = ()
    allocatable: tuple[HealthSaid, ...] = ()


def _identities(
    rows: Sequence[DeviceAssignment], ts_ms: int, ctx: DeviceContext
) -> tuple[PodIdentity, ...]:
    """Each row's pod as our own join knows it at ``ts_ms``."""
    resolve_pod = ctx.resolve_pod
    return tuple(resolve_pod(a.namespace, a.pod, ts_ms) for a in rows)


def _holding(
    rows: Sequence[DeviceAssignment],
    ts_ms: int,
    ctx: DeviceContext,
    is_mig: bool,
    accounted: bool,
) -> Holding:
    """The device's :class:`Holding` at ``ts_ms`` (``accounted``: with each holder's allocation
    share and each pod's, else without the accounting)."""
    if not through_dra(rows):
        return _plugin_holding(
            tuple(rows),
            _identities(rows, ts_ms, ctx),
            ctx.node_sharing,
            ctx.advertised,
            is_mig,
            accounted,
            ctx.allocatable,
        )
    kept, observers, views = _dra_views(rows, ctx)
    decision = (
        _dra_decision(kept, views, is_mig)
        if kept
        else SharingDecision("mig" if is_mig else "none", None, ())
    )
    who = _identities(kept, ts_ms, ctx)
    held = _holds(kept, decision.replicas, who, views)
    kubelet = _kubelet(kept, who, ctx.claim)
    listed = allocatable_words(kept, ctx.allocatable)
    return _held(tuple(kept), tuple(observers), decision, held, accounted, kubelet, listed)


#: not memoised: a device's holding while its inputs stay the same is kept in its frame
#: (streams.core.flow.deviceframe), per live device, and a join made again is one whose inputs moved
#: (a memo of it missed on every call in bench.run's fleet and held ~2 MiB at 10,000 devices)
def _plugin_holding(
    rows: tuple[DeviceAssignment, ...],
    who: tuple[PodIdentity, ...],
    node_sharing: NodeSharing | None,
    advertised: Advertised | None,
    is_mig: bool,
    accounted: bool,
    allocatable: tuple[AllocatableDevice, ...] = (),
) -> Holding:
    """Device-plugin rows (no DRA claim to read): everything follows from the rows, the node's
    sharing evidence and the pods' identities (``who``, row by row), so a device's holding is
    decided once per distinct input, not on every sample."""
    decision = decide(node_sharing, rows, is_mig, advertised)
    held = _holds(rows, decision.replicas, who, {})
    kubelet = _kubelet(rows, who, no_claims)
    return _held(rows, (), decision, held, accounted, kubelet, allocatable_words(rows, allocatable))


def _held(
    rows: tuple[DeviceAssignment, ...],
    observers: tuple[DeviceAssignment, ...],
    decision: SharingDecision,
    held: Sequence[Held],
    accounted: bool,
    kubelet: tuple[HealthSaid, ...] = (),
    allocatable: tuple[HealthSaid, ...] = (),
) -> Holding:
    shares = account(held) if accounted else _NOT_ACCOUNTED
    holders = _holders(rows, held, shares)
    tenants = len({(a.namespace, a.pod) for a in rows})
    names = tuple(sorted({sys.intern(f"{h.namespace}/{h.pod}") for h in holders}))
    return Holding(
        rows, observers, decision, holders, shares.pods, tenants, names, kubelet, allocatable
    )


def _kubelet(
    rows: Sequence[DeviceAssignment], who: Sequence[PodIdentity], claim: ClaimLookup
) -> tuple[HealthSaid, ...]:
    """The kubelet's word on the device in its holders' statuses (none said: most devices)."""
    if not any(identity.health for identity in who):
        return ()
    return kubelet_words(rows, [identity.health for identity in who], claim)


#: no accounting asked for: holders listed without their allocation share
_NOT_ACCOUNTED = Accounting({}, ())


def holding(
    facts: DeviceFacts, ts_ms: int, rows: Sequence[DeviceAssignment], ctx: DeviceContext
) -> tuple[Holder, ...]:
    """The device's holders at ``ts_ms`` as its events list them — identities, resources,
    device IDs, claims — without the accounting (``allocation_share`` is ``None``): what a
    node's supply needs, at a fraction of an event's cost. A device whose holders are unknown
    has none here (its event says ``unknown``)."""
    if not ctx.holders_known:
        return ()
    return _holding(rows, ts_ms, ctx, describes_mig(facts), accounted=False).holders


class Shape(Record, frozen=True):
    """What a device's events say of its holding whatever the sample — allocation kind, state,
    notes, credit, and the holders' pods and claims the exporter's claim is checked against —
    decided from its holder rows, context and :class:`Holding` (``is_mig``: as the events'
    device is). For a caller that keeps it while those stay the same (a device's frame)."""

    is_mig: bool
    allocation: Allocation
    state: State
    notes: tuple[str, ...]
    credit: CreditScope
    pods_held: tuple[tuple[str, str], ...]  # the holders' pods, each once (a few: a tuple)
    held_through: Mapping[tuple[str, str], frozenset[str]]
    taints: tuple[HealthSaid, ...] = ()  # the context's: what the device's taints say


def shape_of(
    rows: Sequence[DeviceAssignment], ctx: DeviceContext, held: Holding, is_mig: bool
) -> Shape:
    """The :class:`Shape` of a device's events (``rows``: its holder rows as read, DRA observers
    included; ``held``: the holding made from them)."""
    dra = through_dra(rows)
    allocation: Allocation = "dra" if dra or ctx.dra_device or ctx.unplaced else "device-plugin"
    held_rows, observers, decision = held.rows, held.observers, held.decision
    tenants = held.tenants
    shared = decision.sharing not in ("none", "mig")
    state: State
    notes = decision.notes
    if observers:
        names = sorted({f"{a.namespace}/{a.pod}" for a in observers})
        notes = (*notes, f"observers through adminAccess claims, not holders: {', '.join(names)}")
    if held_rows and ctx.placement_notes:
        notes = (*notes, *ctx.placement_notes)
    if not ctx.holders_known:
        state = "unknown"
        notes = (*notes, ctx.holders_note)
    elif ctx.mig_parent and not held_rows:
        state = "mig-parent"
    elif not held_rows and ctx.unplaced:
        state = "unknown"
        notes = (*notes, "held through DRA but not placeable: " + "; ".join(ctx.unplaced))
    elif not held_rows:
        state = "unallocated"
    elif shared or tenants > 1:
        state = "shared"
    else:
        state = "exclusive"
    credit: CreditScope = "none" if not held_rows else ("holder" if tenants == 1 else "device-wide")
    holders = held.holders
    return Shape(
        is_mig,
        allocation,
        state,
        notes,
        credit,
        tuple(dict.fromkeys((h.namespace, h.pod) for h in holders)),
        _held_through(holders),
        ctx.taints,
    )


class Reading(Record, frozen=True):
    """What an event says of the hardware: the sample (``None``: no sample describes the device),
    its usage, activity and health (their empty defaults without a sample)."""

    sample: DcgmSample | None
    usage: Usage
    activity: Activity
    health: Health


def event_of(
    facts: DeviceFacts,
    ts_ms: int,
    reading: Reading,
    held: Holding,
    shape: Shape,
    exporter: ExporterWord | None,
    origin: Origin = "sample",
    telemetry: Telemetry = MEASURED,
) -> tuple[AttributionEvent, tuple[Flag, ...]]:
    """The device's event from what was decided of it: its reading, holding and shape (made
    for a device that is, as ``facts`` says, a MIG instance or not), and the exporter's word on
    the sample (:func:`exporter_view`; ``None``: no sample), with the flags for the pods the
    exporter credits that hold no slot here."""
    is_mig = describes_mig(facts)
    decision, holders, state = held.decision, held.holders, shape.state
    usage = reading.usage
    key = device_name(facts)
    strangers: tuple[ClaimedPod, ...] = ()
    if exporter is None:
        said = NOT_SAMPLED
    else:
        said, strangers = exporter
    event = AttributionEvent(
        node=facts.node,
        ts_ms=ts_ms,
        device_uuid=key,
        gpu_uuid=facts.gpu_uuid,
        gpu_index=facts.gpu_index,
        model=facts.model,
        mig=MigInstance(facts.mig_instance_id, facts.mig_profile) if is_mig else None,
        state=state,
        sharing=decision.sharing,
        replicas=decision.replicas,
        tenant_count=held.tenants,
        holders=holders,
        usage=usage,
        credit=shape.credit,
        exporter=said,
        notes=shape.notes,
        summary=_summary(state, decision.sharing, held.names, usage, key, telemetry),
        allocation=shape.allocation,
        origin=origin,
        telemetry=telemetry,
        pods=held.pods,
        activity=reading.activity,
        health=judged(
            reading.health,
            (*held.kubelet, *held.allocatable, *shape.taints),
            reading.sample is not None,
        )
        if held.kubelet or held.allocatable or shape.taints
        else reading.health,
    )
    sample = reading.sample
    if sample is not None and sample.usage is not None:
        event, uncredited = _per_pod(event, sample.usage, is_mig)
    else:
        uncredited = ()
    if not strangers:
        return event, uncredited
    flags = tuple(
        ExporterMisattribution(
            facts.node,
            ts_ms,
            key,
            c,
            holders,
            "exporter credits a pod that holds no slot on this device",
        )
        for c in strangers
    )
    return event, (*flags, *uncredited)


#: the flag a reading of each reason raises (a holder whose UID is not known yet raises none:
#: the join catches up, and the reading is listed on the event meanwhile)
_UNCREDITED_SAYS = {
    "not-a-holder": "a process of pod {who} uses this device, which its pod holds no slot of",
    "no-pod": "a process of no pod ({who}) uses this device",
}


def _per_pod(
    event: AttributionEvent, usage: DeviceUsage, is_mig: bool
) -> tuple[AttributionEvent, tuple[UsageUncredited, ...]]:
    """The event with its pods' per-process readings credited (:mod:`.measured`), and a flag
    for each reading credited to nobody that is no holder's."""
    pods, per_pod = credit(usage, event.pods, is_mig)
    event = replace(event, pods=pods, per_pod=per_pod)
    flags = []
    for r in per_pod.uncredited:
        says = _UNCREDITED_SAYS.get(r.reason)
        if says is None:
            continue
        who = (
            f"{r.namespace}/{r.pod} (uid {r.pod_uid})"
            if r.pod
            else f"uid {r.pod_uid}"
            if r.pod_uid
            else f"pid {r.pid}" + (f", container {r.container_id[:12]}" if r.container_id else "")
        )
        summary = f"{event.node} {event.device_uuid}: " + says.format(who=who)
        flags.append(
            UsageUncredited(
                event.node, event.ts_ms, event.device_uuid, usage.source, r, event.holders, summary
            )
        )
    return event, tuple(flags)


#: the exporter's view of an event no sample made: nothing it said to judge
NOT_SAMPLED = ExporterView((), False, "no sample: nothing from the exporter to judge")
