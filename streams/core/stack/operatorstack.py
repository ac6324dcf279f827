"""The GPU Operator's stack on one node: intended versus reconciled, plane by plane. Pure.

A node's GPU stack is a chain of planes, each an operand the GPU Operator deploys as a DaemonSet
(facts from NVIDIA/gpu-operator main, 2026-08-21: ``assets/``, ``controllers/state_manager.go``,
``api/nvidia/v1/clusterpolicy_types.go``)::

    driver → container toolkit → device plugin, DCGM, dcgm-exporter, GFD, MIG manager
                               → operator validator (driver, toolkit, CUDA, plugin validation)
    driver → DRA driver, DCGM, dcgm-exporter, validator          (a node on the DRA stack)

The toolkit's pod waits in its ``driver-validation`` init container; the device plugin's,
DCGM's, dcgm-exporter's, GFD's and the MIG manager's wait in ``toolkit-validation`` for the
``toolkit-ready`` file that only the validator's own ``toolkit-validation`` writes, after running
a container through the NVIDIA runtime. So one broken toolkit leaves four operands "not ready"
(the seed's lab: "states not ready: [state-operator-validation state-device-plugin
state-dcgm-exporter gpu-feature-discovery]") although only one boundary is broken — possibly with
the toolkit's own pod Ready. The validator's init containers, run in dependency order, are the
witness of each boundary (``PlaneSpec.witness``, :func:`witness`; ``driver-validation`` runs
the same check in the toolkit's and the DRA plugin's pods too). A node's MIG reconfiguration
failure (``nvidia.com/mig.config.state=failed``) breaks the MIG manager's boundary.

Per plane (:func:`judge`): what was **intended** (:func:`intent`: the node-wide
``nvidia.com/gpu.deploy.operands=false``, the ClusterPolicy's ``spec.<operand>.enabled`` — unset
means the operator's default, :data:`POLICY_DEFAULTS` — or on the DRA stack the GPUCluster's
(:data:`GPUCLUSTER_DEFAULTS`; it manages no driver: an ``NVIDIADriver`` owns the node's, or the
host has it, :func:`dra_driver_intent`), and the node's
``nvidia.com/gpu.deploy.<operand>`` label, saying which decided — the operator's own ``true``
label is no intent without a ClusterPolicy in charge, and a plane nobody is known to intend is
``unknown``, never broken; a driver ``pre-installed`` on the host), what **runs** (the operand
pod, from the ClusterPolicy's ``status.namespace`` only, :func:`elsewhere`: ready, restarts,
the reason it is not, the init container it has not passed), and what **our agent reaches**
(its ``agent.status`` sources: ``dcgm`` for dcgm-exporter, ``podresources`` for the device
plugin or DRA driver). A plane whose pod is not ready while a plane it needs is broken *waits
on* that plane; the node's verdict
(:func:`node_status`) names the **first broken boundary** in dependency order and the planes
waiting on it, MIG desired versus reconciled, the ClusterPolicy's own word, and the one line that
says why the node's usage is unknown (:func:`telemetry_reason`).

The operator refuses a GPUCluster while any ClusterPolicy exists (its ``PrerequisiteNotMet``
condition): both present is the node's verdict (``conflict``), unless the ClusterPolicy's stack
on a device-plugin node is broken, which is said first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from contract.inputs import (
    AgentStatus,
    ClusterPolicyRecord,
    ContainerProgress,
    GpuClusterRecord,
    NvidiaDriverRecord,
    OperandPod,
    OperandPods,
    SourceStatus,
)
from contract.outputs import (
    DecidedBy,
    MigReconcile,
    NodeStatus,
    Plane,
    PlaneIntent,
    PlaneName,
    PlanePod,
    PlaneReach,
    PlaneState,
    PolicyStanding,
    StackState,
)
from contract.records import Record
from streams.core.node.telemetry import when

DEPLOY = "nvidia.com/gpu.deploy."
OPERANDS = "nvidia.com/gpu.deploy.operands"
MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"
MIG_STRATEGY = "nvidia.com/mig.strategy"  # GFD's label, when the ClusterPolicy is not read
#: the NVIDIADriver that owns the node's driver (the operator's node-pool label)
DRIVER_OWNER = "nvidia.com/gpu-operator.driver.owner"

Charter = ClusterPolicyRecord | GpuClusterRecord

#: ``spec.<operand>.enabled`` when unset (the operator's ``IsEnabled`` defaults)
POLICY_DEFAULTS: Mapping[str, bool] = {
    "driver": True,
    "toolkit": True,
    "devicePlugin": True,
    "dcgm": True,
    "dcgmExporter": True,
    "gfd": True,
    "migManager": True,
    "nodeStatusExporter": False,
}
#: a GPUCluster's ``spec.<operand>.enabled`` when unset: its controller defaults DCGM off (the
#: exporter embeds its own hostengine) and dcgm-exporter on; the DRA driver and the validator
#: have no switch
GPUCLUSTER_DEFAULTS: Mapping[str, bool] = {
    "dcgm": False,
    "dcgmExporter": True,
    "computeDomains": False,
}

#: init containers that check (not only wait on) their boundary in every pod that has them
CHECKED_EVERYWHERE = frozenset({"driver-validation"})

#: a waiting or terminated reason that means the container fails, not that it is on its way
FAILING = frozenset(
    {
        "CrashLoopBackOff",
        "Error",
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CreateContainerError",
        "CreateContainerConfigError",
        "RunContainerError",
        "OOMKilled",
        "StartError",
    }
)


class PlaneSpec(Record, frozen=True):
    name: PlaneName
    title: str  # as people say it
    label: str  # nvidia.com/gpu.deploy.<label>
    policy_key: str | None  # spec.<key>.enabled; None: the ClusterPolicy does not govern it
    apps: tuple[str, ...]  # the pods' app label (a prefix for the driver's: one per kernel/OS)
    needs: tuple[PlaneName, ...]
    witness: str | None = None  # the validator's init container that checks this boundary
    host_capable: bool = False  # may be pre-installed on the host instead


DRIVER = PlaneSpec(
    "driver",
    "driver",
    "driver",
    "driver",
    ("nvidia-driver-daemonset", "nvidia-gpu-driver-"),
    (),
    "driver-validation",
    host_capable=True,
)

#: the device-plugin stack (ClusterPolicy), in dependency order
DEVICE_PLUGIN_STACK: tuple[PlaneSpec, ...] = (
    DRIVER,
    PlaneSpec(
        "container-toolkit",
        "container toolkit",
        "container-toolkit",
        "toolkit",
        ("nvidia-container-toolkit-daemonset",),
        ("driver",),
        "toolkit-validation",
        host_capable=True,
    ),
    PlaneSpec(
        "device-plugin",
        "device plugin",
        "device-plugin",
        "devicePlugin",
        ("nvidia-device-plugin-daemonset", "nvidia-device-plugin-mps-control-daemon"),
        ("container-toolkit",),
        "plugin-validation",
    ),
    PlaneSpec("dcgm", "DCGM", "dcgm", "dcgm", ("nvidia-dcgm",), ("container-toolkit",)),
    # dcgm-exporter talks to the standalone DCGM when that is deployed, else embeds its own
    PlaneSpec(
        "dcgm-exporter",
        "dcgm-exporter",
        "dcgm-exporter",
        "dcgmExporter",
        ("nvidia-dcgm-exporter",),
        ("container-toolkit", "dcgm"),
    ),
    PlaneSpec(
        "gpu-feature-discovery",
        "GFD",
        "gpu-feature-discovery",
        "gfd",
        ("gpu-feature-discovery",),
        ("container-toolkit",),
    ),
    PlaneSpec(
        "mig-manager",
        "MIG manager",
        "mig-manager",
        "migManager",
        ("nvidia-mig-manager",),
        ("container-toolkit",),
    ),
    PlaneSpec(
        "operator-validator",
        "operator validator",
        "operator-validator",
        None,  # state-operator-validation is always enabled
        ("nvidia-operator-validator",),
        ("driver", "container-toolkit", "device-plugin"),
    ),
)

#: a node on the DRA stack (``nvidia.com/gpu.deploy.dra-driver``; the GPUCluster, not the
#: ClusterPolicy, governs it). Its operands need the driver.
DRA_STACK: tuple[PlaneSpec, ...] = (
    DRIVER,
    PlaneSpec(
        "dra-driver",
        "DRA driver",
        "dra-driver",
        None,
        ("nvidia-dra-driver-kubelet-plugin",),
        ("driver",),
    ),
    PlaneSpec("dcgm", "DCGM", "dcgm-dra", "dcgm", ("nvidia-dcgm-dra",), ("driver",)),
    PlaneSpec(
        "dcgm-exporter",
        "dcgm-exporter",
        "dcgm-exporter-dra",
        "dcgmExporter",
        ("nvidia-dcgm-exporter-dra",),
        ("driver", "dcgm"),
    ),
    PlaneSpec(
        "operator-validator",
        "operator validator",
        "dra-validator",
        None,
        ("nvidia-operator-validator",),
        ("driver", "dra-driver"),
    ),
)

#: which of the agent's sources reaches a plane
REACH: Mapping[PlaneName, str] = {
    "dcgm-exporter": "dcgm",
    "device-plugin": "podresources",
    "dra-driver": "podresources",
}

TITLES: Mapping[PlaneName, str] = {
    s.name: s.title for stack in (DEVICE_PLUGIN_STACK, DRA_STACK) for s in stack
}

#: a lower plane in one of these does not let the planes above it work
BLOCKING: frozenset[PlaneState] = frozenset({"not-ready", "waiting"})
#: the node's first broken boundary is the first plane in one of these
BROKEN: frozenset[PlaneState] = frozenset({"not-ready", "unreachable", "refused"})


# --- intent


def _enabled(policy: Charter, key: str) -> tuple[bool, bool]:
    """(enabled, set explicitly) of ``spec.<key>.enabled``."""
    for op in policy.operands:
        if op.operand == key and op.enabled is not None:
            return op.enabled, True
    defaults = GPUCLUSTER_DEFAULTS if isinstance(policy, GpuClusterRecord) else POLICY_DEFAULTS
    return defaults.get(key, True), False


def _kind(policy: Charter | None) -> str:
    return "GPUCluster" if isinstance(policy, GpuClusterRecord) else "ClusterPolicy"


def intent(
    spec: PlaneSpec,
    labels: Mapping[str, str] | None,
    policy: Charter | None,
    governed: bool = True,
    charter: str = "ClusterPolicy",
) -> PlaneIntent:
    """What was intended for ``spec`` on this node, and what decided it.

    The node-wide ``nvidia.com/gpu.deploy.operands=false`` first (the operator then removes every
    deploy label); then a ClusterPolicy that disables the operand (no DaemonSet at all: for the
    driver and toolkit that means the host's own); then the node's deploy label, which the
    DaemonSet's nodeSelector requires to be ``true``.

    ``policy`` is the stack's charter: the ClusterPolicy, or on the DRA stack the GPUCluster. On a
    ``governed`` stack a ``true`` deploy label is not intent by itself: the operator sets it on
    every GPU node whatever the charter says (``gpuStateLabels`` and ``gpuClusterStateLabels`` in
    its ``controllers/state_manager.go``), so without one in charge it is ``unknown``. Any
    other value is an admin's word on the node and stands without a charter."""
    if labels is not None and labels.get(OPERANDS) == "false":
        return PlaneIntent("disabled", "operands-label", f"{OPERANDS}=false")
    in_charge = policy is not None and not policy.deleted
    policy_says = ""
    policy_by: DecidedBy = "node-label"
    if spec.policy_key is not None and policy is not None and in_charge:
        enabled, explicit = _enabled(policy, spec.policy_key)
        where = f"spec.{spec.policy_key}.enabled={'true' if enabled else 'false'}"
        if not explicit:
            where = f"spec.{spec.policy_key}.enabled unset (default {str(enabled).lower()})"
        policy_says = f"{_kind(policy)} {policy.name}: {where}"
        by_spec: DecidedBy = (
            "gpu-cluster" if isinstance(policy, GpuClusterRecord) else "cluster-policy"
        )
        policy_by = by_spec if explicit else "operator-default"
        if not enabled:
            return PlaneIntent("host" if spec.host_capable else "disabled", policy_by, policy_says)
    label_key = DEPLOY + spec.label
    if labels is None:
        if policy_says:
            return PlaneIntent("unknown", "none", f"{policy_says}; the node's labels not seen yet")
        return PlaneIntent(
            "unknown", "none", f"neither the {_kind(policy)} nor the node's labels seen"
        )
    value = labels.get(label_key)
    if value == "true":
        if policy_says:
            return PlaneIntent("deploy", policy_by, f"{policy_says}; {label_key}=true")
        if governed and not in_charge:
            return PlaneIntent(
                "unknown",
                "none",
                f"no {charter} in charge seen; {label_key}=true is the label the operator "
                "sets on every GPU node, not intent",
            )
        return PlaneIntent("deploy", "node-label", f"{label_key}=true")
    if value is None:
        return PlaneIntent("unlabelled", "node-label", f"{label_key} not set on this node")
    if value == "false":
        return PlaneIntent("disabled", "node-label", f"{label_key}=false")
    if value == "pre-installed" and spec.host_capable:
        return PlaneIntent("host", "node-label", f"{label_key}=pre-installed")
    return PlaneIntent("paused", "node-label", f"{label_key}={value}")


def dra_driver_intent(
    labels: Mapping[str, str] | None,
    cluster: GpuClusterRecord | None,
    drivers: Sequence[NvidiaDriverRecord],
) -> PlaneIntent:
    """The driver's intent on a DRA node. The GPUCluster manages no driver: an ``NVIDIADriver``
    owns the node's (the operator labels it ``nvidia.com/gpu-operator.driver.owner=<name>``), or
    the host has it — which the DRA plugin's ``driver-validation`` then checks."""
    if labels is not None and labels.get(OPERANDS) == "false":
        return PlaneIntent("disabled", "operands-label", f"{OPERANDS}=false")
    owner = (labels or {}).get(DRIVER_OWNER)
    if owner:
        driver = next((d for d in drivers if d.name == owner and not d.deleted), None)
        if driver is None:
            why = f"{DRIVER_OWNER}={owner}; NVIDIADriver {owner} not seen"
            return PlaneIntent("deploy", "node-label", why)
        said = " ".join(x for x in (driver.driver_type, driver.version) if x)
        state = f", status {driver.state}" if driver.state else ""
        detail = f"NVIDIADriver {owner}{f' ({said})' if said else ''}{state}"
        return PlaneIntent("deploy", "nvidia-driver", detail)
    if cluster is None:
        return intent(DRIVER, labels, None, charter="GPUCluster")
    label = (labels or {}).get(DEPLOY + DRIVER.label)
    if label not in (None, "true"):
        return intent(DRIVER, labels, None, governed=False)  # an admin's word on the node
    return PlaneIntent(
        "host",
        "gpu-cluster",
        f"GPUCluster {cluster.name} manages no driver and no NVIDIADriver owns this node "
        f"({DRIVER_OWNER} not set): the host's",
    )


# --- what runs


def _failing(c: ContainerProgress) -> bool:
    if c.ready:
        return False
    if c.reason in FAILING:
        return True
    return c.state == "terminated" and c.exit_code not in (None, 0)


def _restarts(n: int) -> str:
    return f", {n} restart{'s' if n != 1 else ''}" if n else ""


def _pending_init(pod: OperandPod) -> ContainerProgress | None:
    """The first init container the pod has not passed (None once all have, or it is ready)."""
    if pod.ready:
        return None
    return next((c for c in pod.init if not c.ready), None)


def _container_trouble(c: ContainerProgress) -> str:
    how = c.reason if c.reason and c.reason != "PodInitializing" else c.state
    if c.state == "terminated" and c.exit_code not in (None, 0) and not c.reason:
        how = f"exited {c.exit_code}"
    return f"{how}{_restarts(c.restarts)}"


def trouble(pod: OperandPod) -> str:
    """Why a pod is not ready, in a few words: "CrashLoopBackOff, 12 restarts", "Init:
    toolkit-validation (running)", "Pending"."""
    if pod.deleting:
        return "terminating"
    init = _pending_init(pod)
    if init is not None:
        return f"Init: {init.name} ({_container_trouble(init)})"
    for c in pod.containers:
        if not c.ready and (c.reason or c.state != "running"):
            return _container_trouble(c)
    if pod.reason:
        return f"{pod.reason}{_restarts(pod.restarts)}"
    return f"{pod.phase}, not ready{_restarts(pod.restarts)}"


def _plane_pod(pod: OperandPod) -> PlanePod:
    init = _pending_init(pod)
    reason = pod.reason
    if not reason and not pod.ready:
        reason = next((c.reason for c in pod.containers if c.reason and not c.ready), "")
    return PlanePod(
        f"{pod.namespace}/{pod.name}",
        pod.phase,
        pod.ready,
        pod.restarts,
        reason,
        init.name if init is not None else "",
    )


def pods_of(spec: PlaneSpec, pods: Sequence[OperandPod]) -> list[OperandPod]:
    """The plane's pods on the node, its main DaemonSet's first; a terminating one last."""

    def rank(pod: OperandPod) -> tuple[bool, int]:
        for i, app in enumerate(spec.apps):
            if pod.app == app or (app.endswith("-") and pod.app.startswith(app)):
                return pod.deleting, i
        return pod.deleting, -1

    mine = [p for p in pods if rank(p)[1] >= 0]
    return sorted(mine, key=lambda p: (rank(p), p.name))


#: what a boundary's check says: ``passed``, ``failing``, ``running`` (still checking),
#: ``not-reached`` (an earlier init container has not passed), ``absent`` (no such check here)
WitnessVerdict = Literal["passed", "failing", "running", "not-reached", "absent"]


class Witness(Record, frozen=True):
    """What an init container that checks a boundary says of it, and where it ran."""

    verdict: WitnessVerdict
    container: ContainerProgress | None = None
    app: str = ""  # the pod's app label

    @property
    def who(self) -> str:
        name = self.container.name if self.container is not None else "its check"
        if self.app == "nvidia-operator-validator":
            return f"the validator's {name}"
        return f"{name} in the {self.app} pod"


def _witness_in(pod: OperandPod, name: str) -> Witness:
    for i, c in enumerate(pod.init):
        if c.name != name:
            continue
        if c.ready or pod.ready:
            return Witness("passed", c, pod.app)
        if any(not earlier.ready for earlier in pod.init[:i]):
            return Witness("not-reached", c, pod.app)
        return Witness("failing" if _failing(c) else "running", c, pod.app)
    return Witness("absent")


#: the strongest word first: one pod that passed the check is proof
_WORD: tuple[WitnessVerdict, ...] = ("passed", "failing", "running", "not-reached", "absent")


def witness(
    validator: OperandPod | None, name: str | None, others: Sequence[OperandPod] = ()
) -> Witness:
    """What the validator's init container ``name`` says of its boundary. ``driver-validation``
    is the same check (``nvidia-validator``, component driver) in the toolkit's and the DRA
    plugin's pods: ``others`` are asked too (:data:`CHECKED_EVERYWHERE`)."""
    if name is None:
        return Witness("absent")
    pods = [validator] if validator is not None else []
    if name in CHECKED_EVERYWHERE:
        pods += [p for p in others if p is not validator]
    seen = [_witness_in(p, name) for p in pods]
    return min(seen, key=lambda w: _WORD.index(w.verdict), default=Witness("absent"))


# --- a plane


def _reach(status: AgentStatus | None, plane: PlaneName) -> SourceStatus | None:
    source = REACH.get(plane)
    if status is None or source is None:
        return None
    return next((s for s in status.sources if s.source == source), None)


def _since(ms: int | None) -> str:
    return f" since {when(ms)}" if ms is not None else ""


def judge(
    spec: PlaneSpec,
    want: PlaneIntent,
    pods: Sequence[OperandPod] | None,
    validator: OperandPod | None,
    lower: Mapping[PlaneName, Plane],
    status: AgentStatus | None = None,
    refused: str | None = None,
    mig_state: str | None = None,
    mig_desired: str | None = None,
    unseen: str = "the node's operand pods not seen yet",
) -> Plane:
    """One plane's standing (module docstring). ``pods``: the node's operand pods (None: not
    observed, ``unseen`` says why); ``lower``: the planes below, judged already; ``refused``:
    why the worker refuses this node's exporter answers, if it does."""
    mine = pods_of(spec, pods or ())
    pod = mine[0] if mine else None
    run = _plane_pod(pod) if pod is not None else None
    src = _reach(status, spec.name)
    reach = PlaneReach(src.source, src.state, src.reason, src.since_ms) if src else None

    def plane(state: PlaneState, reason: str, waits_on: PlaneName | None = None) -> Plane:
        if want.kind == "unknown" and state in BROKEN:
            # what nobody is known to intend is not broken: it is not judged
            state, reason = "unknown", f"{reason}; not judged: {want.detail}"
        return Plane(spec.name, state, want, reason, run, reach, waits_on)

    if want.kind in ("disabled", "paused", "unlabelled"):
        still = f" (its pod {run.pod} is still there)" if run is not None else ""
        word = {"disabled": "disabled", "paused": "paused", "unlabelled": "not deployed here"}
        return plane("disabled", f"{spec.title} {word[want.kind]}: {want.detail}{still}")

    own_ready = pod is not None and pod.ready
    if not own_ready:
        for need in spec.needs:
            below = lower.get(need)
            if below is None or below.state not in BLOCKING:
                continue
            root = below.waits_on or need
            doing = f" ({trouble(pod)})" if pod is not None else ""
            return plane("waiting", f"{spec.title} waits on the {TITLES[root]}{doing}", root)

    seen = witness(validator, spec.witness, pods or ())
    checked = seen.who
    if want.kind == "host":
        if seen.verdict == "passed":
            return plane("ready", f"{spec.title} on the host ({want.detail}), validated")
        if seen.verdict == "failing" and seen.container is not None:
            why = _container_trouble(seen.container)
            return plane("not-ready", f"{spec.title} not ready: {checked} {why}")
        if seen.verdict == "running":
            return plane("not-ready", f"{spec.title} not ready: {checked} still runs")
        return plane(
            "unknown",
            f"{spec.title} on the host ({want.detail}); no validator on this node checks it",
        )
    if pod is None:
        if pods is None:
            return plane("unknown", f"{spec.title}: {unseen}")
        if want.kind == "unknown":
            return plane("unknown", f"{spec.title}: no pod on this node; {want.detail}")
        return plane("not-ready", f"{spec.title} not ready: no {spec.apps[0]} pod on this node")
    if not pod.ready:
        return plane("not-ready", f"{spec.title} not ready: {trouble(pod)}")
    # its pod is ready; the validator's check of the boundary has the last word
    if seen.verdict == "failing" and seen.container is not None:
        why = _container_trouble(seen.container)
        return plane("not-ready", f"{spec.title} not ready: {checked} {why}")
    if seen.verdict == "running":
        return plane("not-ready", f"{spec.title} not ready: {checked} still runs")
    if spec.name == "mig-manager" and mig_state == "failed":
        return plane(
            "not-ready",
            f"MIG manager failed to apply MIG config {mig_desired} ({MIG_STATE}=failed)",
        )
    if src is not None and spec.name == "dcgm-exporter":
        if refused:
            return plane("refused", f"dcgm-exporter answers, but not from this node: {refused}")
        if src.state == "failing":
            why = f"{src.reason}: {src.detail}" if src.detail else src.reason
            return plane(
                "unreachable",
                f"dcgm-exporter ready, but our agent cannot scrape it{_since(src.since_ms)} "
                f"({why})",
            )
        if src.state == "disabled":
            return plane(
                "unreachable",
                f"dcgm-exporter ready, but our agent finds no exporter for this node "
                f"({src.detail or src.reason})",
            )
    if src is not None and src.source == "podresources" and src.state == "failing":
        return plane(
            "unreachable",
            f"{spec.title} ready, but our agent cannot read the kubelet's PodResources"
            f"{_since(src.since_ms)} ({src.reason})",
        )
    return plane("ready", f"{spec.title} ready")


# --- MIG, the ClusterPolicy, the node


def mig(
    labels: Mapping[str, str] | None,
    policy: Charter | None,
    manager: Plane | None,
) -> MigReconcile:
    """MIG desired (``nvidia.com/mig.config``) versus reconciled (``…mig.config.state``)."""
    labels = labels or {}
    in_charge = isinstance(policy, ClusterPolicyRecord) and not policy.deleted
    strategy = (
        policy.mig_strategy if isinstance(policy, ClusterPolicyRecord) and in_charge else None
    )
    strategy = strategy or labels.get(MIG_STRATEGY)
    desired = labels.get(MIG_CONFIG)
    state = labels.get(MIG_STATE)
    if desired is None:
        return MigReconcile(strategy, None, state, None, "no MIG configuration for this node")
    if manager is not None and manager.state == "disabled" and state != "success":
        # nothing reconciles it: a label left from before the manager was turned off
        why = f"MIG config {desired} not reconciled here ({MIG_STATE} {state or 'not set'}): "
        return MigReconcile(strategy, desired, state, None, why + manager.reason)
    if state == "success":
        return MigReconcile(strategy, desired, state, True, f"MIG config {desired} applied")
    if state == "rebooting":
        why = f"node rebooting to apply MIG config {desired}"
        return MigReconcile(strategy, desired, state, False, why)
    if state == "failed":
        why = f"MIG config {desired} failed to apply ({MIG_STATE}=failed)"
        return MigReconcile(strategy, desired, state, False, why)
    why = f"MIG config {desired} pending" if state == "pending" else ""
    if not why:
        why = f"MIG config {desired} not applied yet ({MIG_STATE} {state or 'not set'})"
    if manager is not None and manager.state != "ready":
        why += f"; {manager.reason}"
    return MigReconcile(strategy, desired, state, False, why)


def standing(policy: Charter | None) -> PolicyStanding | None:
    """The charter's own word: ``status.state`` and its ``Ready``/``Error`` conditions."""
    if policy is None or policy.deleted:
        return None
    ready_c = next((c for c in policy.conditions if c.type == "Ready"), None)
    error_c = next((c for c in policy.conditions if c.type == "Error"), None)
    if policy.state == "ready":
        ready: bool | None = True
    elif policy.state == "notReady":
        ready = False
    else:  # ignored (another ClusterPolicy is in charge), or no status yet
        ready = None
    if ready is None and ready_c is not None and policy.state != "ignored":
        ready = ready_c.status == "True"
    if ready is False and error_c is not None and error_c.message:
        message = error_c.message
    elif ready_c is not None:
        message = ready_c.message or ready_c.reason
    else:
        message = ""
    return PolicyStanding(policy.name, policy.state, ready, message, _kind(policy))


def _and(names: Sequence[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"


def telemetry_reason(planes: Sequence[Plane]) -> tuple[str | None, bool]:
    """The one line that says why the node's usage is unknown, as far as the stack says, and
    whether the exporter is off on purpose (no alert for it). None when the stack has nothing to
    say (the exporter is ready and reached: the telemetry rule's own causes apply)."""
    exporter = next((p for p in planes if p.name == "dcgm-exporter"), None)
    if exporter is None:
        return None, False
    kind = exporter.intent.kind
    if exporter.state == "disabled":
        if kind in ("disabled", "paused"):
            by = exporter.intent.detail
            how = "disabled" if kind == "disabled" else "paused"
            cluster_wide = exporter.intent.decided_by in ("cluster-policy", "gpu-cluster")
            where = "" if cluster_wide else " on this node"
            return f"dcgm-exporter {how}{where} by {by}", True
        if exporter.pod is not None:  # one runs, not of the operator's intent: nothing to add
            return None, False
        return f"dcgm-exporter not deployed on this node: {exporter.intent.detail}", False
    if exporter.state == "waiting" and exporter.waits_on is not None:
        root = next((p for p in planes if p.name == exporter.waits_on), None)
        why = f" ({root.reason})" if root is not None else ""
        return f"dcgm-exporter waits on the {TITLES[exporter.waits_on]}{why}", False
    if exporter.state == "not-ready":
        return exporter.reason.replace("dcgm-exporter not ready: ", "dcgm-exporter "), False
    if exporter.state in ("unreachable", "refused"):
        return exporter.reason, False
    return None, False


def telemetry_plane(planes: Sequence[Plane]) -> PlaneName | None:
    """The first broken boundary behind the stack's telemetry line (:func:`telemetry_reason`):
    the plane dcgm-exporter waits on, or the exporter itself when its own boundary is broken;
    None when neither."""
    exporter = next((p for p in planes if p.name == "dcgm-exporter"), None)
    if exporter is None:
        return None
    if exporter.state == "waiting":
        return exporter.waits_on
    return exporter.name if exporter.state in BROKEN else None


def operator_seen(
    labels: Mapping[str, str] | None,
    policy: ClusterPolicyRecord | None,
    pods: OperandPods | None,
    cluster: GpuClusterRecord | None = None,
) -> bool:
    """Whether the GPU Operator is seen to manage the node: a ClusterPolicy in charge (not
    deleted, not ``ignored``), a GPUCluster, or a deploy label (the operator labels every GPU
    node it manages).

    Operand-looking pods alone are not enough: a dcgm-exporter installed by its own chart (or
    labelled like the operator's) says nothing about what an operator intended, and judging
    its node's unlabelled planes would call a healthy node's stack disabled."""
    del pods  # kept in the signature: what is seen is decided here, in one place
    in_charge = policy is not None and not policy.deleted and policy.state != "ignored"
    labelled = any(k.startswith(DEPLOY) for k in labels or {})
    return in_charge or labelled or (cluster is not None and not cluster.deleted)


def elsewhere(pods: OperandPods | None, policy: Charter | None) -> str | None:
    """Why the agent's operand pods do not speak for the operator's: it watches another namespace
    than the one the ClusterPolicy in charge runs its operands in (``status.namespace``; OpenShift
    installs it in ``nvidia-gpu-operator``). ``None``: they do, or nothing says otherwise."""
    if pods is None or policy is None or not policy.namespace:
        return None
    if pods.namespace == policy.namespace:
        return None
    return (
        f"the node's agent watches namespace {pods.namespace or '(none)'} for operand pods, but "
        f"{_kind(policy)} {policy.name} runs them in {policy.namespace} "
        f"(set GPUATTR_KUBE_OPERATOR_NAMESPACE={policy.namespace} on the agent)"
    )


def conflict_line(policy: ClusterPolicyRecord, cluster: GpuClusterRecord) -> str:
    """Why the operator refuses the GPUCluster: its own ``Error`` message when it wrote one."""
    said = next((c for c in cluster.conditions if c.type == "Error" and c.status == "True"), None)
    why = f" ({said.reason}: {said.message})" if said is not None and said.message else ""
    return (
        f"ClusterPolicy {policy.name} and GPUCluster {cluster.name} both exist: the GPU Operator "
        f"refuses a GPUCluster while a ClusterPolicy exists{why}"
    )


def node_status(
    node: str,
    ts_ms: int,
    labels: Mapping[str, str] | None,
    policy: ClusterPolicyRecord | None,
    pods: OperandPods | None,
    status: AgentStatus | None = None,
    refused: str | None = None,
    cluster: GpuClusterRecord | None = None,
    drivers: Sequence[NvidiaDriverRecord] = (),
) -> NodeStatus:
    """The node's stack at ``ts_ms``: every plane judged in dependency order, the first broken
    boundary and what waits on it, MIG, the charter's own word (the ClusterPolicy's, or the
    GPUCluster's on a DRA node), the telemetry line."""
    operand_pods = pods.pods if pods is not None else None
    if policy is not None and policy.deleted:
        policy = None
    if cluster is not None and cluster.deleted:
        cluster = None
    conflict = (
        conflict_line(policy, cluster) if policy is not None and cluster is not None else None
    )
    dra = (labels or {}).get(DEPLOY + "dra-driver") == "true" or any(
        p.app == "nvidia-dra-driver-kubelet-plugin" for p in operand_pods or ()
    )
    if dra:
        # the GPUCluster is this stack's charter; refused while a ClusterPolicy exists, it
        # decides nothing here
        charter: Charter | None = cluster if conflict is None else None
        standing_ = standing(cluster)
    else:
        standing_ = standing(policy)
        if policy is not None and policy.state == "ignored":
            policy = None  # another ClusterPolicy is in charge: this one decides nothing
        charter = policy
    unseen = elsewhere(pods, charter)
    if unseen is not None:
        operand_pods = None  # the operator's pods are not where the agent looks: none seen
    stack = DRA_STACK if dra else DEVICE_PLUGIN_STACK
    validator_spec = stack[-1]
    found = pods_of(validator_spec, operand_pods or ())
    validator = found[0] if found else None
    mig_state = (labels or {}).get(MIG_STATE)
    mig_desired = (labels or {}).get(MIG_CONFIG)
    name = "GPUCluster" if dra else "ClusterPolicy"
    planes: dict[PlaneName, Plane] = {}
    for spec in stack:
        if dra and spec is DRIVER:
            want = dra_driver_intent(
                labels, charter if isinstance(charter, GpuClusterRecord) else None, drivers
            )
        else:
            want = intent(spec, labels, charter, charter=name)
        planes[spec.name] = judge(
            spec,
            want,
            operand_pods,
            validator,
            planes,
            status,
            refused,
            mig_state,
            mig_desired,
            unseen or "the node's operand pods not seen yet",
        )
    ordered = tuple(planes.values())
    migs = mig(labels, charter, planes.get("mig-manager"))
    tele, on_purpose = telemetry_reason(ordered)
    if not operator_seen(labels, policy, pods, cluster):
        summary = f"no GPU Operator seen on {node} (no ClusterPolicy, GPUCluster or deploy labels)"
        if operand_pods:
            summary += "; its operand-like pods alone do not say what was intended"
        # nothing it intends here: the telemetry rule's own causes say why usage is unknown
        return NodeStatus(node, ts_ms, "unknown", summary, ordered, migs, None, (), standing_)
    first = next((p for p in ordered if p.state in BROKEN), None)
    if first is not None:
        blocked = tuple(p.name for p in ordered if p.waits_on == first.name)
        line = _broken_line(node, first, blocked)
        return NodeStatus(
            node,
            ts_ms,
            "broken",
            f"{line}; {conflict}" if conflict is not None else line,
            ordered,
            migs,
            first.name,
            blocked,
            standing_,
            tele,
            on_purpose,
        )
    if conflict is not None:
        where = (
            f"the DRA stack on {node} is not reconciled"
            if dra
            else f"the device-plugin stack on {node} stays the ClusterPolicy's"
        )
        return NodeStatus(
            node,
            ts_ms,
            "conflict",
            f"{conflict}; {where}",
            ordered,
            migs,
            None,
            (),
            standing_,
            tele,
            on_purpose,
        )
    unknown = [p for p in ordered if p.state == "unknown"]
    state: StackState
    if all(p.state == "disabled" for p in ordered):
        state = "disabled"
        summary = f"GPU stack disabled on {node}: {ordered[0].intent.detail}"
    elif unknown:
        state = "unknown"
        why = unseen or unknown[0].reason
        summary = f"{_and([TITLES[p.name] for p in unknown])} unknown on {node}: {why}"
    elif migs.reconciled is False:
        state, summary = "reconciling", f"{migs.reason} on {node}"
    else:
        state, summary = "ready", f"GPU stack ready on {node}"
    if standing_ is not None and standing_.ready is False:
        summary += f"; {standing_.kind} {standing_.name} not ready, not on this node's account"
        summary += f": {standing_.message}" if standing_.message else ""
    return NodeStatus(
        node, ts_ms, state, summary, ordered, migs, None, (), standing_, tele, on_purpose
    )


def _broken_line(node: str, first: Plane, blocked: Sequence[PlaneName]) -> str:
    """The broken stack in a line: ``container toolkit not ready on gpu-a (…); device plugin,
    dcgm-exporter and GFD wait on it``. The validator waits on every plane by design: it is in
    ``blocked``, not in the line."""
    title = TITLES[first.name]
    prefix = f"{title} not ready: "
    if first.reason.startswith(prefix):
        line = f"{title} not ready on {node} ({first.reason[len(prefix) :]})"
    else:
        line = f"{first.reason} (on {node})"
    said = [TITLES[n] for n in blocked if n != "operator-validator"]
    if said:
        line += f"; {_and(said)} wait{'s' if len(said) == 1 else ''} on it"
    return line
