"""Input records: what node agents publish and the worker reads (the wire contract).

Every record is frozen (:mod:`contract.records`) and carries its node and its source timestamp
(``ts_ms``).
They travel through :mod:`contract.codec` with a ``schema`` name and version ``v``.
"""

from __future__ import annotations

from typing import Literal

from contract.records import Record

#: ``DeviceAssignment.resource`` of a device allocated through DRA: ``dra:<driver>``, with
#: ``device_id`` ``<pool>/<device>``
DRA_PREFIX = "dra:"


class DeviceAssignment(Record, frozen=True, order=True):
    """One device ID handed by the kubelet to one container (a row of PodResources ``List``).

    A DRA row (``resource`` ``dra:<driver>``) also names the ResourceClaim that holds the device
    (``claim``: ``<namespace>/<name>``) and, for a consumable-capacity share of a device, the
    allocation's ``share_id``. Empty means none: text, not ``None``, so rows always order."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str
    claim: str = ""
    share_id: str = ""


class AllocatableDevice(Record, frozen=True, order=True):
    """One device the kubelet can hand out (``GetAllocatableResources``)."""

    resource: str
    device_id: str
    numa_nodes: tuple[int, ...] = ()


class PodResourcesSnapshot(Record, frozen=True):
    """Every device assignment on a node at ``ts_ms``: enough to rebuild state from scratch."""

    node: str
    ts_ms: int
    assignments: tuple[DeviceAssignment, ...]
    allocatable: tuple[AllocatableDevice, ...] = ()


class PodResourcesDiff(Record, frozen=True):
    """Assignments that appeared or disappeared between two consecutive ``List`` polls."""

    node: str
    ts_ms: int
    added: tuple[DeviceAssignment, ...]
    removed: tuple[DeviceAssignment, ...]


class ExporterClaim(Record, frozen=True):
    """Pod labels dcgm-exporter stamped on a row: its claim, not our attribution. With
    ``--kubernetes-enable-dra`` it also names the DRA claim (``namespace/name``) and device
    (``driver/pool/device``) it matched the row to."""

    namespace: str
    pod: str
    container: str
    pod_uid: str | None = None
    vgpu: str | None = None
    dra_claim: str | None = None
    dra_device: str | None = None
    dra_mig_profile: str | None = None
    dra_mig_uuid: str | None = None


#: where per-pod readings came from: dcgm-exporter's virtual-GPU rows
#: (``--kubernetes-virtual-gpus``, summed per pod by the exporter) or NVML read by the agent
#: itself (processes mapped to pods through ``/proc/<pid>/cgroup``)
UsageSource = Literal["exporter", "nvml"]


class PodUsage(Record, frozen=True):
    """What the hardware measured for one pod's processes on one device, summed over them.

    ``pod_uid`` is the reading's own (the exporter's ``pod_uid`` label, or the pod cgroup of the
    process): the worker credits it only to a pod of that UID that holds the device. A pod
    listed with no process reads ``0``, not absent. ``sm_util_pct`` is ``None`` on a MIG
    instance: NVML samples no per-process utilisation there. ``copies`` is how many rows (a
    pod's replicas, or its containers on the device) carried this one reading: never added up."""

    pod_uid: str
    namespace: str = ""
    pod: str = ""
    container: str = ""
    fb_used_mib: float | None = None
    sm_util_pct: float | None = None
    copies: int = 1


class ProcessUsage(Record, frozen=True):
    """A process on the device that belongs to no pod the source could name: its PID and, when
    its cgroup names one, its container (``container_id``) and the pod UID found there that no
    live pod has. What a zombie process or an orphaned container holds."""

    pid: int
    container_id: str = ""
    pod_uid: str = ""
    fb_used_mib: float | None = None
    sm_util_pct: float | None = None


class DeviceUsage(Record, frozen=True):
    """Per-pod readings of one device (GPU or MIG instance) at the sample's time: what the
    hardware measured per process, by ``source``. The device-wide figure stays on the sample."""

    source: UsageSource
    pods: tuple[PodUsage, ...] = ()
    orphans: tuple[ProcessUsage, ...] = ()
    #: why the source gave rows but no pod reading can be trusted (its processes could not be
    #: mapped to pods: every per-pod row reads 0 while the device works); empty when read
    unread: str = ""


#: the cumulative DCGM counters the agent turns into increases (:class:`SinceLast`)
CounterName = Literal[
    "pcie_replays",
    "ecc_dbe_volatile",
    "uncorrectable_remapped_rows",
    "correctable_remapped_rows",
    "power_violation_us",
    "thermal_violation_us",
]


class SinceLast(Record, frozen=True):
    """What each cumulative counter of a device did since the agent's previous scrape of it,
    ``interval_ms`` earlier (:mod:`agents.dcgm.counters` decides). An increase is ``None`` when
    the counter is not exported in both scrapes, or when it went backwards (``resets`` names it:
    the exporter or driver restarted, so the increase over the interval is not known — never a
    negative, never a false rise)."""

    interval_ms: int
    pcie_replays: float | None = None
    ecc_dbe_volatile: float | None = None
    uncorrectable_remapped_rows: float | None = None
    correctable_remapped_rows: float | None = None
    power_violation_us: float | None = None
    thermal_violation_us: float | None = None
    resets: tuple[CounterName, ...] = ()


class DcgmSample(Record, frozen=True):
    """One GPU (or MIG instance) as one dcgm-exporter scrape saw it.

    ``uuid`` is the physical GPU's UUID as the exporter labels it; MIG rows add
    ``mig_instance_id`` (``GPU_I_ID``) and ``mig_profile`` (``GPU_I_PROFILE``).
    Missing fields are ``None``: the exporter's field set is configurable.
    """

    node: str
    ts_ms: int
    uuid: str
    gpu_index: int | None
    model: str
    hostname: str
    device: str = ""
    pci_bus_id: str = ""
    driver_version: str = ""
    mig_instance_id: int | None = None
    mig_profile: str | None = None
    util_pct: float | None = None
    gr_engine_active: float | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    xid: int | None = None
    exporter_claims: tuple[ExporterClaim, ...] = ()
    #: fields whose rows for this device carried *different* values per pod (the exporter's
    #: per-process mode): those values are not a device-wide reading and are left out (None).
    exporter_split_fields: tuple[str, ...] = ()
    # --- additive: profiling ratios 0-1 (DCGM_FI_PROF_*, per MIG instance too)
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    # gauges, in the exporter's units
    mem_copy_util_pct: float | None = None  # DCGM_FI_DEV_MEM_COPY_UTIL, %
    memory_temp_c: float | None = None  # DCGM_FI_DEV_MEMORY_TEMP, °C
    sm_clock_mhz: float | None = None  # DCGM_FI_DEV_SM_CLOCK, MHz
    row_remap_failure: bool | None = None  # DCGM_FI_DEV_ROW_REMAP_FAILURE, 0/1
    #: DCGM_FI_DEV_CLOCKS_EVENT_REASONS (older: DCGM_FI_DEV_CLOCK_THROTTLE_REASONS), NVML bitmask
    clock_event_reasons: int | None = None
    # cumulative counters as read (totals since the driver or exporter started)
    pcie_replays: float | None = None  # DCGM_FI_DEV_PCIE_REPLAY_COUNTER
    ecc_dbe_volatile: float | None = None  # DCGM_FI_DEV_ECC_DBE_VOL_TOTAL
    uncorrectable_remapped_rows: float | None = None  # DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS
    correctable_remapped_rows: float | None = None  # DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS
    power_violation_us: float | None = None  # DCGM_FI_DEV_POWER_VIOLATION, µs throttled
    thermal_violation_us: float | None = None  # DCGM_FI_DEV_THERMAL_VIOLATION, µs throttled
    #: the counters' increases since the agent's previous scrape of this device (None: the
    #: first scrape the agent made of it)
    since_last: SinceLast | None = None
    #: additive: what the hardware measured per pod on this device, where a source gives it
    usage: DeviceUsage | None = None


class DcgmScrape(Record, frozen=True):
    """One scrape of a node's dcgm-exporter: every GPU and MIG instance it showed, at one time.

    What agents publish (one record per node per scrape, ``dcgm.scrape``); the worker still
    reads single ``dcgm.sample`` records from older agents. Each sample keeps its own ``node``
    and ``ts_ms``, equal to the scrape's."""

    node: str
    ts_ms: int
    samples: tuple[DcgmSample, ...]
    #: additive: where the agent scraped it (URL) and, when found through the pod watch, the
    #: exporter pod (``namespace/name``): the worker checks the rows are this node's
    exporter: str = ""
    exporter_pod: str = ""


class OwnerRef(Record, frozen=True):
    """A controller: the pod's direct owner, or the workload it resolves to."""

    kind: str
    name: str
    inferred: bool = False


#: a device's health as the kubelet writes it (``v1.ResourceHealthStatus``)
ResourceHealthState = Literal["Healthy", "Unhealthy", "Unknown"]


class ResourceHealth(Record, frozen=True):
    """One allocated device's health as the kubelet writes it into the pod's status (KEP-4680,
    gate ``ResourceHealthStatus``: ``status.containerStatuses[].allocatedResourcesStatus``): the
    container, the resource (``nvidia.com/gpu``; ``claim:<claim>[/<request>]`` for DRA), the
    device (``resource_id``: the device ID exactly as allocated, ``GPU-<uuid>::<n>``; for DRA
    the device's first CDI id or ``<driver>/<pool>/<device>``), its health and the DRA plugin's
    message (a device plugin never gives one). Fed by the device plugin's ``ListAndWatch`` or the
    DRA plugin's ``NodeHealth.WatchResources``: the kubelet's own join of health to its holder."""

    container: str
    resource: str
    resource_id: str
    health: ResourceHealthState
    message: str = ""


class PodRecord(Record, frozen=True):
    """A pod as the API server sees it (one watch event), compact.

    ``deleted`` is set when the watch reports DELETED (the object is gone from the API server);
    ``deletion_ts_ms`` when deletion was requested (the pod keeps its devices until its
    containers stop). Only what the worker reads crosses the wire (v2 dropped phase, containers,
    GPU requests and limits, labels and the grace period, which nothing read; v3 carries the
    kubelet's health of each allocated device, ``resource_health``).
    """

    node: str
    ts_ms: int
    uid: str
    namespace: str
    name: str
    created_ms: int | None
    deletion_ts_ms: int | None = None
    deleted: bool = False
    annotations: tuple[tuple[str, str], ...] = ()
    owner: OwnerRef | None = None
    workload: OwnerRef | None = None
    resource_version: str = ""
    resource_health: tuple[ResourceHealth, ...] = ()


class PodListSnapshot(Record, frozen=True):
    """Every pod UID on the node after a (re)list: pods missing from it are gone."""

    node: str
    ts_ms: int
    uids: tuple[str, ...]
    resource_version: str = ""


class NodeRecord(Record, frozen=True):
    """A node's GPU-related labels (``nvidia.com/*``) and allocatable ``nvidia.com/*`` capacity."""

    node: str
    ts_ms: int
    labels: tuple[tuple[str, str], ...]
    allocatable: tuple[tuple[str, str], ...] = ()
    deleted: bool = False
    resource_version: str = ""


class GpuInfo(Record, frozen=True):
    index: int
    uuid: str
    model: str = ""
    #: additive: NVML's PCI bus id (``00000000:3B:00.0``), "" where unknown: what an exporter's
    #: ``pci_bus_id`` label is checked against
    pci_bus_id: str = ""


class MigInfo(Record, frozen=True):
    """One MIG device: new-style MIG UUIDs do not encode their parent, NVML does."""

    mig_uuid: str
    parent_uuid: str
    gi: int
    profile: str | None = None


class DeviceInventory(Record, frozen=True):
    """A node's GPUs and MIG devices, read through NVML (or a static file where NVML is absent)."""

    node: str
    ts_ms: int
    source: str
    gpus: tuple[GpuInfo, ...]
    migs: tuple[MigInfo, ...] = ()


#: what a device taint does (``resource.k8s.io`` ``DeviceTaint.effect``): no new allocation
#: (``NoSchedule``), the holders evicted (``NoExecute``), or only said (``None``)
TaintEffect = Literal["NoSchedule", "NoExecute", "None"]


class DeviceTaint(Record, frozen=True):
    """A taint on a DRA device (KEP-5055): in its ResourceSlice (``spec.devices[].taints``, set
    by its driver: NVIDIA's taints GPUs on health events) or from a ``DeviceTaintRule``."""

    key: str
    effect: TaintEffect
    value: str = ""
    time_added_ms: int | None = None


class DraDevice(Record, frozen=True):
    """One device a DRA driver publishes in a ResourceSlice, with the attributes we join on.

    The NVIDIA driver names full GPUs ``gpu-<minor>`` (``type`` ``gpu``, ``uuid``) and MIG
    placements ``gpu-<minor>-mig-…`` (``type`` ``mig``, ``parent_uuid``, ``profile``, and
    ``uuid`` only for a static MIG device: a dynamic one is created at prepare time)."""

    name: str
    type: str | None = None
    uuid: str | None = None
    parent_uuid: str | None = None
    profile: str | None = None
    product: str | None = None
    multiple_allocations: bool = False  # consumable capacity: several claims may share it
    capacity: tuple[tuple[str, str], ...] = ()  # name → quantity, e.g. ("memory", "80Gi")
    taints: tuple[DeviceTaint, ...] = ()  # additive: the slice's taints of this device


class ResourceSliceRecord(Record, frozen=True):
    """A ``resource.k8s.io/v1`` ResourceSlice of this node (watched with ``spec.nodeName``)."""

    node: str
    ts_ms: int
    name: str
    driver: str
    pool: str
    pool_generation: int
    devices: tuple[DraDevice, ...]
    deleted: bool = False
    resource_version: str = ""


class ClaimResult(Record, frozen=True):
    """One device allocated to a ResourceClaim (``status.allocation.devices.results[]``)."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    share_id: str | None = None
    consumed: tuple[tuple[str, str], ...] = ()  # consumable capacity: name → quantity


class ClaimConsumer(Record, frozen=True):
    """One consumer reserving a claim (``status.reservedFor[]``): a pod, with its UID."""

    resource: str
    name: str
    uid: str


class ClaimConfig(Record, frozen=True):
    """Driver configuration applied to some requests of a claim (all when ``requests`` is
    empty). ``sharing`` is the NVIDIA driver's ``GpuConfig``/``MigDeviceConfig``
    ``sharing.strategy`` as we name modes (``time-slicing``, ``mps``), when set."""

    driver: str
    requests: tuple[str, ...] = ()
    kind: str | None = None
    sharing: str | None = None


class ResourceClaimRecord(Record, frozen=True):
    """A ``resource.k8s.io/v1`` ResourceClaim allocated on this node (or its deletion)."""

    node: str
    ts_ms: int
    namespace: str
    name: str
    uid: str
    results: tuple[ClaimResult, ...] = ()
    reserved_for: tuple[ClaimConsumer, ...] = ()
    config: tuple[ClaimConfig, ...] = ()
    deleted: bool = False
    resource_version: str = ""


SourceState = Literal["ok", "failing", "disabled", "starting"]


class SourceStatus(Record, frozen=True):
    """How one of the agent's sources is doing: ``ok``; ``failing`` (since when, why);
    ``disabled`` (nothing to read here, on purpose or because it is not deployed on this node);
    ``starting`` (not tried yet)."""

    source: str  # dcgm, podresources, apiserver
    state: SourceState
    since_ms: int | None = None
    reason: str = ""  # one word: unreachable, timeout, http_503, no-exporter-pod, …
    detail: str = ""  # one sentence
    target: str = ""  # the URL, socket or pod it reads


class AgentStatus(Record, frozen=True):
    """The agent's own view of each boundary it reads, published every status interval and on
    every change: the worker's heartbeat for the node, and the reason behind "usage unknown"."""

    node: str
    ts_ms: int
    sources: tuple[SourceStatus, ...]


class ClockTick(Record, frozen=True):
    """Event time for one partition of the input topic, published by the cluster role to every
    partition: a node that falls silent ages by it (no node's own records say time passes)."""

    partition: int
    ts_ms: int


#: a pod's ``status.phase``
PodPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]
#: where one container is: ``waiting`` (``reason`` says why: PodInitializing, CrashLoopBackOff,
#: ImagePullBackOff, …), ``running``, ``terminated`` (``exit_code``), or no status yet
ContainerState = Literal["waiting", "running", "terminated", "unknown"]


