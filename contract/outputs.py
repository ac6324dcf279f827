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
    """dcgm-exporter credited a pod that holds no slot on that device at that time."""

    node: str
    ts_ms: int
    device_uuid: str
    claimed: ClaimedPod
    holders: tuple[ClaimedPod, ...]
    reason: str


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
    "exporter.misattribution": (ExporterMisattribution, 1),
    "alert": (Alert, 1),
}
