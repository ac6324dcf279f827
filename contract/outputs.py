"""Output records: what workers emit. The streams side owns these; downstream consumers read them.

Honesty rules encoded in the shapes:
- ``Usage`` is always device-wide (or MIG-instance-wide): what the hardware measured.
- ``Holder.allocation_share`` is the share of the device's slots a holder was *allocated*; it is
  never a usage figure. No record carries a per-pod usage split on a shared device.
- ``Holder.uid`` comes from our own join (PodResources x pod watch), never from exporter labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

State = Literal["unallocated", "exclusive", "shared", "mig-parent", "unknown"]
Sharing = Literal["none", "time-slicing", "mps", "mig", "mig+time-slicing", "unknown"]
UidStatus = Literal["resolved", "pending", "no-pod-watch"]
CreditScope = Literal["holder", "device-wide", "none"]
#: how the device reached its holders: a device plugin (PodResources device IDs) or DRA claims
Allocation = Literal["device-plugin", "dra"]
ExporterMode = Literal["none", "single", "per-pod-copies", "per-process"]
#: what dcgm-exporter's own pod labels amount to on this device, checked against our join:
#: ``trusted`` (its one pod is the only holder, or it credits nobody on an unheld device),
#: ``unchecked`` (holders unknown yet), or how it misattributes: a pod that holds no slot here
#: (``stranger``), a DRA claim the pod does not hold the device through (``wrong-claim``), a
#: device-wide value on one or each of several holders (``shared-device``), per-process rows that
#: are no device reading (``per-process``), or no pod although pods hold it (``uncredited``)
ExporterVerdict = Literal[
    "trusted", "unchecked", "stranger", "wrong-claim", "shared-device", "per-process", "uncredited"
]
#: why an event was emitted: a DCGM ``sample`` joined with the holders; an ``allocation``
#: change (PodResources); the allocation spine's ``heartbeat`` for a device no fresh sample
#: speaks for; the node fell silent (``stale``); the device left (``gone``: its last event)
Origin = Literal["sample", "allocation", "heartbeat", "stale", "gone"]
#: whether the hardware's reading is in the event; when ``unknown``, ``Telemetry.cause`` says
#: why in one word and ``reason`` in a sentence — never a 0, never idle
TelemetryStatus = Literal["measured", "unknown"]
TelemetryCause = Literal[
    "exporter-unreachable",  # the agent cannot scrape its node's dcgm-exporter
    "no-exporter",  # no dcgm-exporter found for this node (none deployed, or not on this node)
    "scrape-refused",  # the exporter answered with another node's devices (refused)
    "no-row",  # the exporter answers, but has no row for this device
    "no-sample-yet",  # nothing scraped since the node's agent started
    "samples-stopped",  # the last sample is older than the freshness window
    "holders-changed",  # an allocation change: the new holders are not measured yet
    "node-silent",  # no record from the node's agent: stale
    "gone",  # the device or node left
    "unplaced",  # held, but not placeable on a GPU the exporter reports on
]
#: how a pod's share of a device was decided (:mod:`streams.core.accounting`): the ``whole``
#: device; slots held over the device's ``replicas``; consumed over the device's ``capacity``
#: (DRA consumable capacity); or, where no share exists (a claim shared by several pods, an
#: unknown replica count), an ``equal-split`` between the pods holding it — stated as such
ShareBasis = Literal["whole", "replicas", "capacity", "equal-split"]


@dataclass(frozen=True, slots=True)
class Workload:
    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class Holder:
    """A container holding one or more slots of one device."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]
    slots: int
    allocation_share: float | None = None
    uid: str | None = None
    uid_status: UidStatus = "no-pod-watch"
    workload: Workload | None = None
    claim: str | None = None  # DRA: the ResourceClaim (namespace/name) the pod holds it through


@dataclass(frozen=True, slots=True)
class Usage:
    """What the hardware measured, for the whole device (or the whole MIG instance)."""

    scope: Literal["device", "mig-instance"]
    util_pct: float | None
    util_source: str | None
    fb_used_mib: float | None
    fb_free_mib: float | None
    power_w: float | None
    temp_c: float | None
    xid: int | None


@dataclass(frozen=True, slots=True)
class MigInstance:
    instance_id: int | None
    profile: str | None


@dataclass(frozen=True, slots=True)
class ClaimedPod:
    namespace: str
    pod: str
    container: str
    claim: str | None = None  # the DRA claim the exporter matched the row to