class ContainerProgress(Record, frozen=True):
    """One container of an operand pod as its status says: init containers in the pod's order
    (the validator's run ``driver-validation`` → ``toolkit-validation`` → ``cuda-validation`` →
    ``plugin-validation``), so how far the pod got is readable from them."""

    name: str
    state: ContainerState
    ready: bool = False  # an init container: finished with exit code 0
    restarts: int = 0
    reason: str = ""  # the waiting or terminated reason, as the kubelet wrote it
    exit_code: int | None = None


class OperandPod(Record, frozen=True):
    """One GPU Operator operand pod on the node: which operand (its ``app`` label), how it runs."""

    namespace: str
    name: str
    app: str  # its ``app`` label: nvidia-container-toolkit-daemonset, nvidia-dcgm-exporter, …
    phase: PodPhase
    ready: bool  # the pod's ``Ready`` condition
    restarts: int = 0  # the main containers' restarts, summed
    #: the first not-ready main container's waiting/terminated reason, else the pod's own
    #: (``status.reason``, or its ``PodScheduled`` condition's: ``Unschedulable``)
    reason: str = ""
    ready_since_ms: int | None = None  # the ``Ready`` condition's last transition
    init: tuple[ContainerProgress, ...] = ()
    containers: tuple[ContainerProgress, ...] = ()
    deleting: bool = False  # ``deletionTimestamp`` set


