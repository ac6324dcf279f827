"""Scenario files: one simulated cluster, read by the kubelet, exporter and API-server doubles.

A scenario is TOML (``sim/scenarios/<name>.toml``). Nodes declare their GPUs and how they are
shared; pods declare which slots they hold and when. Slot notation on a pod: ``"0"`` whole GPU 0,
``"0::3"`` replica 3 of GPU 0, ``"0/gi3"`` MIG GPU instance 3 of GPU 0, ``"0/gi3::1"`` a replica
of that MIG device. Times are scenario seconds; a pod holds its slots from ``start_s`` until
``stop_s + grace_s`` (deletion at ``stop_s``, containers stop after the grace period).

A node may be managed by the GPU Operator (``[nodes.operator]``): its deploy labels
(``nvidia.com/gpu.deploy.<operand>``), its operand pods' states over scenario time and its MIG
configuration labels over time; the cluster's ``ClusterPolicy`` is ``[cluster_policy]``, its
``GPUCluster`` (the DRA stack, for nodes with ``dra = true``) ``[gpu_cluster]``
(:mod:`sim.gpuoperator` makes the objects).

A node's device plugin may report a device's health over time (``[[nodes.device_health]]``:
``slot`` and ``steps = [[60, "Unhealthy"], [150, "Healthy"]]``, Healthy before the first step;
``"0"`` covers GPU 0 and every device ID on it, replicas and MIG devices, as NVIDIA's plugin marks
them on a GPU-wide XID; ``"0/gi3"`` that MIG device): an unhealthy device leaves the node's
allocatable count and the kubelet's allocatable list, and, where the kubelet runs with the
feature gate ``ResourceHealthStatus`` (``resource_health_status = true``, alpha in 1.35), its
holders' pod status says so (``allocatedResourcesStatus``, :mod:`sim.kube_objects`; every held
device is listed there, Healthy until its plugin says otherwise). Device plugin nodes only.

A node may carry device traces (``[[nodes.traces]]``: busy-but-ineffective, memory-bound,
thermal throttling, rising remapped rows, PCIe replays, an XID), exporter restarts
(``exporter_restarts``: every counter and the last XID start again from 0) and what its
counters had counted before the scenario began (``[nodes.counters]``); :mod:`sim.traces` turns
them into DCGM field values.

A pod's ``util_pct`` (``util_steps``: its changes) is its processes' SM utilisation and
``memory_mib`` (``memory_steps``) their framebuffer; a device reads its pods' sum (utilisation
capped at 100 %). A node's ``exporter_mode`` says how its dcgm-exporter stamps pods on a shared
device's rows (:data:`ExporterMode`); ``virtual-gpus`` prints each listed pod's own figures beside
the device's row, as ``--kubernetes-virtual-gpus`` does from 4.5.3-4.8.2 on.

A pod may wait for the scheduler first (``pending_s``): from then it exists unbound (no
``spec.nodeName``, ``PodScheduled`` False/Unschedulable in the scheduler's words,
:mod:`sim.scheduling`) until ``start_s``, when it is bound to ``node`` and holds its slots; a
pod without ``node`` is never scheduled. What it asks for is ``requests`` (resource → count), by
default what its slots are on its node; ``node_selector`` is its ``spec.nodeSelector``.
"""

from __future__ import annotations

import tomllib
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

#: how the node's dcgm-exporter labels a shared device: one arbitrary holder per scrape
#: (``arbitrary``), identical per-pod copies (``copies``, ``--kubernetes-virtual-gpus`` before
#: 4.5.3-4.8.2), no pod (``none``), or ``virtual-gpus``: that flag from 4.5.3-4.8.2 on, every
#: listed pod's own SM utilisation and memory beside the device row (:mod:`sim.virtual_gpus`)
ExporterMode = Literal["arbitrary", "copies", "none", "virtual-gpus"]
#: how the node's dcgm-exporter is deployed: a pod on the node the agent finds (``pod``), no
#: exporter on the node (``none``), or a pod whose exporter does not answer (``down``)
ExporterDeploy = Literal["pod", "none", "down"]

_NS = uuid.UUID("6f1c3e58-3c59-4a8e-9d7c-1b2a3c4d5e6f")


