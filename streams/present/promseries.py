"""Attribution as Prometheus series, kube-state-metrics style. Pure.

Built from the device rows a worker owns now (:meth:`streams.worker.live.LiveDevices.rows`), so
a device's series leave a worker with its partition and the cardinality is bounded by live
devices and their holders — never by samples. Info series carry identity (value 1); gauges carry
units in their names.

Utilisation and memory are the device's (``scope`` says ``device`` or ``mig-instance``); who
holds the device is a separate info series. The only per-pod usage series are measurements:
``gpuattr_pod_device_memory_used_bytes`` and ``gpuattr_pod_device_sm_utilization_ratio`` exist
for a pod only where the hardware measured its own processes on the device (per-process
readings credited by our join; ``source`` says ``exporter`` or ``nvml``) — never a split of the
device's figure, and absent (unknown) where nothing measured it. Each pod's share
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

Each family is one pure function of the rows (kube-state-metrics style: name, help, type, rows →
samples); :func:`families` lists them in exposition order and the worker's exporter
(:mod:`streams.worker.promexport`) renders that list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from contract.outputs import HealthMark, WorkKind
from contract.records import fast_init
from streams.present.noderows import STATE_ORDER, NodeRow
from streams.present.poolrows import PoolRow
from streams.present.views import DeviceRow, PodShareRow

Labels = tuple[tuple[str, str], ...]
Sample = tuple[Labels, float]
#: every attribution family is a gauge: info series carry 1, the others a figure
FamilyType = Literal["gauge"]


@fast_init
@dataclass(frozen=True, slots=True)
class Family:
    name: str
    help: str
    samples: list[Sample]
    type: FamilyType = "gauge"


#: every kind of work and every health mark, in the contract's order: one series each per device
WORK_KINDS: tuple[str, ...] = get_args(WorkKind)
HEALTH_MARKS: tuple[str, ...] = get_args(HealthMark)


#: a plane's own boundary is broken (not merely waiting on a lower one, or disabled)
PLANE_BROKEN = frozenset({"not-ready", "unreachable", "refused"})


def _device(row: DeviceRow) -> Labels:
    return (("node", row.node), ("device_uuid", row.device_uuid))


def _live(rows: Sequence[DeviceRow]) -> list[DeviceRow]:
    """The rows something held, measured or open is claimed for: a stale device keeps only its
    info (and telemetry-unknown) series, its last known state."""
    return [row for row in rows if not row.stale]


def _workload(workload: str | None) -> tuple[tuple[str, str], tuple[str, str]]:
    kind, _, name = (workload or "").partition("/")
    return ("workload_kind", kind), ("workload_name", name)


def _scope(row: DeviceRow) -> Labels:
    return (*_device(row), ("scope", row.usage_scope))


# --- devices


def device_info(rows: Sequence[DeviceRow]) -> Family:
    return Family(
        "gpuattr_device_info",
        "A device (GPU or MIG instance) and how it is held",
        [
            (
                (
                    *_device(row),
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
            for row in rows
        ],
    )


def device_holder_info(rows: Sequence[DeviceRow]) -> Family:
    return Family(
        "gpuattr_device_holder_info",
        "A pod holding a device, from our own join (value 1)",
        [
            (
                (
                    *_device(row),
                    ("namespace", h.namespace),
                    ("pod", h.pod),
                    ("container", h.container),
                    ("pod_uid", h.uid or ""),
                    *_workload(h.workload),
                    ("claim", h.claim or ""),
                ),
                1.0,
            )
            for row in _live(rows)
            for h in row.holders
        ],
    )


def pod_device_share(rows: Sequence[DeviceRow]) -> Family:
    return Family(
        "gpuattr_pod_device_share",
        "Each pod's share of the device (allocation, not usage; basis: whole, replicas, capacity "
        "or equal-split): what GPUs held and GPU-hours sum",
        [
            (
                (
                    *_device(row),
                    ("namespace", p.namespace),
                    ("pod", p.pod),
                    ("pod_uid", p.uid or ""),
                    *_workload(p.workload),
                    ("basis", p.basis),
                ),
                p.share,
            )
            for row in _live(rows)
            for p in row.pods
        ],
    )


def _measured_pod(row: DeviceRow, p: PodShareRow) -> Labels:
    return (
        *_device(row),
        ("namespace", p.namespace),
        ("pod", p.pod),
        ("pod_uid", p.uid or ""),
        ("source", p.measured_source or ""),
    )


def _measured_family(
    name: str, help: str, value: Callable[[PodShareRow], float | None]
) -> Callable[[Sequence[DeviceRow]], Family]:
    """A family of each holder pod's measured figure (absent where not measured)."""

    def family(rows: Sequence[DeviceRow]) -> Family:
        return Family(
            name,
            help,
            [
                (_measured_pod(row, p), figure)
                for row in _live(rows)
                for p in row.pods
                if (figure := value(p)) is not None
            ],
        )

    family.__name__ = name.removeprefix("gpuattr_")
    return family