class OperandPods(Record, frozen=True):
    """Every GPU Operator operand pod on one node (those of the operator's namespace with an
    ``app`` label it deploys), published whole on every change: a pod missing from it is gone.
    The agent already watches its node's pods; a node with none says so (``pods`` empty)."""

    node: str
    ts_ms: int
    namespace: str  # the operator's namespace the agent watches
    pods: tuple[OperandPod, ...]
    resource_version: str = ""


class OperandSpec(Record, frozen=True):
    """``spec.<operand>.enabled`` of a ClusterPolicy as written: ``None`` when not set (the
    operator's default applies, :mod:`streams.core.stack.operatorstack` owns those)."""

    operand: str  # the spec key: driver, toolkit, devicePlugin, dcgm, dcgmExporter, gfd, …
    enabled: bool | None = None


class PolicyCondition(Record, frozen=True):
    """One ``status.conditions[]`` entry (``metav1.Condition``): the operator writes ``Ready`` and
    ``Error``, the message naming the states not ready."""

    type: str
    status: str  # "True", "False", "Unknown"
    reason: str = ""
    message: str = ""
    last_transition_ms: int | None = None


#: ``status.state`` of a ClusterPolicy (``""``: no status written yet)
PolicyState = Literal["ignored", "ready", "notReady", ""]


