"""What operators see: one row per device (or MIG instance), built from the worker's state.

Pure functions over frozen records. A row joins the device's latest attribution event (who holds
it, what the hardware measured) with its alert state (how long it has been idle, what is open).
Idle time is event time: the latest sample's ``ts_ms`` minus the start of the idle episode; a
device whose latest event carries no reading (usage unknown) is never idle here.

Honesty carries through: a shared device's row has every holder and one device-wide usage
figure (``usage_scope``), never a per-pod split; ``allocation_share`` is labelled as allocation.
Busy (any kernel running) and effective activity (SM or graphics-engine active) are the
device's too; an effective figure no profiling field gave is unknown with its reason, never 0
and never busy's. Health marks are the device's, from the event (:class:`contract.outputs.Health`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

from contract.outputs import AttributionEvent, Holder, PodShare
from contract.records import fast_init
from streams.core.alerts.alerts import DeviceAlerts

SORT_KEYS = ("node", "util", "idle", "tenants", "namespace", "model")


@fast_init
@dataclass(frozen=True, slots=True)
class HolderRow:
    namespace: str
    pod: str
    container: str
    workload: str | None  # "Kind/name"
    uid: str | None
    uid_prefix: str | None
    slots: int
    allocation_share: float | None  # share of the device's slots *allocated*, not usage
    claim: str | None = None  # DRA: the ResourceClaim it holds the device through


@fast_init
@dataclass(frozen=True, slots=True)
class PodShareRow:
    """One pod's share of the device: the one accounting figure (an allocation, not usage)."""

    namespace: str
    pod: str
    uid: str | None
    workload: str | None  # "Kind/name"
    share: float
    basis: str  # whole, replicas, capacity, equal-split
    #: what the hardware measured for the pod's own processes (per-process readings credited by
    #: our join; None: not measured) and by which source: never a division of the device figure
    measured_fb_mib: float | None = None
    measured_sm_pct: float | None = None
    measured_source: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class DeviceRow:
    node: str
    device_uuid: str
    gpu_uuid: str
    gpu_index: int | None
    mig_instance: int | None
    mig_profile: str | None
    model: str
    state: str
    sharing: str
    tenant_count: int
    holders: tuple[HolderRow, ...]
    usage_scope: str  # "device" or "mig-instance": never a pod
    util_pct: float | None
    fb_used_mib: float | None
    fb_free_mib: float | None
    idle_since_ms: int | None
    idle_s: float | None
    open_alerts: tuple[str, ...]
    ts_ms: int
    summary: str
    allocation: str = "device-plugin"  # or "dra"
    exporter_verdict: str = "unchecked"  # what dcgm-exporter's own pod labels amount to here
    exporter_mode: str = "none"
    origin: str = "sample"  # sample, allocation, heartbeat, stale
    telemetry: str = "measured"  # or "unknown": then why, in a word and in a sentence
    telemetry_cause: str | None = None
    telemetry_reason: str | None = None
    pods: tuple[PodShareRow, ...] = ()
    # additive: busy versus effective, device-wide; None: unknown (reason says why)
    busy_pct: float | None = None
    effective_pct: float | None = None
    effective_source: str | None = None
    effective_reason: str | None = None
    work: str = "unknown"  # tensor, memory-bound, compute, light, unknown
    health_marks: tuple[str, ...] = ()  # hot, throttled, memory-fault, pcie-replays
    health_watched: tuple[str, ...] = ()  # the marks the sample could judge (others unknown)
    #: where the kubelet or a DRA taint speaks for the device: the verdict, and each source's
    #: word as ``(source, state, detail)`` (DCGM's beside them)
    health_verdict: str | None = None
    health_sources: tuple[tuple[str, str, str], ...] = ()

    @property
    def stale(self) -> bool:
        """The node fell silent: its last known state, no longer charged to anyone."""
        return self.origin == "stale"


@fast_init
@dataclass(frozen=True, slots=True)
class Filter:
    node: str | None = None
    namespace: str | None = None
    workload: str | None = None  # "name" or "Kind/name"
    sharing: str | None = None
    idle: bool = False  # only devices in an idle episode
    alerts: bool = False  # only devices with an open alert
    unknown: bool = False  # only devices whose usage is unknown (with the reason)
    health: bool = False  # only devices with a health mark (hot, throttled, memory-fault, …)

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> Filter:
        def flag(name: str) -> bool:
            return query.get(name, "").lower() in ("1", "true", "yes")

        return cls(
            node=query.get("node") or None,
            namespace=query.get("namespace") or None,
            workload=query.get("workload") or None,
            sharing=query.get("sharing") or None,
            idle=flag("idle"),
            alerts=flag("alerts"),
            unknown=flag("unknown"),
            health=flag("health"),
        )