def gpu_uuid(node: str, index: int) -> str:
    """A stable, realistic-looking GPU UUID for a simulated GPU."""
    return f"GPU-{uuid.uuid5(_NS, f'{node}/gpu{index}')}"


def mig_uuid(node: str, index: int, gi: int) -> str:
    return f"MIG-{uuid.uuid5(_NS, f'{node}/gpu{index}/gi{gi}')}"


def pod_uid(namespace: str, name: str, start_s: float) -> str:
    return str(uuid.uuid5(_NS, f"pod/{namespace}/{name}/{start_s}"))


@dataclass(frozen=True, slots=True)
class Slot:
    gpu: int
    gi: int | None
    replica: int | None


def parse_slot(text: str) -> Slot:
    base, _, replica = text.partition("::")
    gpu, _, gi = base.partition("/gi")
    return Slot(int(gpu), int(gi) if gi else None, int(replica) if replica else None)


@dataclass(frozen=True, slots=True)
class MigSpec:
    gpus: tuple[int, ...]
    profile: str
    instances: tuple[int, ...]


#: an operand pod's state: ``ready``; ``crashloop`` (its first container in CrashLoopBackOff);
#: ``init`` (stuck in init container ``init``: running, or failing with ``reason``); ``absent``
OperandState = Literal["ready", "crashloop", "init", "absent"]


@dataclass(frozen=True, slots=True)
class OperandStep:
    """From ``at_s`` on, the operand's pod on the node is in ``state``."""

    at_s: float = 0.0
    state: OperandState = "ready"
    init: str = ""  # state init: the init container it is stuck in
    reason: str = ""  # a waiting reason (CrashLoopBackOff, …); empty: the container runs
    restarts: int = 0


@dataclass(frozen=True, slots=True)
class MigStep:
    """From ``at_s`` on: ``nvidia.com/mig.config`` and ``nvidia.com/mig.config.state``."""

    at_s: float
    config: str
    state: str


@dataclass(frozen=True, slots=True)
class OperatorSpec:
    """The GPU Operator on one node: deploy label values that differ from the operator's own
    (every operand ``true``; ``driver = "pre-installed"`` for a host driver, ``false`` to
    disable one), operand pods whose state is not simply Ready (operand → steps), MIG labels."""

    deploy: tuple[tuple[str, str], ...] = ()
    pods: tuple[tuple[str, tuple[OperandStep, ...]], ...] = ()
    mig: tuple[MigStep, ...] = ()

    def step(self, operand: str, t: float) -> OperandStep:
        steps = dict(self.pods).get(operand, ())
        return next((s for s in reversed(steps) if t >= s.at_s), OperandStep())

    def mig_at(self, t: float) -> MigStep | None:
        return next((s for s in reversed(self.mig) if t >= s.at_s), None)


@dataclass(frozen=True, slots=True)
class ClusterPolicySpec:
    """The cluster's ``ClusterPolicy`` (``nvidia.com/v1``): its spec as written, its status."""

    name: str
    spec: dict[str, Any]
    state: str = ""  # ready | notReady | ignored; "" before the operator wrote a status
    message: str = ""  # the Error condition's message when not ready


@dataclass(frozen=True, slots=True)
class GpuClusterSpec:
    """The cluster's ``GPUCluster`` (``nvidia.com/v1alpha1``, named ``gpu-cluster``): its spec as
    written, its status as the controller writes it (``reason``: the ``Error`` condition's)."""

    spec: dict[str, Any]
    state: str = ""  # ready | notReady; "" before the controller wrote a status
    reason: str = ""  # OperandNotReady, ReconcileFailed, PrerequisiteNotMet
    message: str = ""


@dataclass(frozen=True, slots=True)
class KueueStep:
    """Where a Workload stands from ``at_s``: ``queued`` (its ``QuotaReserved`` False with
    ``reason``/``message``, Kueue's own), ``admitted`` or ``finished``."""

    at_s: float = 0.0
    state: str = "queued"
    reason: str = "Pending"
    message: str = ""


@dataclass(frozen=True, slots=True)
class KueueWorkloadSpec:
    """A Kueue Workload for a suspended Job (no pods: it waits for quota), from ``created_s``."""

    namespace: str
    job: str  # the Job it stands for; the Workload is named job-<job>-<hash> as Kueue names it
    queue: str  # its LocalQueue
    pod_sets: tuple[tuple[str, int, tuple[tuple[str, int], ...]], ...]  # (name, count, requests)
    created_s: float = 0.0
    priority: int = 0
    steps: tuple[KueueStep, ...] = ()

    def step(self, t: float) -> KueueStep:
        return next((s for s in reversed(self.steps) if t >= s.at_s), KueueStep())