class ClusterPolicyRecord(Record, frozen=True):
    """The GPU Operator's ``ClusterPolicy`` (``nvidia.com/v1``, cluster-scoped): what it intends
    and whether it says it is reconciled. Read once per cluster by the cluster role, which
    publishes it into every partition of the input topic (like ``clock.tick``): every node's
    join reads it. ``deleted``: the policy is gone."""

    name: str
    ts_ms: int
    operands: tuple[OperandSpec, ...] = ()
    mig_strategy: str | None = None  # spec.mig.strategy: none, single, mixed
    device_plugin_config: str = ""  # spec.devicePlugin.config.name (the sharing config map)
    state: PolicyState = ""
    namespace: str = ""  # status.namespace: where the operands run
    conditions: tuple[PolicyCondition, ...] = ()
    generation: int | None = None
    deleted: bool = False
    resource_version: str = ""


#: ``status.state`` of a GPUCluster or an NVIDIADriver (``""``: no status written yet; an
#: NVIDIADriver is ``ignored`` when another claims the same nodes)
OperatorCrState = Literal["ignored", "ready", "notReady", "disabled", ""]


class GpuClusterRecord(Record, frozen=True):
    """The GPU Operator's ``GPUCluster`` (``nvidia.com/v1alpha1``, cluster-scoped, a singleton
    named ``gpu-cluster``): the DRA stack's intent — the DRA driver, the validator, DCGM and
    dcgm-exporter, never a device plugin or the driver — and whether it says it is reconciled.
    Published into every partition of the input topic by the cluster role, as a ClusterPolicy.

    ``operands`` holds ``spec.dcgm.enabled``, ``spec.dcgmExporter.enabled`` and
    ``spec.draDriver.computeDomains.enabled`` as written (unset: the controller's default,
    owned by :mod:`streams.core.stack.operatorstack`); ``unknown_fields`` the ``spec`` keys this
    build does not read (a newer operator's: what we judge may miss them)."""

    name: str
    ts_ms: int
    operands: tuple[OperandSpec, ...] = ()
    state: OperatorCrState = ""
    namespace: str = ""  # status.namespace: where the operands run
    conditions: tuple[PolicyCondition, ...] = ()
    generation: int | None = None
    unknown_fields: tuple[str, ...] = ()
    deleted: bool = False
    resource_version: str = ""