#: rows as JSON (another worker's answer, or the API's for ``gpuattr top``) → DeviceRow
ROWS = pydantic.TypeAdapter(list[DeviceRow])


def _holder(h: Holder) -> HolderRow:
    return HolderRow(
        namespace=h.namespace,
        pod=h.pod,
        container=h.container,
        workload=f"{h.workload.kind}/{h.workload.name}" if h.workload else None,
        uid=h.uid,
        uid_prefix=h.uid[:8] if h.uid else None,
        slots=h.slots,
        allocation_share=h.allocation_share,
        claim=h.claim,
    )


def _pod(p: PodShare) -> PodShareRow:
    workload = f"{p.workload.kind}/{p.workload.name}" if p.workload else None
    m = p.measured
    if m is None:
        return PodShareRow(p.namespace, p.pod, p.uid, workload, p.share, p.basis)
    return PodShareRow(
        p.namespace,
        p.pod,
        p.uid,
        workload,
        p.share,
        p.basis,
        m.fb_used_mib,
        m.sm_util_pct,
        m.source,
    )


def _effective_reason(event: AttributionEvent) -> str | None:
    """Why the device's effective activity is unknown (None when it is known). An event without
    a reading says so through its telemetry; one with a reading but no profiling field, through
    the activity's own reason."""
    if event.activity.effective_pct is not None:
        return None
    if event.telemetry.status == "unknown":
        return f"usage unknown ({event.telemetry.cause or 'no sample'})"
    return event.activity.effective_reason or "effective activity not reported"


def device_row(event: AttributionEvent, alerts: DeviceAlerts | None) -> DeviceRow:
    idle = alerts.idle if alerts else None
    # idle time is measured time: a device whose latest event has no reading is not idle here
    idle_now = idle if event.telemetry.status == "measured" else None
    open_alerts = []
    if idle is not None and idle.firing:
        open_alerts.append("idle")
    if alerts and alerts.orphan is not None and alerts.orphan.firing:
        open_alerts.append("orphaned-memory")
    if alerts and alerts.xid is not None and alerts.xid.firing:
        open_alerts.append(f"xid-{alerts.xid.value}")
    low_eff = alerts.low_eff.episode if alerts and alerts.low_eff is not None else None
    if low_eff is not None and low_eff.firing:
        open_alerts.append("low-efficiency")
    health = alerts.health if alerts is not None else None
    for kind, ep in (
        ("thermal", health.thermal if health else None),
        ("memory-fault", health.memory_fault if health else None),
        ("pcie-replays", health.pcie if health else None),
    ):
        if ep is not None and ep.firing:
            open_alerts.append(kind)
    if alerts is not None and alerts.unhealthy is not None:
        open_alerts.append("device-unhealthy")
    tenants = alerts.tenants if alerts is not None else None
    for kind, episodes in (
        ("idle-tenant", tenants.idle if tenants else ()),
        ("memory-hog", tenants.hog if tenants else ()),
    ):
        if any(ep.firing for _, ep in episodes):
            open_alerts.append(kind)
    return DeviceRow(
        node=event.node,
        device_uuid=event.device_uuid,
        gpu_uuid=event.gpu_uuid,
        gpu_index=event.gpu_index,
        mig_instance=event.mig.instance_id if event.mig else None,
        mig_profile=event.mig.profile if event.mig else None,
        model=event.model,
        state=event.state,
        sharing=event.sharing,
        tenant_count=event.tenant_count,
        holders=tuple(_holder(h) for h in event.holders),
        usage_scope=event.usage.scope,
        util_pct=event.usage.util_pct,
        fb_used_mib=event.usage.fb_used_mib,
        fb_free_mib=event.usage.fb_free_mib,
        idle_since_ms=idle_now.since_ms if idle_now else None,
        idle_s=(event.ts_ms - idle_now.since_ms) / 1000 if idle_now else None,
        open_alerts=tuple(open_alerts),
        ts_ms=event.ts_ms,
        summary=event.summary,
        allocation=event.allocation,
        exporter_verdict=event.exporter.verdict,
        exporter_mode=event.exporter.mode,
        origin=event.origin,
        telemetry=event.telemetry.status,
        telemetry_cause=event.telemetry.cause,
        telemetry_reason=event.telemetry.reason,
        pods=tuple(_pod(p) for p in event.pods),
        busy_pct=event.activity.busy_pct,
        effective_pct=event.activity.effective_pct,
        effective_source=event.activity.effective_source,
        effective_reason=_effective_reason(event),
        work=event.activity.work,
        health_marks=tuple(event.health.marks),
        health_watched=tuple(event.health.watched),
        health_verdict=event.health.verdict,
        health_sources=tuple(
            (w.source, w.state, f"{w.holder}: {w.detail}" if w.holder else w.detail)
            for w in event.health.sources
        ),
    )