@dataclass(frozen=True, slots=True)
class KueueSpec:
    """Kueue's queues: ResourceFlavors (name → node labels), ClusterQueues (name → resource →
    (flavor, nominal quota)), LocalQueues ((namespace, name) → ClusterQueue), and Workloads."""

    flavors: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    cluster_queues: tuple[tuple[str, tuple[tuple[str, str, int], ...]], ...] = ()
    local_queues: tuple[tuple[str, str, str], ...] = ()
    workloads: tuple[KueueWorkloadSpec, ...] = ()


#: what a device trace makes its GPU (or MIG instance) do, :mod:`sim.traces` says how
TraceKind = Literal[
    "busy-ineffective", "memory-bound", "thermal", "remapped-rows", "pcie-replays", "xid"
]
TRACE_KINDS: tuple[TraceKind, ...] = (
    "busy-ineffective",
    "memory-bound",
    "thermal",
    "remapped-rows",
    "pcie-replays",
    "xid",
)


@dataclass(frozen=True, slots=True)
class TraceSpec:
    """From ``start_s`` until ``stop_s`` (None: to the end), the device at ``slot`` (``"0"``, or
    ``"0/gi3"`` for a MIG instance's profiling ratios) behaves as ``kind`` says."""

    slot: str
    kind: TraceKind
    start_s: float = 0.0
    stop_s: float | None = None
    #: thermal: seconds from the start to the peak temperature (and back down after ``stop_s``)
    ramp_s: float = 30.0
    #: remapped-rows: one more uncorrectable row remapped every ``every_s``; pcie-replays: one
    #: more replay every ``every_s``
    every_s: float = 8.0
    #: remapped-rows: DCGM_FI_DEV_ROW_REMAP_FAILURE set from this scenario second on
    failure_s: float | None = None
    xid: int = 0  # xid: the last XID the exporter reports from ``start_s``

    def active(self, t: float) -> bool:
        return self.start_s <= t and (self.stop_s is None or t < self.stop_s)


@dataclass(frozen=True, slots=True)
class ExporterRestart:
    """dcgm-exporter restarts at ``at_s``: its port refuses connections for ``down_s``, and from
    then on every counter it reports and its last XID count again from 0."""

    at_s: float
    down_s: float = 0.0


#: what a device plugin's ``ListAndWatch`` can say of a device (``pluginapi.Healthy``/``Unhealthy``)
DeviceHealthState = Literal["Healthy", "Unhealthy"]


@dataclass(frozen=True, slots=True)
class HealthSpec:
    """What the node's device plugin says of the device at ``slot`` over time: Healthy, then
    each step's health from its scenario second. ``"0"`` is GPU 0 with every device ID on it
    (its replicas, its MIG devices); ``"0/gi3"`` one MIG device and its replicas."""

    slot: str
    steps: tuple[tuple[float, DeviceHealthState], ...] = ()

    def covers(self, slot: Slot) -> bool:
        mine = parse_slot(self.slot)
        return mine.gpu == slot.gpu and mine.gi in (None, slot.gi)

    def at(self, t: float) -> DeviceHealthState:
        health: DeviceHealthState = "Healthy"
        for since, said in self.steps:
            if t >= since:
                health = said
        return health