class NvidiaDriverRecord(Record, frozen=True):
    """The GPU Operator's ``NVIDIADriver`` (``nvidia.com/v1alpha1``, cluster-scoped): a driver
    for the nodes it owns (the operator labels each ``nvidia.com/gpu-operator.driver.owner=
    <name>``). On the DRA stack the GPUCluster manages no driver: it is this, or the host's."""

    name: str
    ts_ms: int
    driver_type: str = ""  # spec.driverType: gpu, vgpu, vgpu-host-manager
    version: str = ""  # spec.version
    state: OperatorCrState = ""
    namespace: str = ""
    conditions: tuple[PolicyCondition, ...] = ()
    generation: int | None = None
    deleted: bool = False
    resource_version: str = ""


class DeviceTaintRuleRecord(Record, frozen=True):
    """A ``DeviceTaintRule`` (``resource.k8s.io/v1alpha3``, KEP-5055, cluster-scoped): one taint
    on every DRA device its selector selects, as if the driver had put it in the device's
    ResourceSlice. Read once per cluster by the cluster role, which publishes it into every
    partition of the input topic (like the ClusterPolicy): every node's devices may match.

    The selector (1.35: ``driver``, ``pool``, ``device``; each absent field selects all) selects
    nothing when the rule has no ``deviceSelector`` at all (``selector`` false), as the API says.
    ``unevaluable`` says why the selector cannot be evaluated here (criteria an API server before
    1.35 kept: ``deviceClassName``, CEL ``selectors``): such a rule is published, and selects
    nothing. ``taint`` is ``None`` when the rule's taint has no key or an effect the API does not
    define (dropped at the agent, counted): the rule says nothing. ``deleted``: the rule is gone."""

    name: str
    ts_ms: int
    driver: str | None = None
    pool: str | None = None
    device: str | None = None
    taint: DeviceTaint | None = None
    selector: bool = True
    unevaluable: str = ""
    deleted: bool = False
    resource_version: str = ""