pod_device_memory_used_bytes = _measured_family(
    "gpuattr_pod_device_memory_used_bytes",
    "Framebuffer the pod's own processes use on the device, measured per process (source: "
    "exporter or nvml); absent where not measured, never a split of the device's figure",
    lambda p: None if p.measured_fb_mib is None else p.measured_fb_mib * 2**20,
)
pod_device_sm_utilization_ratio = _measured_family(
    "gpuattr_pod_device_sm_utilization_ratio",
    "SM utilisation of the pod's own processes on the device (0-1), sampled per process by "
    "NVML; absent where not measured (MIG instances: never)",
    lambda p: None if p.measured_sm_pct is None else p.measured_sm_pct / 100.0,
)


def device_telemetry_unknown(rows: Sequence[DeviceRow]) -> Family:
    return Family(
        "gpuattr_device_telemetry_unknown",
        "1 while no fresh sample speaks for the device, by cause (its reason is in the events)",
        [
            ((*_device(row), ("cause", row.telemetry_cause or "")), 1.0)
            for row in rows
            if row.telemetry == "unknown"
        ],
    )


def device_tenants(rows: Sequence[DeviceRow]) -> Family:
    return Family(
        "gpuattr_device_tenants",
        "Pods holding the device",
        [(_device(row), float(row.tenant_count)) for row in _live(rows)],
    )


def device_utilization_ratio(rows: Sequence[DeviceRow]) -> Family:
    return Family(
        "gpuattr_device_utilization_ratio",
        "Utilisation of the whole device or MIG instance (scope), never of a pod",
        [(_scope(row), row.util_pct / 100.0) for row in _live(rows) if row.util_pct is not None],
    )


def device_memory_used_bytes(rows: Sequence[DeviceRow]) -> Family:
    return Family(
        "gpuattr_device_memory_used_bytes",
        "Framebuffer used on the device or MIG instance",
        [
            (_scope(row), row.fb_used_mib * 2**20)
            for row in _live(rows)
            if row.fb_used_mib is not None
        ],
    )


def device_idle_seconds(rows: Sequence[DeviceRow]) -> Family:
    return Family(
        "gpuattr_device_idle_seconds",
        "How long the held device has been idle",
        [(_device(row), row.idle_s) for row in _live(rows) if row.idle_s is not None],
    )


def device_open_alerts(rows: Sequence[DeviceRow]) -> Family:
    return Family(
        "gpuattr_device_open_alerts",
        "Open alerts on the device (value 1)",
        [((*_device(row), ("alert", a)), 1.0) for row in _live(rows) for a in row.open_alerts],
    )


def device_exporter_verdict(rows: Sequence[DeviceRow]) -> Family:
    return Family(
        "gpuattr_device_exporter_verdict",
        "What dcgm-exporter's own pod labels amount to on the device's latest sample, checked "
        "against our join (value 1): trusted, unchecked, stranger, wrong-claim, shared-device, "
        "per-process or uncredited",
        [
            (
                (
                    *_device(row),
                    ("verdict", row.exporter_verdict),
                    ("mode", row.exporter_mode),
                ),
                1.0,
            )
            for row in _live(rows)
        ],
    )