#: counter → what it had counted before the scenario began (the exporter's first life only)
COUNTER_FIELDS = {
    "pcie_replays": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "ecc_dbe_volatile": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "uncorrectable_remapped_rows": "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "correctable_remapped_rows": "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "power_violation_ns": "DCGM_FI_DEV_POWER_VIOLATION",
    "thermal_violation_ns": "DCGM_FI_DEV_THERMAL_VIOLATION",
}


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    model: str
    gpus: int
    sharing: Literal["none", "time-slicing", "mps"] = "none"
    replicas: int = 1
    #: GPU indexes the sharing config replicates (its ``resources[].devices``); None = all
    shared_gpus: tuple[int, ...] | None = None
    rename_shared: bool = False
    mig: MigSpec | None = None
    exporter_mode: ExporterMode = "arbitrary"
    #: the exporter also runs with ``--kubernetes-enable-pod-uid``: ``pod_uid`` on every pod row
    exporter_pod_uid: bool = False
    memory_mib: int = 40960
    labels: tuple[tuple[str, str], ...] = ()
    #: GPUs handed out by the NVIDIA DRA driver (ResourceSlice, claims), not a device plugin
    dra: bool = False
    #: DRA MIG devices are placements created at prepare time: no UUID in the slice
    dynamic_mig: bool = False
    exporter: ExporterDeploy = "pod"
    #: the Node object is deleted at this scenario second (the node left the cluster)
    deleted_s: float | None = None
    #: the GPU Operator manages the node (deploy labels, operand pods); None: it does not
    operator: OperatorSpec | None = None
    traces: tuple[TraceSpec, ...] = ()
    exporter_restarts: tuple[ExporterRestart, ...] = ()
    #: every GPU's counters (:data:`COUNTER_FIELDS` keys) before the scenario began
    counters: tuple[tuple[str, float], ...] = ()
    #: the kubelet runs with ``ResourceHealthStatus``: each held device's health in its pod status
    resource_health_status: bool = False
    #: what the device plugin says of its devices' health over time (Healthy where none says)
    device_health: tuple[HealthSpec, ...] = ()

    def health_at(self, slot: Slot, t: float) -> DeviceHealthState:
        """What the device plugin says at ``t`` of the device at ``slot``: Unhealthy when any
        health entry covering it says so."""
        said = {h.at(t) for h in self.device_health if h.covers(slot)}
        return "Unhealthy" if "Unhealthy" in said else "Healthy"

    def replicas_of(self, gpu: int) -> int:
        """How many replicas the device plugin advertises of GPU ``gpu`` (1: handed out whole)."""
        if self.sharing == "none" or self.replicas < 2:
            return 1
        return self.replicas if self.shared_gpus is None or gpu in self.shared_gpus else 1