# --- demand: GPUs asked for and not yet given, and the supply they could have had.
# These travel on the demand-events topic, keyed by the pool's resource name
# (:func:`contract.inputs.pool_resource`), where the workers' demand stage joins them.

#: where a pending pod stands: still ``pending``; ``bound`` by the scheduler to ``node``;
#: ``deleted`` before it was bound
PendingState = Literal["pending", "bound", "deleted"]


class GpuRequest(Record, frozen=True):
    """One kind of GPU a pending pod asks for, and how many.

    ``resource`` is a device-plugin resource (``nvidia.com/gpu``, a renamed shared resource such
    as ``nvidia.com/gpu.shared``, a MIG resource ``nvidia.com/mig-1g.10gb``) or, for a DRA claim,
    ``dra:<device class>``. ``count`` follows the scheduler's rule (the larger of the sum over
    containers and the largest init container); a DRA claim counts its requests' devices.
    ``product`` is what the pod's node selector (or a required node affinity with one value)
    says of ``nvidia.com/gpu.product``; ``mig_profile`` the MIG profile the resource name or the
    selector names; ``""`` when the pod does not say (any product, no MIG profile)."""

    resource: str
    count: int
    product: str = ""
    mig_profile: str = ""
    claim: str = ""  # DRA: the ResourceClaim (namespace/name) the request is made through


class PendingPod(Record, frozen=True):
    """A pod that asks for GPUs and that the scheduler has not bound to a node (the cluster
    role's pending-pod watch), with the scheduler's own word on why (its ``PodScheduled``
    condition). Published on every change, and once more when it is ``bound`` or ``deleted``:
    the last record of a pod's wait."""

    ts_ms: int
    namespace: str
    name: str
    uid: str
    created_ms: int
    requests: tuple[GpuRequest, ...]
    state: PendingState = "pending"
    node: str = ""  # bound: where
    priority: int = 0
    priority_class: str = ""
    workload: OwnerRef | None = None
    #: the PodScheduled condition: "False"/"True"/"" (not written yet), its reason
    #: (``Unschedulable``, ``SchedulerError``), message ("0/8 nodes are available: 8
    #: Insufficient nvidia.com/gpu.") and last transition
    scheduled_status: str = ""
    scheduled_reason: str = ""
    scheduled_message: str = ""
    scheduled_since_ms: int | None = None
    resource_version: str = ""