def device_effective_ratio(rows: Sequence[DeviceRow]) -> Family:
    return Family(
        "gpuattr_device_effective_ratio",
        "Effective activity of the whole device or MIG instance (scope): SM active, else the "
        "graphics engine's active ratio (source). Absent where no profiling field is exported: "
        "unknown, never derived from utilisation, never a pod's",
        [
            ((*_scope(row), ("source", row.effective_source or "")), row.effective_pct / 100.0)
            for row in _live(rows)
            if row.effective_pct is not None
        ],
    )


def device_work(rows: Sequence[DeviceRow]) -> Family:
    return Family(
        "gpuattr_device_work",
        "What kind of work the device does, one series per kind (value 1 for the current one): "
        "tensor, memory-bound, compute, light or unknown (no profiling field)",
        [
            ((*_device(row), ("work", kind)), 1.0 if row.work == kind else 0.0)
            for row in _live(rows)
            if row.telemetry != "unknown"
            for kind in WORK_KINDS
        ],
    )


def device_health(rows: Sequence[DeviceRow]) -> Family:
    return Family(
        "gpuattr_device_health",
        "The device's health marks, one series per mark (value 1 while set): hot, throttled, "
        "memory-fault, pcie-replays; absent while the device has no reading or the mark's fields "
        "are not exported (unknown, not healthy)",
        [
            ((*_device(row), ("mark", mark)), 1.0 if mark in row.health_marks else 0.0)
            for row in _live(rows)
            if row.telemetry != "unknown"
            for mark in HEALTH_MARKS
            # a mark the sample could not judge has no series
            if mark in row.health_watched or mark in row.health_marks
        ],
    )


def device_source_unhealthy(rows: Sequence[DeviceRow]) -> Family:
    return Family(
        "gpuattr_device_source_unhealthy",
        "Each source's word on the device's health (source: kubelet, allocatable, dra-taint, "
        "dcgm): 1 while it says unhealthy, 0 while it says healthy; absent where it says nothing "
        "or cannot tell, "
        "and on devices only DCGM speaks for (their marks are gpuattr_device_health)",
        [
            ((*_device(row), ("source", source)), 1.0 if state == "unhealthy" else 0.0)
            for row in _live(rows)
            for source, state in sorted(
                {src: st for src, st, _ in _worst(row.health_sources)}.items()
            )
            if state != "unknown"
        ],
    )