@dataclass(frozen=True, slots=True)
class PodSpec:
    namespace: str
    name: str
    node: str
    slots: tuple[str, ...]
    start_s: float
    stop_s: float | None = None
    grace_s: float = 0.0
    container: str = "main"
    util_pct: float = 0.0
    util_steps: tuple[tuple[float, float], ...] = ()  # (from scenario second, util %) changes
    memory_mib: float = 0.0
    memory_steps: tuple[tuple[float, float], ...] = ()  # (from scenario second, MiB) changes
    workload_kind: str = "Deployment"
    workload_name: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    claim: str = ""  # on a DRA node: the ResourceClaim (same namespace) its slots come through
    #: further claims its slots come through too (one device held through several claims)
    extra_claims: tuple[str, ...] = ()
    #: per-container slots, when the pod's containers hold different ones (else all slots are
    #: ``container``'s); on a DRA node every container listed references the pod's claims
    containers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: created unbound at this scenario second, waiting for the scheduler until ``start_s`` (or
    #: for ever without ``node``); None: created bound at ``start_s``, as most pods here are
    pending_s: float | None = None
    #: what the pod asks for (resource → count); empty: what its slots are on its node
    requests: tuple[tuple[str, int], ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    priority: int = 0

    @property
    def created_s(self) -> float:
        return self.start_s if self.pending_s is None else self.pending_s

    def pending_at(self, t: float) -> bool:
        """The pod exists, not bound to a node: from ``pending_s`` until it is scheduled at
        ``start_s`` (never without ``node``) or deleted at ``stop_s``."""
        if self.pending_s is None or t < self.pending_s:
            return False
        if self.node and t >= self.start_s:
            return False
        return self.stop_s is None or t < self.stop_s

    @property
    def held_by_container(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        return self.containers or ((self.container, self.slots),)

    @property
    def claims(self) -> tuple[str, ...]:
        return (self.claim, *self.extra_claims) if self.claim else ()

    @property
    def uid(self) -> str:
        return pod_uid(self.namespace, self.name, self.start_s)

    def util_at(self, t: float) -> float:
        """The pod's share of device activity at ``t`` (the simulated hardware sums them)."""
        util = self.util_pct
        for since, value in self.util_steps:
            if t >= since:
                util = value
        return util

    def memory_at(self, t: float) -> float:
        """The framebuffer the pod's processes hold at ``t``, in MiB."""
        memory = self.memory_mib
        for since, value in self.memory_steps:
            if t >= since:
                memory = value
        return memory

    @property
    def released_s(self) -> float | None:
        return None if self.stop_s is None else self.stop_s + self.grace_s


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """A ResourceClaim on a DRA node; its devices are its pods' slots."""

    namespace: str
    name: str
    sharing: str | None = None  # the driver config's strategy: time-slicing | mps
    admin: bool = False  # adminAccess (a monitoring pod): an observer
    consumed_memory: str | None = None  # consumable capacity: a share of the device

    @property
    def uid(self) -> str:
        return pod_uid(self.namespace, f"claim/{self.name}", 0)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    nodes: tuple[NodeSpec, ...]
    pods: tuple[PodSpec, ...] = field(default=())
    claims: tuple[ClaimSpec, ...] = field(default=())
    cluster_policy: ClusterPolicySpec | None = None
    gpu_cluster: GpuClusterSpec | None = None
    kueue: KueueSpec | None = None

    def node(self, name: str) -> NodeSpec:
        return next(n for n in self.nodes if n.name == name)

    def claim(self, namespace: str, name: str) -> ClaimSpec:
        return next(c for c in self.claims if (c.namespace, c.name) == (namespace, name))


def _pairs(table: dict[str, Any] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in (table or {}).items()))


def _operator(doc: dict[str, Any] | None) -> OperatorSpec | None:
    if doc is None:
        return None
    pods = tuple(
        (
            str(operand),
            tuple(
                OperandStep(
                    at_s=float(s.get("at_s", 0)),
                    state=s.get("state", "ready"),
                    init=str(s.get("init", "")),
                    reason=str(s.get("reason", "")),
                    restarts=int(s.get("restarts", 0)),
                )
                for s in steps
            ),
        )
        for operand, steps in sorted((doc.get("pods") or {}).items())
    )
    mig = tuple(
        MigStep(float(m.get("at_s", 0)), str(m["config"]), str(m["state"]))
        for m in doc.get("mig", [])
    )
    deploy = tuple(
        sorted(
            (str(k), str(v).lower() if isinstance(v, bool) else str(v))
            for k, v in (doc.get("deploy") or {}).items()
        )
    )
    return OperatorSpec(deploy, pods, mig)


def _traces(docs: list[dict[str, Any]]) -> tuple[TraceSpec, ...]:
    out = []
    for d in docs:
        kind = d["kind"]
        if kind not in TRACE_KINDS:
            raise ValueError(f"unknown trace kind {kind!r}; known: {', '.join(TRACE_KINDS)}")
        out.append(
            TraceSpec(
                slot=str(d["slot"]),
                kind=kind,
                start_s=float(d.get("start_s", 0)),
                stop_s=float(d["stop_s"]) if "stop_s" in d else None,
                ramp_s=float(d.get("ramp_s", 30)),
                every_s=float(d.get("every_s", 8)),
                failure_s=float(d["failure_s"]) if "failure_s" in d else None,
                xid=int(d.get("xid", 0)),
            )
        )
    return tuple(out)


def _counters(doc: dict[str, Any] | None) -> tuple[tuple[str, float], ...]:
    unknown = sorted(set(doc or {}) - set(COUNTER_FIELDS))
    if unknown:
        raise ValueError(f"unknown counters {unknown}; known: {', '.join(COUNTER_FIELDS)}")
    return tuple(sorted((str(k), float(v)) for k, v in (doc or {}).items()))


def _said(node: dict[str, Any], value: Any) -> DeviceHealthState:
    """A health a device plugin says; any other is refused rather than read as one."""
    if value not in get_args(DeviceHealthState):
        raise ValueError(
            f"node {node.get('name')}: device health {value!r}: a device plugin says Healthy or "
            "Unhealthy"
        )
    return value  # type: ignore[no-any-return]


def _device_health(node: dict[str, Any]) -> tuple[HealthSpec, ...]:
    """The node's device health entries: each a GPU or a MIG device (a replica's health is its
    device's); none on a DRA node (a DRA plugin's health stream is not simulated)."""
    out = []
    for d in node.get("device_health", []):
        slot = str(d["slot"])
        if parse_slot(slot).replica is not None:
            raise ValueError(
                f'node {node.get("name")}: device health slot {slot!r}: a GPU ("0") or a MIG '
                'device ("0/gi3"), with every replica on it'
            )
        steps = tuple((float(at), _said(node, said)) for at, said in d.get("steps", []))
        out.append(HealthSpec(slot, steps))
    if out and node.get("dra", False):
        raise ValueError(f"node {node.get('name')}: device_health is for device plugin nodes")
    return tuple(out)


def _policy(doc: dict[str, Any] | None) -> ClusterPolicySpec | None:
    if doc is None:
        return None
    return ClusterPolicySpec(
        str(doc["name"]),
        dict(doc.get("spec") or {}),
        str(doc.get("state", "")),
        str(doc.get("message", "")),
    )


def _gpu_cluster(doc: dict[str, Any] | None) -> GpuClusterSpec | None:
    if doc is None:
        return None
    return GpuClusterSpec(
        dict(doc.get("spec") or {}),
        str(doc.get("state", "")),
        str(doc.get("reason", "")),
        str(doc.get("message", "")),
    )


def _kueue(doc: dict[str, Any] | None) -> KueueSpec | None:
    if doc is None:
        return None
    workloads = tuple(
        KueueWorkloadSpec(
            namespace=str(w["namespace"]),
            job=str(w["job"]),
            queue=str(w["queue"]),
            pod_sets=tuple(
                (str(p.get("name", "main")), int(p["count"]), _pairs_int(p.get("requests")))
                for p in w["pod_sets"]
            ),
            created_s=float(w.get("created_s", 0)),
            priority=int(w.get("priority", 0)),
            steps=tuple(
                KueueStep(
                    float(s.get("at_s", 0)),
                    str(s.get("state", "queued")),
                    str(s.get("reason", "Pending")),
                    str(s.get("message", "")),
                )
                for s in w.get("steps", [])
            ),
        )
        for w in doc.get("workloads", [])
    )
    return KueueSpec(
        flavors=tuple(
            (str(name), _pairs(f.get("node_labels")))
            for name, f in (doc.get("flavors") or {}).items()
        ),
        cluster_queues=tuple(
            (
                str(name),
                tuple(
                    (str(r["resource"]), str(r["flavor"]), int(r.get("nominal", 0)))
                    for r in cq.get("resources", [])
                ),
            )
            for name, cq in (doc.get("cluster_queues") or {}).items()
        ),
        local_queues=tuple(
            (str(q["namespace"]), str(q["name"]), str(q["cluster_queue"]))
            for q in doc.get("local_queues", [])
        ),
        workloads=workloads,
    )


def _pairs_int(table: dict[str, Any] | None) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((str(k), int(v)) for k, v in (table or {}).items()))


def _check_pending(pod: PodSpec) -> None:
    """A pod the scheduler never binds must say what it asks for, and wait from some time."""
    where = f"pod {pod.namespace}/{pod.name}"
    if not pod.node:
        if pod.pending_s is None or not pod.requests or pod.slots:
            raise ValueError(f"{where}: without a node it needs pending_s and requests, no slots")
    elif pod.pending_s is not None and pod.pending_s >= pod.start_s:
        raise ValueError(f"{where}: pending_s must come before start_s (when it is scheduled)")
    if any(count < 1 for _, count in pod.requests):
        raise ValueError(f"{where}: every request asks for at least 1")


def _exporter_mode(node: dict[str, Any]) -> ExporterMode:
    """The node's exporter mode; a misspelt one is refused rather than read as the default."""
    mode = node.get("exporter_mode", "arbitrary")
    if mode not in get_args(ExporterMode):
        known = ", ".join(get_args(ExporterMode))
        raise ValueError(f"node {node.get('name')}: unknown exporter_mode {mode!r}; known: {known}")
    return mode  # type: ignore[no-any-return]


def parse(doc: dict[str, Any]) -> Scenario:
    nodes = []
    for n in doc.get("nodes", []):
        mig = n.get("mig")
        nodes.append(
            NodeSpec(
                name=n["name"],
                model=n["model"],
                gpus=int(n["gpus"]),
                sharing=n.get("sharing", "none"),
                replicas=int(n.get("replicas", 1)),
                shared_gpus=tuple(int(g) for g in n["shared_gpus"]) if "shared_gpus" in n else None,
                rename_shared=bool(n.get("rename_shared", False)),
                mig=MigSpec(tuple(mig["gpus"]), mig["profile"], tuple(mig["instances"]))
                if mig
                else None,
                exporter_mode=_exporter_mode(n),
                exporter_pod_uid=bool(n.get("exporter_pod_uid", False)),
                memory_mib=int(n.get("memory_mib", 40960)),
                labels=_pairs(n.get("labels")),
                dra=bool(n.get("dra", False)),
                dynamic_mig=bool(n.get("dynamic_mig", False)),
                exporter=n.get("exporter", "pod"),
                deleted_s=float(n["deleted_s"]) if "deleted_s" in n else None,
                operator=_operator(n.get("operator")),
                traces=_traces(n.get("traces", [])),
                exporter_restarts=tuple(
                    ExporterRestart(float(r["at_s"]), float(r.get("down_s", 0)))
                    for r in n.get("exporter_restarts", [])
                ),
                counters=_counters(n.get("counters")),
                resource_health_status=bool(n.get("resource_health_status", False)),
                device_health=_device_health(n),
            )
        )
    pods = []
    for p in doc.get("pods", []):
        wl = str(p.get("workload", "")).partition("/")
        containers = tuple(
            (str(c["name"]), tuple(str(s) for s in c["slots"])) for c in p.get("containers", [])
        )
        slots = p.get("slots") or sorted({s for _, held in containers for s in held})
        pod_claims = [str(c) for c in p.get("claims", [])]
        if not pod_claims and "claim" in p:
            pod_claims = [str(p["claim"])]
        pods.append(
            PodSpec(
                namespace=p["namespace"],
                name=p["name"],
                node=str(p.get("node", "")),
                slots=tuple(str(s) for s in slots),
                start_s=float(p.get("start_s", 0)),
                stop_s=float(p["stop_s"]) if "stop_s" in p else None,
                grace_s=float(p.get("grace_s", 0)),
                container=containers[0][0] if containers else p.get("container", "main"),
                util_pct=float(p.get("util_pct", 0)),
                util_steps=tuple((float(a), float(b)) for a, b in p.get("util_steps", [])),
                memory_mib=float(p.get("memory_mib", 0)),
                memory_steps=tuple((float(a), float(b)) for a, b in p.get("memory_steps", [])),
                workload_kind=wl[0] if wl[2] else "Pod",
                workload_name=wl[2] or p["name"],
                labels=_pairs(p.get("labels")),
                annotations=_pairs(p.get("annotations")),
                claim=pod_claims[0] if pod_claims else "",
                extra_claims=tuple(pod_claims[1:]),
                containers=containers,
                pending_s=float(p["pending_s"]) if "pending_s" in p else None,
                requests=tuple(
                    sorted((str(k), int(v)) for k, v in (p.get("requests") or {}).items())
                ),
                node_selector=_pairs(p.get("node_selector")),
                priority=int(p.get("priority", 0)),
            )
        )
        _check_pending(pods[-1])
    claims = tuple(
        ClaimSpec(
            namespace=c["namespace"],
            name=c["name"],
            sharing=c.get("sharing"),
            admin=bool(c.get("admin", False)),
            consumed_memory=c.get("consumed_memory"),
        )
        for c in doc.get("claims", [])
    )
    return Scenario(
        doc["name"],
        doc.get("description", ""),
        tuple(nodes),
        tuple(pods),
        claims,
        _policy(doc.get("cluster_policy")),
        _gpu_cluster(doc.get("gpu_cluster")),
        _kueue(doc.get("kueue")),
    )


def builtin_names() -> list[str]:
    folder = resources.files("sim") / "scenarios"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load(name_or_path: str) -> Scenario:
    """Load a built-in scenario by name, or a scenario file by path."""
    path = Path(name_or_path)
    if path.suffix == ".toml" and path.exists():
        text = path.read_text()
    else:
        ref = resources.files("sim") / "scenarios" / f"{name_or_path}.toml"
        if not ref.is_file():
            raise ValueError(
                f"no scenario {name_or_path!r}; built-in: {', '.join(builtin_names())}"
            )
        text = ref.read_text()
    return parse(tomllib.loads(text))
