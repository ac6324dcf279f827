"""Output records: what workers emit. The streams side owns these; downstream consumers read them.

Honesty rules encoded in the shapes:
- ``Usage`` is always device-wide (or MIG-instance-wide): what the hardware measured.
- ``Holder.allocation_share`` is the share of the device's slots a holder was *allocated*; it is
  never a usage figure. No record carries a per-pod usage split on a shared device: a pod's
  ``PodShare.measured`` is what the hardware measured for that pod's own processes (per-process
  readings, credited only to a pod our join finds holding the device), never a division.
- ``Holder.uid`` comes from our own join (PodResources x pod watch), never from exporter labels.
"""

from __future__ import annotations

from typing import Literal

from contract.inputs import UsageSource
from contract.records import Record

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
    "stack-broken",  # dcgm-exporter waits on a broken lower plane of the GPU stack (``plane``)
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
#: how a pod's share of a device was decided (:mod:`streams.core.devices.accounting`): the ``whole``
#: device; slots held over the device's ``replicas``; consumed over the device's ``capacity``
#: (DRA consumable capacity); or, where no share exists (a claim shared by several pods, an
#: unknown replica count), an ``equal-split`` between the pods holding it — stated as such
ShareBasis = Literal["whole", "replicas", "capacity", "equal-split"]


class Workload(Record, frozen=True):
    kind: str
    name: str


class Holder(Record, frozen=True):
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


class Usage(Record, frozen=True):
    """What the hardware measured, for the whole device (or the whole MIG instance)."""

    scope: Literal["device", "mig-instance"]
    util_pct: float | None
    util_source: str | None
    fb_used_mib: float | None
    fb_free_mib: float | None
    power_w: float | None
    temp_c: float | None
    xid: int | None