def _worst(words: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """One word per source, its worst (a source speaking per holder may say both)."""
    rank = {"unknown": 0, "healthy": 1, "unhealthy": 2}
    return sorted(words, key=lambda w: rank.get(w[1], 0))


# --- nodes


def node_stack_state(nodes: Sequence[NodeRow]) -> Family:
    return Family(
        "gpuattr_node_stack_state",
        "The node's GPU Operator stack, one series per state (value 1 for the current one): "
        "ready, broken, conflict (a ClusterPolicy and a GPUCluster both exist), reconciling, "
        "disabled or unknown",
        [
            ((("node", row.node), ("state", name)), 1.0 if row.state == name else 0.0)
            for row in nodes
            for name in STATE_ORDER
        ],
    )


def node_plane_broken(nodes: Sequence[NodeRow]) -> Family:
    return Family(
        "gpuattr_node_plane_broken",
        "1 where a plane of the node's GPU stack is broken at its own boundary (not ready, or "
        "ready but unreachable or not this node's); 0 when ready, waiting on a lower plane, "
        "disabled or unknown",
        [
            ((("node", row.node), ("plane", p.name)), 1.0 if p.state in PLANE_BROKEN else 0.0)
            for row in nodes
            for p in row.planes
        ],
    )


def node_stack_alert_open(nodes: Sequence[NodeRow]) -> Family:
    return Family(
        "gpuattr_node_stack_alert_open",
        "1 while the node's stack-broken alert is open (an intended plane broken, GPUs held)",
        [((("node", row.node),), 1.0 if row.alert else 0.0) for row in nodes],
    )


# --- pools


def _pool(row: PoolRow) -> Labels:
    return (
        ("pool", row.pool),
        ("resource", row.resource),
        ("product", row.product),
        ("mig_profile", row.mig_profile),
    )


def pool_pending_pods(pools: Sequence[PoolRow]) -> Family:
    return Family(
        "gpuattr_pool_pending_pods",
        "Pods the scheduler has not placed that wait for GPUs of the pool (resource, and product "
        'and MIG profile where the pod asks for one; "" is any)',
        [(_pool(row), float(row.pending_pods)) for row in pools],
    )


def pool_queued_workloads(pools: Sequence[PoolRow]) -> Family:
    return Family(
        "gpuattr_pool_queued_workloads",
        "Kueue Workloads not admitted yet (their jobs suspended, no pods) that ask for GPUs of the "
        "pool: demand waiting for quota, not in gpuattr_pool_pending_pods",
        [(_pool(row), float(row.queued_workloads)) for row in pools],
    )


def pool_gpus_for_quota(pools: Sequence[PoolRow]) -> Family:
    return Family(
        "gpuattr_pool_gpus_for_quota",
        "Of gpuattr_pool_gpus_requested, those the pool's queued Kueue Workloads ask for: what "
        "waits for quota; the rest waits for the scheduler",
        [(_pool(row), float(row.gpus_for_quota)) for row in pools],
    )


def pool_gpus_requested(pools: Sequence[PoolRow]) -> Family:
    return Family(
        "gpuattr_pool_gpus_requested",
        "GPUs (or MIG instances) the pool's waiting pods and queued Kueue Workloads ask for: the "
        "funnel's requested step",
        [(_pool(row), float(row.gpus_requested)) for row in pools],
    )


def pool_oldest_wait_seconds(pools: Sequence[PoolRow]) -> Family:
    return Family(
        "gpuattr_pool_oldest_wait_seconds",
        "How long the pool's oldest waiting pod has waited (since its creation, event time)",
        [(_pool(row), row.oldest_wait_s) for row in pools if row.oldest_wait_s is not None],
    )


def pool_allocated_gpus(pools: Sequence[PoolRow]) -> Family:
    return Family(
        "gpuattr_pool_allocated_gpus",
        "Allocated devices that match the pool (a device may match several pools: do not sum "
        "across pools)",
        [(_pool(row), float(row.allocated_gpus)) for row in pools],
    )


def pool_idle_gpus(pools: Sequence[PoolRow]) -> Family:
    return Family(
        "gpuattr_pool_idle_gpus",
        "Of the pool's allocated devices, those measured idle (usage unknown is never idle)",
        [(_pool(row), float(row.idle_gpus)) for row in pools],
    )


#: the families, in exposition order
DEVICE_FAMILIES: tuple[Callable[[Sequence[DeviceRow]], Family], ...] = (
    device_info,
    device_holder_info,
    pod_device_share,
    device_telemetry_unknown,
    device_tenants,
    device_utilization_ratio,
    device_memory_used_bytes,
    device_idle_seconds,
    device_open_alerts,
    device_exporter_verdict,
    device_effective_ratio,
    device_work,
    device_health,
    pod_device_memory_used_bytes,
    pod_device_sm_utilization_ratio,
    device_source_unhealthy,
)
NODE_FAMILIES: tuple[Callable[[Sequence[NodeRow]], Family], ...] = (
    node_stack_state,
    node_plane_broken,
    node_stack_alert_open,
)
POOL_FAMILIES: tuple[Callable[[Sequence[PoolRow]], Family], ...] = (
    pool_pending_pods,
    pool_queued_workloads,
    pool_gpus_requested,
    pool_gpus_for_quota,
    pool_oldest_wait_seconds,
    pool_allocated_gpus,
    pool_idle_gpus,
)


def node_families(nodes: Iterable[NodeRow]) -> list[Family]:
    chosen = list(nodes)
    return [family(chosen) for family in NODE_FAMILIES]


def pool_families(pools: Iterable[PoolRow]) -> list[Family]:
    chosen = list(pools)
    return [family(chosen) for family in POOL_FAMILIES]


def families(
    rows: Iterable[DeviceRow], nodes: Iterable[NodeRow] = (), pools: Iterable[PoolRow] = ()
) -> list[Family]:
    """Every family over the rows, in exposition order."""
    devices = list(rows)
    return [
        *(family(devices) for family in DEVICE_FAMILIES),
        *node_families(nodes),
        *pool_families(pools),
    ]
