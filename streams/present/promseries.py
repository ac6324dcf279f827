"""Attribution as Prometheus series, kube-state-metrics style. Pure.

Built from the device rows a worker owns now (:meth:`streams.worker.live.LiveDevices.rows`), so
a device's series leave a worker with its partition and the cardinality is bounded by live
devices and their holders — never by samples. Info series carry identity (value 1); gauges carry
units in their names.

There is **no per-pod usage series**: utilisation and memory are the device's (``scope`` says
``device`` or ``mig-instance``); who holds the device is a separate info series. Each pod's share
of a device (``gpuattr_pod_device_share``) is the one accounting figure
(:mod:`streams.core.devices.accounting`), an allocation with its ``basis``, never a usage figure:
the
GPUs-held and GPU-hours rules sum it. Joining a device-wide figure onto each tenant would
recreate the exporter's lie.

Allocation is the spine: a device no fresh sample speaks for is here all the same, its holders
and shares with it, and ``gpuattr_device_telemetry_unknown{cause}`` says why there is no
utilisation series. A stale device (its node fell silent) keeps only its info series, marked
``stale="true"``: nothing is charged for it; a device that is gone leaves.

Busy versus effective is the device's too: ``gpuattr_device_effective_ratio`` (SM
active, else graphics-engine active; ``source`` names the field) exists only where a profiling
field gave a figure — absent is unknown, never 0, and never GPU_UTIL's figure
(``gpuattr_device_utilization_ratio`` is busy). ``gpuattr_device_work{work}`` and
``gpuattr_device_health{mark}`` carry one series per kind and per mark (1 for the current ones),
so a device's label sets stay the same while its condition moves; a device without a reading
has neither, and a mark the sample could not judge (its fields not exported, a counter's increase
not known: ``Health.watched``) has no series — its condition is unknown, not healthy.

Each node's GPU stack (its last ``node-status``, :mod:`streams.present.noderows`) is one series per
stack state (``gpuattr_node_stack_state``, 1 for the current one, 0 for the others) and one per
plane of its stack (``gpuattr_node_plane_broken``, 1 where the plane's own boundary is broken),
so a node's label sets stay the same while its state moves; they leave with the node.

Each pool's demand (its latest ``demand`` record, :mod:`streams.present.poolrows`) is a handful of
gauges labelled ``pool``, ``resource``, ``product`` and ``mig_profile`` (``""``: any): pods
waiting, GPUs requested, the oldest wait, allocated and idle GPUs. No pod is a label: the
waiting pods and the idle GPUs' holders are in the record and the query API. Waiting pods and
GPUs requested add up across pools; allocated and idle GPUs do not (a device of a product is in
the product's pool and in the any-product pool alike). They leave with the pool's tombstone or
its partition.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import get_args

from contract.outputs import HealthMark, WorkKind
from streams.present.noderows import STATE_ORDER, NodeRow
from streams.present.poolrows import PoolRow
from streams.present.views import DeviceRow

Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    name: str
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)


def _device(row: DeviceRow) -> Labels:
    return (("node", row.node), ("device_uuid", row.device_uuid))


#: every kind of work and every health mark, in the contract's order: one series each per device
WORK_KINDS: tuple[str, ...] = get_args(WorkKind)
HEALTH_MARKS: tuple[str, ...] = get_args(HealthMark)


#: a plane's own boundary is broken (not merely waiting on a lower one, or disabled)
PLANE_BROKEN = frozenset({"not-ready", "unreachable", "refused"})


def node_families(nodes: Iterable[NodeRow]) -> list[Family]:
    state = Family(
        "gpuattr_node_stack_state",
        "The node's GPU Operator stack, one series per state (value 1 for the current one): "
        "ready, broken, reconciling, disabled or unknown",
    )
    plane = Family(
        "gpuattr_node_plane_broken",
        "1 where a plane of the node's GPU stack is broken at its own boundary (not ready, or "
        "ready but unreachable or not this node's); 0 when ready, waiting on a lower plane, "
        "disabled or unknown",
    )
    alert = Family(
        "gpuattr_node_stack_alert_open",
        "1 while the node's stack-broken alert is open (an intended plane broken, GPUs held)",
    )
    for row in nodes:
        node = (("node", row.node),)
        for name in STATE_ORDER:
            state.samples.append(((*node, ("state", name)), 1.0 if row.state == name else 0.0))
        for p in row.planes:
            broken = 1.0 if p.state in PLANE_BROKEN else 0.0
            plane.samples.append(((*node, ("plane", p.name)), broken))
        alert.samples.append((node, 1.0 if row.alert else 0.0))
    return [state, plane, alert]


def pool_families(pools: Iterable[PoolRow]) -> list[Family]:
    pending = Family(
        "gpuattr_pool_pending_pods",
        "Pods the scheduler has not placed that wait for GPUs of the pool (resource, and product "
        'and MIG profile where the pod asks for one; "" is any)',
    )
    requested = Family(
        "gpuattr_pool_gpus_requested",
        "GPUs (or MIG instances) the pool's waiting pods ask for: the funnel's requested step",
    )
    oldest = Family(
        "gpuattr_pool_oldest_wait_seconds",
        "How long the pool's oldest waiting pod has waited (since its creation, event time)",
    )
    allocated = Family(
        "gpuattr_pool_allocated_gpus",
        "Allocated devices that match the pool (a device may match several pools: do not sum "
        "across pools)",
    )
    idle = Family(
        "gpuattr_pool_idle_gpus",
        "Of the pool's allocated devices, those measured idle (usage unknown is never idle)",
    )
    for row in pools:
        pool = (
            ("pool", row.pool),
            ("resource", row.resource),
            ("product", row.product),
            ("mig_profile", row.mig_profile),
        )
        pending.samples.append((pool, float(row.pending_pods)))
        requested.samples.append((pool, float(row.gpus_requested)))
        if row.oldest_wait_s is not None:
            oldest.samples.append((pool, row.oldest_wait_s))
        allocated.samples.append((pool, float(row.allocated_gpus)))
        idle.samples.append((pool, float(row.idle_gpus)))
    return [pending, requested, oldest, allocated, idle]


def families(
    rows: Iterable[DeviceRow], nodes: Iterable[NodeRow] = (), pools: Iterable[PoolRow] = ()
) -> list[Family]:
    info = Family("gpuattr_device_info", "A device (GPU or MIG instance) and how it is held")
    holder = Family(
        "gpuattr_device_holder_info", "A pod holding a device, from our own join (value 1)"
    )
    share = Family(
        "gpuattr_pod_device_share",
        "Each pod's share of the device (allocation, not usage; basis: whole, replicas, capacity "
        "or equal-split): what GPUs held and GPU-hours sum",
    )
    unknown = Family(
        "gpuattr_device_telemetry_unknown",
        "1 while no fresh sample speaks for the device, by cause (its reason is in the events)",
    )
    tenants = Family("gpuattr_device_tenants", "Pods holding the device")
    util = Family(
        "gpuattr_device_utilization_ratio",
        "Utilisation of the whole device or MIG instance (scope), never of a pod",
    )
    memory = Family(
        "gpuattr_device_memory_used_bytes", "Framebuffer used on the device or MIG instance"
    )
    idle = Family("gpuattr_device_idle_seconds", "How long the held device has been idle")
    alerts = Family("gpuattr_device_open_alerts", "Open alerts on the device (value 1)")
    exporter = Family(
        "gpuattr_device_exporter_verdict",
        "What dcgm-exporter's own pod labels amount to on the device's latest sample, checked "
        "against our join (value 1): trusted, unchecked, stranger, wrong-claim, shared-device, "
        "per-process or uncredited",
    )
    effective = Family(
        "gpuattr_device_effective_ratio",
        "Effective activity of the whole device or MIG instance (scope): SM active, else the "
        "graphics engine's active ratio (source). Absent where no profiling field is exported: "
        "unknown, never derived from utilisation, never a pod's",
    )
    work = Family(
        "gpuattr_device_work",
        "What kind of work the device does, one series per kind (value 1 for the current one): "
        "tensor, memory-bound, compute, light or unknown (no profiling field)",
    )
    health = Family(
        "gpuattr_device_health",
        "The device's health marks, one series per mark (value 1 while set): hot, throttled, "
        "memory-fault, pcie-replays; absent while the device has no reading or the mark's fields "
        "are not exported (unknown, not healthy)",
    )
    for row in rows:
        device = _device(row)
        info.samples.append(
            (
                (
                    *device,
                    ("gpu_uuid", row.gpu_uuid),
                    ("gpu_index", "" if row.gpu_index is None else str(row.gpu_index)),
                    ("mig_instance", "" if row.mig_instance is None else str(row.mig_instance)),
                    ("mig_profile", row.mig_profile or ""),
                    ("model", row.model),
                    ("sharing", row.sharing),
                    ("state", row.state),
                    ("allocation", row.allocation),
                    ("stale", "true" if row.stale else "false"),
                ),
                1.0,
            )
        )
        if row.telemetry == "unknown":
            unknown.samples.append(((*device, ("cause", row.telemetry_cause or "")), 1.0))
        if row.stale:
            continue  # its last known state: nothing held, measured or open is claimed for it
        tenants.samples.append((device, float(row.tenant_count)))
        for h in row.holders:
            kind, _, name = (h.workload or "").partition("/")
            holder.samples.append(
                (
                    (
                        *device,
                        ("namespace", h.namespace),
                        ("pod", h.pod),
                        ("container", h.container),
                        ("pod_uid", h.uid or ""),
                        ("workload_kind", kind),
                        ("workload_name", name),
                        ("claim", h.claim or ""),
                    ),
                    1.0,
                )
            )

        for p in row.pods:
            kind, _, name = (p.workload or "").partition("/")
            who = (
                *device,
                ("namespace", p.namespace),
                ("pod", p.pod),
                ("pod_uid", p.uid or ""),
                ("workload_kind", kind),
                ("workload_name", name),
                ("basis", p.basis),
            )
            share.samples.append((who, p.share))
        scope = (*device, ("scope", row.usage_scope))
        if row.util_pct is not None:
            util.samples.append((scope, row.util_pct / 100.0))
        if row.fb_used_mib is not None:
            memory.samples.append((scope, row.fb_used_mib * 2**20))
        if row.effective_pct is not None:
            source = (*scope, ("source", row.effective_source or ""))
            effective.samples.append((source, row.effective_pct / 100.0))
        if row.telemetry != "unknown":
            for kind in WORK_KINDS:
                work.samples.append(((*device, ("work", kind)), 1.0 if row.work == kind else 0.0))
            for mark in HEALTH_MARKS:  # a mark the sample could not judge has no series
                if mark in row.health_watched or mark in row.health_marks:
                    set_ = 1.0 if mark in row.health_marks else 0.0
                    health.samples.append(((*device, ("mark", mark)), set_))
        if row.idle_s is not None:
            idle.samples.append((device, row.idle_s))
        for alert in row.open_alerts:
            alerts.samples.append(((*device, ("alert", alert)), 1.0))
        verdict = (("verdict", row.exporter_verdict), ("mode", row.exporter_mode))
        exporter.samples.append(((*device, *verdict), 1.0))
    devices = [info, holder, share, unknown, tenants, util, memory, idle, alerts, exporter]
    devices += [effective, work, health]
    return [*devices, *node_families(nodes), *pool_families(pools)]