#: which DCGM profiling field gave a device's effective activity: SM active where exported, else
#: the graphics engine's active ratio. Never GPU_UTIL (any kernel running is not effective work).
EffectiveSource = Literal["DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
#: what kind of work the device did (:mod:`streams.core.devices.efficiency` decides): tensor pipes
#: busy
#: (``tensor``); memory interface busy while compute stays low (``memory-bound``); SMs busy
#: (``compute``); little of anything (``light``); ``unknown`` when no profiling field says
WorkKind = Literal["tensor", "memory-bound", "compute", "light", "unknown"]


class Activity(Record, frozen=True):
    """Busy versus effective, for the whole device or MIG instance — never split per pod.

    ``busy_pct`` is the share of time *any* kernel ran (``DCGM_FI_DEV_GPU_UTIL``; on a MIG
    instance the graphics engine's active ratio): a GPU can be 100 % busy doing almost nothing.
    ``effective_pct`` is the share of SM cycles with work resident (``DCGM_FI_PROF_SM_ACTIVE``,
    else ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``); where neither is exported it is ``None`` and
    ``effective_reason`` says why — never derived from ``busy_pct``. Ratios are in percent."""

    busy_pct: float | None = None
    effective_pct: float | None = None
    effective_source: EffectiveSource | None = None
    effective_reason: str | None = None
    tensor_active_pct: float | None = None
    dram_active_pct: float | None = None
    sm_occupancy_pct: float | None = None
    mem_copy_util_pct: float | None = None
    work: WorkKind = "unknown"


#: a device's health marks (:mod:`streams.core.devices.health` decides): ``hot`` (GPU or memory
#: temperature
#: at or over its threshold), ``throttled`` (thermal throttling time rising, or a thermal
#: clock-event reason set), ``memory-fault`` (uncorrectable remapped rows or double-bit ECC errors
#: rising, or row remapping failed), ``pcie-replays`` (PCIe replays rising fast)
HealthMark = Literal["hot", "throttled", "memory-fault", "pcie-replays"]


#: who says a device is healthy or not: the kubelet in a holder's pod status (fed by the device
#: plugin's or the DRA plugin's health), the kubelet's allocatable list (an unhealthy
#: device-plugin ID leaves it while the pod keeps it), a taint on the DRA device, or DCGM's
#: readings
HealthSource = Literal["kubelet", "allocatable", "dra-taint", "dcgm"]
HealthState = Literal["healthy", "unhealthy", "unknown"]


class HealthSaid(Record, frozen=True):
    """One source's word on a device's health, as it said it: ``holder`` is the pod whose status
    carries the kubelet's word (``namespace/name``), ``effect`` a taint's (``NoExecute``: its
    holders are evicted), ``detail`` the source's own message or what it is based on."""

    source: HealthSource
    state: HealthState
    detail: str = ""
    holder: str = ""
    effect: str | None = None


class Health(Record, frozen=True):
    """What the hardware says of its own condition at this sample (device-wide). Counter figures
    are increases since the agent's previous scrape (``None`` at the first scrape, or where the
    counter reset: ``counter_resets`` names those). Where the kubelet (a holder's status, its
    allocatable list) or a DRA taint speaks for the device, ``sources`` lists every source's word
    (DCGM's beside them), disagreements kept, and ``verdict`` is ``unhealthy`` when any says so,
    else ``healthy`` when any says that, else ``unknown``."""

    gpu_temp_c: float | None = None
    memory_temp_c: float | None = None
    sm_clock_mhz: float | None = None
    power_w: float | None = None
    #: share of the interval spent throttled for heat / for power (violation µs over interval)
    thermal_throttle_pct: float | None = None
    power_throttle_pct: float | None = None
    clock_events: tuple[str, ...] = ()  # the clock-event reasons set, by name
    pcie_replays_per_min: float | None = None
    uncorrectable_remapped_rows: float | None = None  # totals as read
    correctable_remapped_rows: float | None = None
    row_remap_failure: bool | None = None
    ecc_dbe_volatile: float | None = None
    uncorrectable_remapped_rows_increase: float | None = None
    ecc_dbe_increase: float | None = None
    counter_resets: tuple[str, ...] = ()
    marks: tuple[HealthMark, ...] = ()
    #: the marks this sample could judge: their fields exported and, for a counter, its increase
    #: known. A mark not watched is unknown at this sample — not healthy
    watched: tuple[HealthMark, ...] = ()
    #: additive: each source's word where the kubelet or a DRA taint speaks for the device
    sources: tuple[HealthSaid, ...] = ()
    verdict: HealthState | None = None


class MigInstance(Record, frozen=True):
    instance_id: int | None
    profile: str | None


class ClaimedPod(Record, frozen=True):
    namespace: str
    pod: str
    container: str
    claim: str | None = None  # the DRA claim the exporter matched the row to


class ExporterView(Record, frozen=True):
    """Which pods dcgm-exporter's own labels credited, and whether that claim can be trusted."""

    claims: tuple[ClaimedPod, ...]
    trusted: bool
    reason: str
    mode: ExporterMode = "none"
    verdict: ExporterVerdict = "unchecked"  # additive: payloads before it read as unchecked


class Telemetry(Record, frozen=True):
    """Whether the event carries what the hardware measured, and if not, why."""

    status: TelemetryStatus = "measured"
    cause: TelemetryCause | None = None
    reason: str | None = None
    since_ms: int | None = None  # since when the cause holds, where known
    last_sample_ms: int | None = None  # the device's last trusted sample, where known
    #: the GPU stack's first broken boundary behind it, where the stack says (v2):
    #: ``container-toolkit`` for an exporter that waits on it, ``dcgm-exporter`` for its own
    plane: PlaneName | None = None


class Measured(Record, frozen=True):
    """What the hardware measured for one pod's own processes on a device, summed over them
    (``source``: dcgm-exporter's per-pod rows or NVML read by the agent): a per-process
    measurement, never a share of the device-wide figure. ``sm_util_pct`` is ``None`` on a MIG
    instance (NVML samples no per-process utilisation there)."""

    source: UsageSource
    fb_used_mib: float | None
    sm_util_pct: float | None


#: why a per-process reading is credited to no holder: its pod UID holds no slot on the device
#: at the reading's time (``not-a-holder``), the holder's UID is not known yet to check it
#: against (``holder-uid-unknown``), or the process belongs to no pod (``no-pod``)
UncreditedReason = Literal["not-a-holder", "holder-uid-unknown", "no-pod"]


class UncreditedReading(Record, frozen=True):
    """A per-process reading of the device that no holder is credited with, and why."""

    reason: UncreditedReason
    pod_uid: str = ""
    namespace: str = ""
    pod: str = ""
    pid: int | None = None
    container_id: str = ""
    fb_used_mib: float | None = None
    sm_util_pct: float | None = None


class PerPodUsage(Record, frozen=True):
    """How the device's per-process readings were joined with its holders: ``credited`` pods
    carry a ``measured`` figure (:class:`PodShare`); ``uncredited`` readings are listed with
    their reason; ``unread`` says why the source gave no pod reading to trust."""

    source: UsageSource
    credited: int = 0
    unread: str = ""
    uncredited: tuple[UncreditedReading, ...] = ()


class PodShare(Record, frozen=True):
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
    #: additive: what the hardware measured for this pod's processes on the device, where a
    #: source measured it per process (``None``: not measured; ``share`` stays an allocation)
    measured: Measured | None = None


class AttributionEvent(Record, frozen=True):
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
    #: additive: busy versus effective, and the device's health; device-wide. On an
    #: event without a reading (``telemetry.status`` unknown) both stay at their empty defaults.
    activity: Activity = Activity()
    health: Health = Health()
    #: additive: the device's per-process readings joined with its holders (``None``: no source
    #: measured this device per process)
    per_pod: PerPodUsage | None = None

    def identity(self) -> tuple[str, str, int, str]:
        """What names this event: a copy written again after a crash or rebalance has the same
        identity whatever its bytes (consumers keep the last copy per identity)."""
        return (self.node, self.device_uuid, self.ts_ms, self.origin)


class DeadLetter(Record, frozen=True):
    """An input the worker could not use, kept with where it came from and why."""

    source_topic: str
    partition: int
    offset: int
    key: str | None
    error: str
    payload_b64: str
    ts_ms: int


#: ``too-large``: larger than the worker sends (never handed to the producer);
#: ``broker-refused``: the producer or broker refused it as too large
OutputRefusalCause = Literal["too-large", "broker-refused"]


class OutputRefused(Record, frozen=True):
    """An output (or changelog record) the worker could not write for its size: dead-lettered in
    its place, naming it and why, never carrying its payload. The input that caused it is
    committed all the same (docs/RELIABILITY.md)."""

    topic: str  # where it was for
    partition: int | None  # its partition, where known
    key: str | None  # its key (cut: contract.bounds)
    size_bytes: int  # its key and value
    limit_bytes: int  # the most the worker sends (WorkerSettings.max_record_bytes)
    cause: OutputRefusalCause
    error: str  # what the producer said (cut), empty for ``too-large``
    ts_ms: int


class UsageUncredited(Record, frozen=True):
    """A per-process reading credited to no holder of the device: a process of a pod that holds
    no slot there at the reading's time, or of no pod at all (``reading.pid`` and
    ``container_id`` say which). ``holders`` are who held the device then."""

    node: str
    ts_ms: int
    device_uuid: str
    source: UsageSource
    reading: UncreditedReading
    holders: tuple[Holder, ...]
    summary: str


class ExporterMisattribution(Record, frozen=True):
    """dcgm-exporter credited a pod that holds no slot on that device at that time. ``holders``
    are the device's holders as attribution events name them (v2: with container, UID and
    workload; v1 had namespace and pod only)."""

    node: str
    ts_ms: int
    device_uuid: str
    claimed: ClaimedPod
    holders: tuple[Holder, ...]
    reason: str


RefusalCause = Literal["hostname", "foreign-devices", "unverifiable", "pci-bus-id"]


class TelemetryRefused(Record, frozen=True):
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


#: ``stack-broken`` is a node's (its GPU stack, :class:`StackBreak`), the others a device's
#: ``low-efficiency``: busy most of the window while effective activity stays low; ``thermal``,
#: ``memory-fault``, ``pcie-replays``: the device's health, joined to its holders at the time
AlertKind = Literal[
    "idle",
    "xid",
    "orphaned-memory",
    "stack-broken",
    "low-efficiency",
    "thermal",
    "memory-fault",
    "pcie-replays",
    "demand-while-idle",
    "idle-tenant",
    "memory-hog",
    "device-unhealthy",
]


class AlertFigures(Record, frozen=True):
    util_pct: float | None = None
    util_threshold_pct: float | None = None
    fb_used_mib: float | None = None
    fb_threshold_mib: float | None = None
    xid: int | None = None
    # additive
    effective_pct: float | None = None
    effective_threshold_pct: float | None = None
    effective_source: EffectiveSource | None = None
    busy_threshold_pct: float | None = None
    gpu_temp_c: float | None = None
    memory_temp_c: float | None = None
    temp_threshold_c: float | None = None
    thermal_throttle_pct: float | None = None
    uncorrectable_remapped_rows: float | None = None
    row_remap_failure: bool | None = None
    ecc_dbe_increase: float | None = None
    pcie_replays_per_min: float | None = None
    pcie_threshold_per_min: float | None = None
    # additive: a pool's demand while its allocated GPUs idle
    pending_pods: int | None = None
    gpus_requested: int | None = None
    oldest_wait_s: float | None = None
    #: additive: of those waiting, Kueue Workloads not admitted (no pods yet: they wait for quota)
    queued_workloads: int | None = None
    idle_gpus: int | None = None
    idle_for_s: float | None = None  # the shortest idle time among the idle GPUs named
    # additive: a device-unhealthy alert's sources, each as it said it
    health: tuple[HealthSaid, ...] = ()


class Alert(Record, frozen=True):
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
    #: additive (v1): a ``stack-broken`` alert's break (a node's alert: ``device_uuid`` and
    #: ``gpu_uuid`` are empty, ``holders`` are the pods on the GPUs it leaves without telemetry)
    stack: StackBreak | None = None
    #: additive: a ``demand-while-idle`` alert's pool (a pool's alert: ``node``,
    #: ``device_uuid`` and ``gpu_uuid`` are empty; ``holders`` are the idle GPUs' holders)
    demand: DemandBrief | None = None


#: the planes of a node's GPU stack, in dependency order (:mod:`streams.core.stack.operatorstack`)
PlaneName = Literal[
    "driver",
    "container-toolkit",
    "device-plugin",
    "dra-driver",
    "dcgm",
    "dcgm-exporter",
    "gpu-feature-discovery",
    "mig-manager",
    "operator-validator",
]
#: what was intended for a plane on this node: the operator ``deploy``s it; it is on the ``host``
#: (a pre-installed driver or toolkit); ``disabled`` on purpose; ``paused`` (a deploy label set to
#: another value, as the driver manager does across a driver reload); not labelled for this node
#: (``unlabelled``); or ``unknown`` (neither the ClusterPolicy nor the node's labels seen, or only
#: the operator's own ``…deploy.<operand>=true`` without a ClusterPolicy in charge)
IntentKind = Literal["deploy", "host", "disabled", "paused", "unlabelled", "unknown"]
#: which decided it: the ClusterPolicy's (or, on the DRA stack, the GPUCluster's)
#: ``spec.<operand>.enabled``, the NVIDIADriver that owns the node's driver, the operator's default
#: for an unset one, the node's ``nvidia.com/gpu.deploy.<operand>`` label, or the node-wide
#: ``nvidia.com/gpu.deploy.operands=false``
DecidedBy = Literal[
    "cluster-policy",
    "gpu-cluster",
    "nvidia-driver",
    "operator-default",
    "node-label",
    "operands-label",
    "none",
]
#: a plane's standing: ``ready``; ``not-ready`` (its own boundary is broken, as far as we see);
#: ``waiting`` on a lower plane that is not ready; ready but our agent cannot reach it
#: (``unreachable``) or its answers are not this node's (``refused``); ``disabled`` as intended;
#: ``unknown``
PlaneState = Literal[
    "ready", "not-ready", "waiting", "unreachable", "refused", "disabled", "unknown"
]
#: the node's stack: ``ready``; ``broken`` (``first_broken`` names where); ``reconciling`` (a MIG
#: reconfiguration in progress, nothing broken); ``disabled`` (every plane off on purpose);
#: ``unknown`` (the operator is not observed, or a plane cannot be judged yet); ``conflict`` (a
#: ClusterPolicy and a GPUCluster both exist: the operator refuses the GPUCluster, so the DRA
#: stack is not reconciled)
StackState = Literal["ready", "broken", "reconciling", "disabled", "unknown", "conflict"]


class PlaneIntent(Record, frozen=True):
    kind: IntentKind
    decided_by: DecidedBy
    detail: str  # what decided, as written: "nvidia.com/gpu.deploy.dcgm-exporter=false"


class PlanePod(Record, frozen=True):
    """The operand pod of a plane on this node, as its status says."""

    pod: str  # namespace/name
    phase: str
    ready: bool
    restarts: int
    reason: str = ""  # CrashLoopBackOff, ImagePullBackOff, …
    init_at: str = ""  # the init container it has not passed yet (toolkit-validation, …)


class PlaneReach(Record, frozen=True):
    """What our agent can reach of a plane: its source's word (``agent.status``)."""

    source: str  # dcgm, podresources
    state: str  # ok, failing, disabled, starting
    reason: str = ""
    since_ms: int | None = None


class Plane(Record, frozen=True):
    name: PlaneName
    state: PlaneState
    intent: PlaneIntent
    reason: str  # one line
    pod: PlanePod | None = None
    reach: PlaneReach | None = None
    waits_on: PlaneName | None = None  # the lower plane it waits on (state waiting)


class MigReconcile(Record, frozen=True):
    """MIG on this node: desired (``nvidia.com/mig.config``) versus reconciled
    (``nvidia.com/mig.config.state``), and the ClusterPolicy's ``spec.mig.strategy``."""

    strategy: str | None
    desired: str | None
    state: str | None  # success, pending, rebooting, failed
    reconciled: bool | None  # None: no MIG configuration for this node, or no MIG manager on
    reason: str


class PolicyStanding(Record, frozen=True):
    """The ClusterPolicy (or, on the DRA stack, the GPUCluster) as it says of itself
    (``status.state`` and its ``Ready``/``Error`` conditions)."""

    name: str
    state: str  # ready, notReady, ignored, disabled; "" before the operator wrote a status
    ready: bool | None
    message: str = ""
    kind: str = "ClusterPolicy"  # additive (v1): or GPUCluster


class NodeStatus(Record, frozen=True):
    """One node's GPU stack: per plane what was intended, what runs and what our agent reaches,
    the first broken boundary in dependency order, MIG desired versus reconciled, the
    ClusterPolicy's own word, and the one line that says why its telemetry is unknown."""

    node: str
    ts_ms: int
    state: StackState
    summary: str  # "container toolkit not ready on gpu-a; device plugin, … wait on it"
    planes: tuple[Plane, ...]
    mig: MigReconcile
    first_broken: PlaneName | None = None
    blocked: tuple[PlaneName, ...] = ()  # the planes that wait on the first broken one
    policy: PolicyStanding | None = None
    #: why usage is unknown on this node, when the stack says: "dcgm-exporter disabled on this
    #: node by nvidia.com/gpu.deploy.dcgm-exporter=false"; None when the stack says nothing
    telemetry_reason: str | None = None
    telemetry_disabled: bool = False  # the exporter is off on purpose (no alert for it)


class StackBreak(Record, frozen=True):
    """What a ``stack-broken`` alert is about: the node's first broken plane (one the operator
    was meant to run there: a plane disabled by intent never breaks), its reason, the planes
    that wait on it, and the node's held devices — those left without telemetry apart."""

    plane: PlaneName
    reason: str  # the plane's own line: "dcgm-exporter CrashLoopBackOff, 12 restarts"
    blocked: tuple[PlaneName, ...]  # the planes that wait on it
    held: tuple[str, ...]  # device UUIDs a pod holds on the node
    unmeasured: tuple[str, ...]  # of those, the ones without a trusted reading


class Pool(Record, frozen=True):
    """GPUs a pending pod could be given: a resource, and the product and MIG profile where the
    pod's request says so (``""``: any)."""

    resource: str
    product: str = ""
    mig_profile: str = ""

    def key(self) -> str:
        """``nvidia.com/gpu``, ``nvidia.com/gpu|product=NVIDIA-A100-SXM4-80GB``, …"""
        parts = [self.resource]
        if self.product:
            parts.append(f"product={self.product}")
        if self.mig_profile:
            parts.append(f"mig={self.mig_profile}")
        return "|".join(parts)


#: what a waiter waits for: a pending pod for the ``scheduler``; a Kueue Workload not admitted
#: yet (its Job suspended, no pods) for ``quota``
WaitsFor = Literal["scheduler", "quota"]


class WaitingPod(Record, frozen=True):
    """A pod waiting for GPUs of a pool, with the scheduler's word — or, ``waits_for`` ``quota``, a
    Kueue Workload not admitted yet (``pod`` its name, ``workload`` the job it stands for), with
    Kueue's word and its queue."""

    namespace: str
    pod: str
    uid: str
    gpus: int
    since_ms: int  # when it was created (a Workload: or last evicted): its wait began
    priority: int = 0
    workload: str | None = None  # "Kind/name"
    reason: str = ""  # PodScheduled reason (a Workload: its QuotaReserved reason)
    message: str = ""  # PodScheduled message (a Workload: Kueue's message)
    waits_for: WaitsFor = "scheduler"  # additive (v1)
    queue: str = ""  # additive: a Workload's LocalQueue
    cluster_queue: str = ""  # additive: its ClusterQueue ("" while unknown)


class IdleGpu(Record, frozen=True):
    """An allocated device of the pool that has been measured idle since ``since_ms``."""

    node: str
    device_uuid: str
    since_ms: int
    holders: tuple[Holder, ...] = ()


class PoolDemand(Record, frozen=True):
    """A pool's demand and supply at ``ts_ms``: the pods waiting for its GPUs and the Kueue
    Workloads queued for them (oldest first, at most ``WAITING_LISTED``; ``pending_pods`` and
    ``queued_workloads`` count them all) and, in the same pool, the allocated
    GPUs and those measured idle with their holders (longest idle first, at most ``IDLE_LISTED``;
    ``idle_gpus`` counts them all, ``idle_latest_since_ms`` is when the most recent of them began
    idling). Emitted on change to the compacted demand topic, keyed by ``pool`` (a change of the
    supply-side figures alone at most once per ``GPUATTR_WORKER_DEMAND_SUPPLY_EVERY_S`` of event
    time, :mod:`streams.core.demand.demand`); a tombstone when
    nobody waits and nothing of the pool is allocated. A record is bounded whatever the pool's
    size (a record listing every idle GPU of a large pool outgrew Kafka's 1 MB message limit)."""

    ts_ms: int
    pool: str  # Pool.key()
    resource: str
    product: str
    mig_profile: str
    pending_pods: int
    gpus_requested: int
    oldest_since_ms: int | None
    waiting: tuple[WaitingPod, ...]
    allocated_gpus: int
    idle: tuple[IdleGpu, ...]
    #: allocated devices of the pool whose usage is unknown (never counted idle)
    unmeasured_gpus: int = 0
    #: additive: every idle GPU of the pool (``idle`` lists the longest idle); 0 in records
    #: written before it, which listed every idle GPU
    idle_gpus: int = 0
    #: additive: when the most recently idle of them began idling (``None``: none idle, or a
    #: record written before it)
    idle_latest_since_ms: int | None = None
    #: additive: Kueue Workloads not admitted that ask for the pool's GPUs (listed in ``waiting``
    #: with ``waits_for`` ``quota``; not in ``pending_pods``: they have no pods), and the GPUs of
    #: ``gpus_requested`` they ask: what waits for quota; the rest waits for the scheduler
    queued_workloads: int = 0
    gpus_for_quota: int = 0

    def idle_count(self) -> int:
        """Every idle GPU of the pool (records written before ``idle_gpus`` listed them all)."""
        return max(self.idle_gpus, len(self.idle))


#: how many waiting pods a demand record lists (every pod is counted)
WAITING_LISTED = 50
#: how many idle GPUs a demand record lists, longest idle first (every idle GPU is counted)
IDLE_LISTED = 50


class DemandBrief(Record, frozen=True):
    """What a ``demand-while-idle`` alert is about."""

    pool: str
    resource: str
    product: str
    mig_profile: str
    waiting: tuple[WaitingPod, ...]  # oldest first, at most WAITING_LISTED
    idle: tuple[IdleGpu, ...]


class PoolDemandRetired(Record, frozen=True):
    """A pool with nobody waiting and nothing allocated: its key on the demand topic is removed
    with a tombstone. Never encoded: no kind."""

    pool: str


class NodeStatusRetired(Record, frozen=True):
    """The node left (deleted in the API, or silent past its TTL): its key on the compacted
    node-status topic is removed with a tombstone (a null value). Never encoded: no kind."""

    node: str


#: Record kinds the workers publish, with their schema versions (see :mod:`contract.codec`).
KINDS: dict[str, tuple[type, int] | tuple[type, int, tuple[int, ...]]] = {
    # v2: a telemetry cause "stack-broken" and the plane behind it (v1 still read)
    "attribution": (AttributionEvent, 2, (1,)),
    "deadletter": (DeadLetter, 1),
    "output.refused": (OutputRefused, 1),
    "exporter.misattribution": (ExporterMisattribution, 2),
    "usage.uncredited": (UsageUncredited, 1),
    "telemetry.refused": (TelemetryRefused, 1),
    "alert": (Alert, 1),
    "node-status": (NodeStatus, 1),
    "demand": (PoolDemand, 1),
}