@dataclass(frozen=True, slots=True)
class ExporterView:
    """Which pods dcgm-exporter's own labels credited, and whether that claim can be trusted."""

    claims: tuple[ClaimedPod, ...]
    trusted: bool
    reason: str
    mode: ExporterMode = "none"
    verdict: ExporterVerdict = "unchecked"  # additive: payloads before it read as unchecked


@dataclass(frozen=True, slots=True)
class Telemetry:
    """Whether the event carries what the hardware measured, and if not, why."""

    status: TelemetryStatus = "measured"
    cause: TelemetryCause | None = None
    reason: str | None = None
    since_ms: int | None = None  # since when the cause holds, where known
    last_sample_ms: int | None = None  # the device's last trusted sample, where known


@dataclass(frozen=True, slots=True)
class PodShare:
    """One pod's share of one device: the accounting figure every output uses (GPU-hours,
    Prometheus, report, dashboard). At most 1 per device; an *allocation* share, never usage."""

    namespace: str
    pod: str
    uid: str | None
    uid_status: UidStatus
    workload: Workload | None
    share: float
    basis: ShareBasis
    containers: tuple[str, ...]
    claims: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AttributionEvent:
    """One device at one sample time: who held it and what the hardware did."""

    node: str
    ts_ms: int
    device_uuid: str
    gpu_uuid: str
    gpu_index: int | None
    model: str
    mig: MigInstance | None
    state: State
    sharing: Sharing
    replicas: int | None
    tenant_count: int
    holders: tuple[Holder, ...]
    usage: Usage
    credit: CreditScope
    exporter: ExporterView
    notes: tuple[str, ...]
    summary: str
    allocation: Allocation = "device-plugin"
    #: additive (v1): why this event exists, the telemetry's status, each pod's share
    origin: Origin = "sample"
    telemetry: Telemetry = Telemetry()
    pods: tuple[PodShare, ...] = ()


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An input the worker could not use, kept with where it came from and why."""

    source_topic: str
    partition: int
    offset: int
    key: str | None
    error: str
    payload_b64: str
    ts_ms: int


@dataclass(frozen=True, slots=True)
class ExporterMisattribution:
    """dcgm-exporter credited a pod that holds no slot on that device at that time. ``holders``
    are the device's holders as attribution events name them (v2: with container, UID and
    workload; v1 had namespace and pod only)."""

    node: str
    ts_ms: int
    device_uuid: str
    claimed: ClaimedPod
    holders: tuple[Holder, ...]
    reason: str


RefusalCause = Literal["hostname", "foreign-devices", "unverifiable"]


@dataclass(frozen=True, slots=True)
class TelemetryRefused:
    """A dcgm-exporter answer the worker refused as not provably this node's: its rows never
    become devices, events or alerts. One record per refused scrape (counted and flagged)."""

    node: str
    ts_ms: int
    cause: RefusalCause
    reason: str
    hostname: str  # the exporter's Hostname label, as it came
    exporter: str  # where the agent scraped it (URL, and pod where discovered)
    uuids: tuple[str, ...]  # the GPU UUIDs of the refused rows
    rows: int  # how many rows (GPUs and MIG instances) were refused


AlertKind = Literal["idle", "xid", "orphaned-memory"]


@dataclass(frozen=True, slots=True)
class AlertFigures:
    util_pct: float | None = None
    util_threshold_pct: float | None = None
    fb_used_mib: float | None = None
    fb_threshold_mib: float | None = None
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Alert:
    """An alert on one device. ``id`` is the idempotency key: stable across retries, restarts
    and the firing → resolved transition of the same episode."""

    id: str
    kind: AlertKind
    status: Literal["firing", "resolved"]
    node: str
    device_uuid: str
    gpu_uuid: str
    model: str
    mig: MigInstance | None
    sharing: Sharing
    holders: tuple[Holder, ...]
    figures: AlertFigures
    window_s: float | None
    started_ms: int
    ts_ms: int
    device_wide: bool
    summary: str


#: Record kinds the workers publish, with their schema versions (see :mod:`contract.codec`).
KINDS: dict[str, tuple[type, int]] = {
    "attribution": (AttributionEvent, 1),
    "deadletter": (DeadLetter, 1),
    "exporter.misattribution": (ExporterMisattribution, 2),
    "telemetry.refused": (TelemetryRefused, 1),
    "alert": (Alert, 1),
}