def _workload_matches(row: DeviceRow, wanted: str) -> bool:
    for h in row.holders:
        if h.workload and (h.workload == wanted or h.workload.split("/", 1)[-1] == wanted):
            return True
    return False


def matches(row: DeviceRow, f: Filter) -> bool:
    return (
        (f.node is None or row.node == f.node)
        and (f.namespace is None or any(h.namespace == f.namespace for h in row.holders))
        and (f.workload is None or _workload_matches(row, f.workload))
        and (f.sharing is None or row.sharing == f.sharing)
        and (not f.idle or row.idle_since_ms is not None)
        and (not f.alerts or bool(row.open_alerts))
        and (not f.unknown or row.telemetry == "unknown")
        and (not f.health or bool(row.health_marks))
    )


def _sort_key(by: str) -> Callable[[DeviceRow], Any]:
    keys: dict[str, Callable[[DeviceRow], Any]] = {
        "node": lambda r: (r.node, r.gpu_index if r.gpu_index is not None else -1, r.device_uuid),
        "util": lambda r: (-(r.util_pct if r.util_pct is not None else -1.0), r.node),
        "idle": lambda r: (-(r.idle_s or 0.0), r.node, r.device_uuid),
        "tenants": lambda r: (-r.tenant_count, r.node, r.device_uuid),
        "namespace": lambda r: (min((h.namespace for h in r.holders), default="~"), r.node),
        "model": lambda r: (r.model, r.node, r.device_uuid),
    }
    if by not in keys:
        raise ValueError(f"sort by one of {', '.join(SORT_KEYS)}, not {by!r}")
    return keys[by]


def select(rows: Iterable[DeviceRow], f: Filter, sort: str = "node") -> list[DeviceRow]:
    """The rows matching ``f``, sorted (``node`` order breaks ties: the output is stable)."""
    key = _sort_key(sort)
    chosen = sorted((r for r in rows if matches(r, f)), key=_sort_key("node"))
    return sorted(chosen, key=key)


def usage_text(row: DeviceRow) -> str:
    """The usage cell: a shared device shows the tenants and the device-wide figure only; a
    device no fresh sample speaks for says why its usage is unknown (never 0, never blank)."""
    if row.telemetry == "unknown":
        figure = f"unknown ({row.telemetry_cause or 'no sample'})"
    else:
        figure = f"{row.util_pct:.0f}%" if row.util_pct is not None else "n/a"
    if row.state == "shared":
        tenants = f"{row.tenant_count} tenant" + ("" if row.tenant_count == 1 else "s")
        return f"{tenants} · device-wide {figure}"
    return figure


def measured_text(row: DeviceRow, namespace: str, pod: str) -> str | None:
    """A holder pod's own measured use of the device (per-process readings, labelled as
    measured with their source), or ``None`` where nothing measured it."""
    p = next((p for p in row.pods if (p.namespace, p.pod) == (namespace, pod)), None)
    if p is None or p.measured_source is None:
        return None
    parts = []
    if p.measured_fb_mib is not None:
        parts.append(f"{p.measured_fb_mib / 1024:.1f} GiB")
    if p.measured_sm_pct is not None:
        parts.append(f"SM {p.measured_sm_pct:.0f}%")
    return f"measured {' · '.join(parts) or 'n/a'} ({p.measured_source})"


#: how ``gpuattr top`` writes each health mark (short, so the column stays narrow)
MARK_TEXT = {"hot": "HOT", "throttled": "THR", "memory-fault": "MEM", "pcie-replays": "PCIe"}


def effective_text(row: DeviceRow) -> str:
    """The effective cell: the device-wide figure with its kind of work where known, ``?`` where
    no profiling field gave one (never 0, never busy's figure)."""
    if row.effective_pct is None:
        return "?"
    figure = f"{row.effective_pct:.0f}%"
    return f"{figure} {row.work}" if row.work in ("memory-bound", "tensor") else figure


def health_text(row: DeviceRow) -> str:
    """The health cell: the device's marks, short (``HOT THR MEM PCIe``), and where a source says
    it is unhealthy, which (``UNHEALTHY kubelet,dra-taint``); empty when none."""
    marks = [MARK_TEXT.get(m, m) for m in row.health_marks]
    if row.health_verdict == "unhealthy":
        sick = sorted({src for src, state, _ in row.health_sources if state == "unhealthy"})
        marks.insert(0, f"UNHEALTHY {','.join(sick)}")
    return " ".join(marks)


def merge(parts: Sequence[Iterable[DeviceRow]]) -> list[DeviceRow]:
    """Rows from several workers; a device reported twice (mid-rebalance) keeps its newest."""
    best: dict[tuple[str, str], DeviceRow] = {}
    for part in parts:
        for row in part:
            key = (row.node, row.device_uuid)
            if key not in best or row.ts_ms > best[key].ts_ms:
                best[key] = row
    return list(best.values())