class PendingPodList(Record, frozen=True):
    """Every pod pending for a GPU after a (re)list of the cluster role's watch (a new leader
    lists first): a pod of the demand stage's tables missing from it is gone. Published into
    every partition of the demand-events topic (no key), like ``clock.tick``."""

    ts_ms: int
    pods: tuple[PendingPod, ...]
    resource_version: str = ""


#: where a Kueue Workload's wait stands: ``queued`` (not admitted: it waits for quota, and has no
#: pods); ``admitted`` (its pods exist or are made now: they are the demand from here on, as pending
#: pods); ``finished``; ``deleted``; ``deactivated`` by its owner (``spec.active: false``: Kueue
#: will not admit it until it is active again, so it waits for nothing)
QueuedState = Literal["queued", "admitted", "finished", "deleted", "deactivated"]


class QueuedWorkload(Record, frozen=True):
    """A Kueue ``Workload`` (``kueue.x-k8s.io``, ``v1beta1`` or ``v1beta2``) that asks for GPUs:
    demand that is not a pod yet — Kueue keeps its Job suspended, with no pod, until it admits it.
    The cluster role publishes it keyed by each resource it asks for, on every change, and once
    more when it is ``admitted``, ``finished``, ``deleted`` or ``deactivated``: the last record of
    its wait (its
    pods, once admitted, are pending pods like any: one waiter per Workload until then, never
    both).

    ``requests``: per podSet and resource, ``count`` times the per-pod request (the scheduler's rule
    per pod); ``product`` the one GPU product the ClusterQueue's flavors for that resource allow
    (a ResourceFlavor's ``nvidia.com/gpu.product`` node label; ``""`` when several or none say).
    ``queue`` is ``spec.queueName`` (a LocalQueue of its namespace), ``cluster_queue`` that
    LocalQueue's ClusterQueue (``""`` while unknown). ``reason``/``message`` are Kueue's own word
    on why it waits (its ``QuotaReserved`` condition: ``Pending`` "couldn't assign flavors to pod
    set main: insufficient unused quota for nvidia.com/gpu in flavor a100, 4 more needed"; or
    ``Evicted``, ``Preempted``); ``since_ms`` when the wait began (its creation, or its last
    eviction back into the queue)."""

    ts_ms: int
    namespace: str
    name: str
    uid: str
    created_ms: int
    requests: tuple[GpuRequest, ...]
    state: QueuedState = "queued"
    queue: str = ""
    cluster_queue: str = ""
    priority: int = 0
    priority_class: str = ""
    owner: OwnerRef | None = None  # the job it stands for (its controller ownerReference)
    reason: str = ""
    message: str = ""
    since_ms: int | None = None
    resource_version: str = ""


class QueuedWorkloadList(Record, frozen=True):
    """Every queued Workload after a (re)list of the cluster role's watch: a Workload of the
    demand stage's tables missing from it is gone. Published into every partition of the
    demand-events topic (no key), as the pending-pod list."""

    ts_ms: int
    workloads: tuple[QueuedWorkload, ...]
    resource_version: str = ""


class SupplyHolder(Record, frozen=True):
    """A pod holding an allocated device, as the demand stage names it."""

    namespace: str
    pod: str
    uid: str | None = None
    workload: str | None = None  # "Kind/name"


class SupplyDevice(Record, frozen=True):
    """One allocated device of a node, in the terms a pending pod asks for: its ``product``
    (the node's ``nvidia.com/gpu.product``) and MIG profile; ``idle_since_ms`` the start of its
    measured idle episode (below the idle threshold, :mod:`streams.core.alerts.alerts`), ``None``
    when
    it is not idle or its usage is unknown (never counted as idle)."""

    device_uuid: str
    product: str = ""
    mig_profile: str = ""
    idle_since_ms: int | None = None
    holders: tuple[SupplyHolder, ...] = ()
    slots: int = 1  # the holders' allocation units of this resource on the device
    #: additive: ``False`` when the device's usage is unknown (no fresh trusted reading), so
    #: the demand record counts it among ``unmeasured_gpus`` (never idle)
    measured: bool = True


class NodeSupply(Record, frozen=True):
    """A node's allocated devices of one resource (the node's worker, on change): what the
    demand stage joins pending pods with. Empty ``devices`` (or ``gone``): the node has none of
    that resource allocated any more. A DRA device's resource is the device class that selects
    it (``dra:gpu.nvidia.com`` whole GPUs, ``dra:mig.nvidia.com`` MIG devices); v1 named it by
    its driver (``dra:gpu.nvidia.com`` for both), and is still read (its MIG devices are no
    supply of whole GPUs)."""

    ts_ms: int
    node: str
    resource: str
    devices: tuple[SupplyDevice, ...] = ()
    gone: bool = False


#: Records on the demand-events topic (keyed by resource; the list and ticks into every partition)
DemandInput = (
    PendingPod | PendingPodList | QueuedWorkload | QueuedWorkloadList | NodeSupply | ClockTick
)


def pool_resource(resource: str) -> str:
    """The demand-events key of a resource (its name as the scheduler counts it)."""
    return resource


#: Every record an agent publishes on the node-events topic (keyed by its node)
InputRecord = (
    PodResourcesSnapshot
    | PodResourcesDiff
    | DcgmScrape
    | DcgmSample
    | PodRecord
    | PodListSnapshot
    | NodeRecord
    | DeviceInventory
    | ResourceSliceRecord
    | ResourceClaimRecord
    | AgentStatus
    | OperandPods
)
#: Records on the node-events topic that belong to a partition, not a node (the cluster role's)
PartitionRecord = (
    ClockTick | ClusterPolicyRecord | GpuClusterRecord | NvidiaDriverRecord | DeviceTaintRuleRecord
)

#: Record kinds the agents publish, with their schema versions (see :mod:`contract.codec`) and
#: the older versions this build still reads (v2 only removed fields: a v1 record reads as v2;
#: pool.supply v2 names DRA supply by device class, a v1 record read as v2 is filtered by it).
KINDS: dict[str, tuple[type, int] | tuple[type, int, tuple[int, ...]]] = {
    "podresources.snapshot": (PodResourcesSnapshot, 1),
    "podresources.diff": (PodResourcesDiff, 1),
    "dcgm.scrape": (DcgmScrape, 1),
    "dcgm.sample": (DcgmSample, 2, (1,)),
    "k8s.pod": (PodRecord, 3, (1, 2)),
    "k8s.pod-list": (PodListSnapshot, 1),
    "k8s.node": (NodeRecord, 1),
    "inventory": (DeviceInventory, 2, (1,)),
    "k8s.resourceslice": (ResourceSliceRecord, 1),
    "k8s.resourceclaim": (ResourceClaimRecord, 1),
    "agent.status": (AgentStatus, 1),
    "clock.tick": (ClockTick, 1),
    "k8s.operand-pods": (OperandPods, 1),
    "k8s.clusterpolicy": (ClusterPolicyRecord, 1),
    "k8s.gpucluster": (GpuClusterRecord, 1),
    "k8s.nvidiadriver": (NvidiaDriverRecord, 1),
    "k8s.devicetaintrule": (DeviceTaintRuleRecord, 1),
    "k8s.pending-pod": (PendingPod, 1),
    "k8s.pending-pods": (PendingPodList, 1),
    "kueue.workload": (QueuedWorkload, 1),
    "kueue.workloads": (QueuedWorkloadList, 1),
    "pool.supply": (NodeSupply, 2, (1,)),
}

#: the records read and let go: what the worker's state keeps of a reading is made by the core
READ_AND_LET_GO: tuple[type, ...] = (DcgmScrape, DcgmSample, ClockTick)
#: every other kind: its parts are kept in the worker's state (the pod watch, slot holders, node
#: labels, inventories, DRA objects, the demand stage's pending pods and supply), so its strings
#: are interned once decoded (:mod:`contract.interning`). Interning a whole scrape would cost
#: ~3 µs per sample for the few strings kept of it: the core interns those where it keeps them
#: (device keys, the names an event carries: ``streams.core.devices.attribution.attribute``)
KEPT: tuple[type, ...] = tuple(kind[0] for kind in KINDS.values() if kind[0] not in READ_AND_LET_GO)
