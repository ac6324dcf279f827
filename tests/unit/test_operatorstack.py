"""The GPU Operator's stack per node (streams/core/stack/operatorstack.py): decision tables.

The pods, labels and ClusterPolicies are shaped as the operator deploys them (NVIDIA/gpu-operator
main, 2026-08-21): operand ``app`` labels, ``nvidia.com/gpu.deploy.<operand>`` labels, the
validator's init containers in their order, ``status.state`` and the ``Error`` condition's
message. The seed's lab (001): host driver, operator toolkit, MIG strategy single, the toolkit
broken and four operands "not ready".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract import codec
from contract.inputs import (
    AgentStatus,
    ClusterPolicyRecord,
    ContainerProgress,
    OperandPod,
    OperandPods,
    OperandSpec,
    PolicyCondition,
    SourceStatus,
)
from contract.outputs import NodeStatus, PlaneName
from contract.records import replace
from streams.core.stack.operatorstack import (
    DEVICE_PLUGIN_STACK,
    DRA_STACK,
    PlaneSpec,
    intent,
    judge,
    mig,
    node_status,
    standing,
    trouble,
    witness,
)

NS = "gpu-operator"
NODE = "gpu-a"
VALIDATIONS = ("driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation")
DP = "nvidia-device-plugin-daemonset"
EXPORTER = "nvidia-dcgm-exporter"
TOOLKIT = "nvidia-container-toolkit-daemonset"
GFD = "gpu-feature-discovery"
VALIDATOR = "nvidia-operator-validator"


def done(name: str) -> ContainerProgress:
    return ContainerProgress(name, "terminated", ready=True, reason="Completed", exit_code=0)


def running(name: str) -> ContainerProgress:
    return ContainerProgress(name, "running")


def crashing(name: str, restarts: int) -> ContainerProgress:
    return ContainerProgress(name, "waiting", restarts=restarts, reason="CrashLoopBackOff")


def later(name: str) -> ContainerProgress:
    return ContainerProgress(name, "waiting", reason="PodInitializing")


def pod(app: str, *, ready: bool = True, **kw: object) -> OperandPod:
    base = OperandPod(NS, f"{app}-x7k2p", app, "Running", ready)
    return replace(base, **kw)  # type: ignore[arg-type]


def ready_pod(app: str, inits: tuple[str, ...] = ()) -> OperandPod:
    return pod(app, init=tuple(done(i) for i in inits), containers=(running_ready(app),))


def running_ready(name: str) -> ContainerProgress:
    return ContainerProgress(name, "running", ready=True)


def in_init(app: str, at: str = "toolkit-validation") -> OperandPod:
    """An operand waiting in an init container's loop (until [ -f …-ready ])."""
    return pod(
        app,
        ready=False,
        phase="Pending",
        init=(running(at),),
        containers=(ContainerProgress(app, "waiting", reason="PodInitializing"),),
    )


def crashloop(app: str, restarts: int) -> OperandPod:
    c = ContainerProgress(app, "waiting", restarts=restarts, reason="CrashLoopBackOff")
    return pod(app, ready=False, restarts=restarts, reason="", containers=(c,))


def validator(at: str | None = None, crash: int = 0) -> OperandPod:
    """The validator stuck at init container ``at`` (crash looping when ``crash`` restarts),
    or ready when ``at`` is None."""
    if at is None:
        return ready_pod(VALIDATOR, VALIDATIONS)
    i = VALIDATIONS.index(at)
    stuck = crashing(at, crash) if crash else running(at)
    inits = (*(done(n) for n in VALIDATIONS[:i]), stuck, *(later(n) for n in VALIDATIONS[i + 1 :]))
    return pod(VALIDATOR, ready=False, phase="Pending", init=inits)


LABELS = {
    f"nvidia.com/gpu.deploy.{x}": "true"
    for x in (
        "driver",
        "container-toolkit",
        "device-plugin",
        "dcgm",
        "dcgm-exporter",
        "gpu-feature-discovery",
        "node-status-exporter",
        "operator-validator",
    )
}

NOT_READY = (
    "ClusterPolicy is not ready, states not ready: [state-operator-validation "
    "state-device-plugin state-dcgm-exporter gpu-feature-discovery]"
)

#: the seed's working ClusterPolicy: host driver, operator toolkit, devicePlugin, gfd and
#: dcgmExporter on (standalone DCGM off, the chart's default), MIG strategy single
SEED_POLICY = ClusterPolicyRecord(
    "cluster-policy",
    1,
    operands=(
        OperandSpec("driver", False),
        OperandSpec("toolkit", True),
        OperandSpec("devicePlugin", True),
        OperandSpec("dcgm", False),
        OperandSpec("dcgmExporter", True),
        OperandSpec("gfd", True),
        OperandSpec("migManager", True),
    ),
    mig_strategy="single",
    state="notReady",
    namespace=NS,
    conditions=(
        PolicyCondition("Ready", "False", "Error"),
        PolicyCondition("Error", "True", "OperandNotReady", NOT_READY),
    ),
)
READY_POLICY = replace(
    SEED_POLICY,
    state="ready",
    conditions=(
        PolicyCondition("Ready", "True", "Reconciled", "ClusterPolicy is ready"),
        PolicyCondition("Error", "False", "Ready"),
    ),
)


def setting(p: ClusterPolicyRecord, **enabled: bool) -> ClusterPolicyRecord:
    """The policy with some ``spec.<operand>.enabled`` changed."""
    kept = tuple(o for o in p.operands if o.operand not in enabled)
    return replace(p, operands=(*kept, *(OperandSpec(k, v) for k, v in enabled.items())))


HEALTHY = (
    ready_pod(TOOLKIT, ("driver-validation",)),
    ready_pod(DP, ("toolkit-validation", "config-manager-init")),
    ready_pod(EXPORTER, ("toolkit-validation",)),
    ready_pod(GFD, ("toolkit-validation", "config-manager-init")),
    validator(),
)


def agent(dcgm: str = "ok", podresources: str = "ok", **dcgm_kw: str) -> AgentStatus:
    return AgentStatus(
        NODE,
        1,
        (
            SourceStatus("dcgm", dcgm, 1_000, **dcgm_kw),  # type: ignore[arg-type]
            SourceStatus("podresources", podresources, 1_000),  # type: ignore[arg-type]
        ),
    )


def with_pods(*pods: OperandPod, drop: tuple[str, ...] = ()) -> tuple[OperandPod, ...]:
    """HEALTHY with some operands replaced (by app) or dropped."""
    apps = {p.app for p in pods} | set(drop)
    return (*(p for p in HEALTHY if p.app not in apps), *pods)


@dataclass(frozen=True)
class Case:
    pods: tuple[OperandPod, ...] | None = HEALTHY
    labels: dict[str, str] | None = field(default_factory=lambda: dict(LABELS))
    policy: ClusterPolicyRecord | None = READY_POLICY
    status: AgentStatus | None = field(default_factory=agent)
    refused: str | None = None
    # expected
    state: str = "ready"
    first: PlaneName | None = None
    blocked: tuple[PlaneName, ...] = ()
    summary: str = f"GPU stack ready on {NODE}"
    telemetry: str | None = None
    on_purpose: bool = False


#: the node's labels with the driver on the host (an admin's word: it stands without a policy)
HOST_DRIVER = {**LABELS, "nvidia.com/gpu.deploy.driver": "pre-installed"}
NO_POLICY_DCGM = (
    "DCGM unknown on gpu-a: DCGM: no pod on this node; no ClusterPolicy in charge seen; "
    "nvidia.com/gpu.deploy.dcgm=true is the label the operator sets on every GPU node, not intent"
)

SEED_SUMMARY = (
    "container toolkit not ready on gpu-a (the validator's toolkit-validation CrashLoopBackOff, "
    "7 restarts); device plugin, dcgm-exporter and GFD wait on it"
)

CASES = {
    # the seed: the toolkit's own pod reports Ready, the validator cannot run a container through
    # the runtime; the device plugin, exporter and GFD wait for toolkit-ready
    "seed: toolkit not ready, four operands wait": Case(
        pods=with_pods(
            in_init(DP), in_init(EXPORTER), in_init(GFD), validator("toolkit-validation", 7)
        ),
        policy=SEED_POLICY,
        state="broken",
        first="container-toolkit",
        blocked=("device-plugin", "dcgm-exporter", "gpu-feature-discovery", "operator-validator"),
        summary=SEED_SUMMARY,
        telemetry="dcgm-exporter waits on the container toolkit (container toolkit not ready: "
        "the validator's toolkit-validation CrashLoopBackOff, 7 restarts)",
    ),
    "toolkit's own pod crash looping": Case(
        pods=with_pods(
            crashloop(TOOLKIT, 12),
            in_init(DP),
            in_init(EXPORTER),
            in_init(GFD),
            validator("toolkit-validation", 3),
        ),
        state="broken",
        first="container-toolkit",
        blocked=("device-plugin", "dcgm-exporter", "gpu-feature-discovery", "operator-validator"),
        summary="container toolkit not ready on gpu-a (CrashLoopBackOff, 12 restarts); device "
        "plugin, dcgm-exporter and GFD wait on it",
        telemetry="dcgm-exporter waits on the container toolkit (container toolkit not ready: "
        "CrashLoopBackOff, 12 restarts)",
    ),
    "host driver missing: everything above waits on it": Case(
        pods=with_pods(
            in_init(TOOLKIT, "driver-validation"),
            in_init(DP),
            in_init(EXPORTER),
            in_init(GFD),
            validator("driver-validation", 3),
        ),
        policy=SEED_POLICY,
        state="broken",
        first="driver",
        blocked=(
            "container-toolkit",
            "device-plugin",
            "dcgm-exporter",
            "gpu-feature-discovery",
            "operator-validator",
        ),
        summary="driver not ready on gpu-a (the validator's driver-validation CrashLoopBackOff, "
        "3 restarts); container toolkit, device plugin, dcgm-exporter and GFD wait on it",
        telemetry="dcgm-exporter waits on the driver (driver not ready: the validator's "
        "driver-validation CrashLoopBackOff, 3 restarts)",
    ),
    "all ready": Case(),
    "all ready, ClusterPolicy not ready elsewhere": Case(
        policy=SEED_POLICY,
        summary=f"GPU stack ready on {NODE}; ClusterPolicy cluster-policy not ready, not on this "
        f"node's account: {NOT_READY}",
    ),
    "exporter disabled by the node's label: on purpose": Case(
        pods=with_pods(drop=(EXPORTER,)),
        labels={**LABELS, "nvidia.com/gpu.deploy.dcgm-exporter": "false"},
        status=agent("disabled", reason="no-exporter-pod"),
        telemetry="dcgm-exporter disabled on this node by "
        "nvidia.com/gpu.deploy.dcgm-exporter=false",
        on_purpose=True,
    ),
    "exporter disabled in the ClusterPolicy: on purpose": Case(
        pods=with_pods(drop=(EXPORTER,)),
        policy=setting(READY_POLICY, dcgmExporter=False),
        status=agent("disabled", reason="no-exporter-pod"),
        telemetry="dcgm-exporter disabled by ClusterPolicy cluster-policy: "
        "spec.dcgmExporter.enabled=false",
        on_purpose=True,
    ),
    # it would disable the exporter and leave the driver to the host: the labels decide instead
    "an ignored ClusterPolicy decides nothing": Case(
        labels={**LABELS, "nvidia.com/gpu.deploy.driver": "pre-installed"},
        pods=with_pods(ready_pod("nvidia-dcgm", ("toolkit-validation",))),
        policy=replace(setting(READY_POLICY, dcgmExporter=False), state="ignored", conditions=()),
    ),
    "exporter crash looping": Case(
        pods=with_pods(crashloop(EXPORTER, 12)),
        status=agent("failing", reason="unreachable"),
        state="broken",
        first="dcgm-exporter",
        summary="dcgm-exporter not ready on gpu-a (CrashLoopBackOff, 12 restarts)",
        telemetry="dcgm-exporter CrashLoopBackOff, 12 restarts",
    ),
    "exporter answers, but not from this node": Case(
        refused="the exporter at http://10.0.0.9:9400/metrics reports Hostname gpu-b",
        state="broken",
        first="dcgm-exporter",
        summary="dcgm-exporter answers, but not from this node: the exporter at "
        "http://10.0.0.9:9400/metrics reports Hostname gpu-b (on gpu-a)",
        telemetry="dcgm-exporter answers, but not from this node: the exporter at "
        "http://10.0.0.9:9400/metrics reports Hostname gpu-b",
    ),
    "exporter ready, our agent cannot scrape it": Case(
        status=agent("failing", reason="timeout", detail="no answer in 5 s"),
        state="broken",
        first="dcgm-exporter",
        summary="dcgm-exporter ready, but our agent cannot scrape it since 1970-01-01T00:00:01Z "
        "(timeout: no answer in 5 s) (on gpu-a)",
        telemetry="dcgm-exporter ready, but our agent cannot scrape it since "
        "1970-01-01T00:00:01Z (timeout: no answer in 5 s)",
    ),
    "device plugin intended, no pod": Case(
        pods=with_pods(drop=(DP,)),
        state="broken",
        first="device-plugin",
        summary="device plugin not ready on gpu-a (no nvidia-device-plugin-daemonset pod on "
        "this node)",
    ),
    "kubelet PodResources unreachable": Case(
        status=agent(podresources="failing"),
        state="broken",
        first="device-plugin",
        summary="device plugin ready, but our agent cannot read the kubelet's PodResources since "
        "1970-01-01T00:00:01Z () (on gpu-a)",
    ),
    "standalone DCGM crash looping: the exporter waits on it": Case(
        pods=with_pods(crashloop("nvidia-dcgm", 4), crashloop(EXPORTER, 9)),
        policy=setting(READY_POLICY, dcgm=True),
        state="broken",
        first="dcgm",
        blocked=("dcgm-exporter",),
        summary="DCGM not ready on gpu-a (CrashLoopBackOff, 4 restarts); dcgm-exporter waits on it",
        telemetry="dcgm-exporter waits on the DCGM (DCGM not ready: CrashLoopBackOff, 4 restarts)",
    ),
    "driver pre-installed by label, validated": Case(
        labels={**LABELS, "nvidia.com/gpu.deploy.driver": "pre-installed"},
        pods=with_pods(ready_pod("nvidia-dcgm", ("toolkit-validation",))),
    ),
    "every operand off on this node": Case(
        pods=(),
        labels={"nvidia.com/gpu.deploy.operands": "false"},
        status=agent("disabled", reason="no-exporter-pod"),
        state="disabled",
        summary="GPU stack disabled on gpu-a: nvidia.com/gpu.deploy.operands=false",
        telemetry="dcgm-exporter disabled on this node by nvidia.com/gpu.deploy.operands=false",
        on_purpose=True,
    ),
    "no GPU Operator seen": Case(
        pods=(),
        labels={},
        policy=None,
        status=agent("disabled", reason="no-exporter-pod"),
        state="unknown",
        summary="no GPU Operator seen on gpu-a (no ClusterPolicy, GPUCluster or deploy labels)",
        telemetry=None,  # nothing intended here: the telemetry rule's own causes speak
    ),
    "an exporter pod alone (its own chart, or labelled like the operator's)": Case(
        pods=(ready_pod("nvidia-dcgm-exporter"),),
        labels={},
        policy=None,
        status=agent("ok"),
        state="unknown",
        summary="no GPU Operator seen on gpu-a (no ClusterPolicy, GPUCluster or deploy labels); "
        "its operand-like pods alone do not say what was intended",
        telemetry=None,
    ),
    "operand pods not seen yet": Case(
        pods=None,
        state="unknown",
        summary="driver, container toolkit, device plugin, dcgm-exporter, GFD and operator "
        "validator unknown on gpu-a: driver on the host (ClusterPolicy cluster-policy: "
        "spec.driver.enabled=false); no validator on this node checks it",
    ),
    "MIG reconfiguration pending": Case(
        labels={
            **LABELS,
            "nvidia.com/gpu.deploy.mig-manager": "true",
            "nvidia.com/mig.config": "all-1g.10gb",
            "nvidia.com/mig.config.state": "pending",
        },
        pods=with_pods(ready_pod("nvidia-mig-manager", ("toolkit-validation",))),
        state="reconciling",
        summary="MIG config all-1g.10gb pending on gpu-a",
    ),
    "MIG reconfiguration failed": Case(
        labels={
            **LABELS,
            "nvidia.com/gpu.deploy.mig-manager": "true",
            "nvidia.com/mig.config": "all-1g.10gb",
            "nvidia.com/mig.config.state": "failed",
        },
        pods=with_pods(ready_pod("nvidia-mig-manager", ("toolkit-validation",))),
        state="broken",
        first="mig-manager",
        summary="MIG manager failed to apply MIG config all-1g.10gb "
        "(nvidia.com/mig.config.state=failed) (on gpu-a)",
    ),
    # OpenShift: the operator runs its operands in nvidia-gpu-operator; the agent watches the
    # default namespace and finds none there
    "operands in the policy's namespace, the agent watches another": Case(
        pods=(),
        policy=replace(READY_POLICY, namespace="nvidia-gpu-operator"),
        state="unknown",
        summary="driver, container toolkit, device plugin, dcgm-exporter, GFD and operator "
        "validator unknown on gpu-a: the node's agent watches namespace gpu-operator "
        "for operand pods, but ClusterPolicy cluster-policy runs them in nvidia-gpu-operator "
        "(set GPUATTR_KUBE_OPERATOR_NAMESPACE=nvidia-gpu-operator on the agent)",
    ),
    "operands in the policy's namespace, the agent watches it": Case(
        policy=replace(READY_POLICY, namespace=NS),
    ),
    "no ClusterPolicy yet, the DCGM pod missing: not judged": Case(
        pods=with_pods(drop=("nvidia-dcgm",)),
        labels=HOST_DRIVER,
        policy=None,
        state="unknown",
        summary=NO_POLICY_DCGM,
    ),
    "only an ignored ClusterPolicy, the exporter off by its label: nothing broken": Case(
        pods=with_pods(drop=("nvidia-dcgm", EXPORTER)),
        labels={**HOST_DRIVER, "nvidia.com/gpu.deploy.dcgm-exporter": "false"},
        policy=replace(setting(READY_POLICY, dcgm=False), state="ignored", conditions=()),
        status=agent("disabled", reason="no-exporter-pod"),
        state="unknown",
        summary=NO_POLICY_DCGM,
        telemetry="dcgm-exporter disabled on this node by "
        "nvidia.com/gpu.deploy.dcgm-exporter=false",
        on_purpose=True,
    ),
    "MIG manager disabled on purpose, an old failed state: not reconciling": Case(
        labels={
            **LABELS,
            "nvidia.com/gpu.deploy.mig-manager": "false",
            "nvidia.com/mig.config": "all-1g.10gb",
            "nvidia.com/mig.config.state": "failed",
        },
    ),
    "DRA node, no GPUCluster: the crash looping plugin is not judged": Case(
        labels={
            "nvidia.com/gpu.deploy.driver": "pre-installed",
            **{
                f"nvidia.com/gpu.deploy.{x}": "true"
                for x in ("dra-driver", "dcgm-dra", "dcgm-exporter-dra", "dra-validator")
            },
        },
        pods=(
            replace(
                crashloop("nvidia-dra-driver-kubelet-plugin", 5), init=(done("driver-validation"),)
            ),
            ready_pod("nvidia-dcgm-dra"),
            ready_pod("nvidia-dcgm-exporter-dra"),
            pod(VALIDATOR, ready=False, phase="Running"),
        ),
        policy=None,
        state="unknown",
        summary=(
            "DRA driver and operator validator unknown on gpu-a: DRA driver not ready: "
            "CrashLoopBackOff, 5 restarts; not judged: no GPUCluster in charge seen; "
            "nvidia.com/gpu.deploy.dra-driver=true is the label the operator sets on every GPU "
            "node, not intent"
        ),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_node_verdict(case: Case) -> None:
    pods = OperandPods(NODE, 1, NS, case.pods) if case.pods is not None else None
    got = node_status(NODE, 5, case.labels, case.policy, pods, case.status, case.refused)
    assert (got.state, got.first_broken, got.blocked) == (case.state, case.first, case.blocked)
    assert got.summary == case.summary
    assert (got.telemetry_reason, got.telemetry_disabled) == (case.telemetry, case.on_purpose)
    assert codec.decode(codec.encode(got)) == got  # a node-status record, through the codec


def test_seed_names_one_broken_boundary_not_four() -> None:
    """The ClusterPolicy lists four states not ready; the node's verdict names one boundary, and
    says which plane's intent the policy and labels decided."""
    case = CASES["seed: toolkit not ready, four operands wait"]
    assert case.pods is not None
    got = node_status(
        NODE, 5, case.labels, SEED_POLICY, OperandPods(NODE, 1, NS, case.pods), agent()
    )
    planes = {p.name: p for p in got.planes}
    broken = [p.name for p in got.planes if p.state == "not-ready"]
    assert broken == ["container-toolkit"]
    assert planes["container-toolkit"].pod is not None
    assert planes["container-toolkit"].pod.ready
    assert {p.name for p in got.planes if p.state == "waiting"} == set(got.blocked)
    assert all(planes[n].waits_on == "container-toolkit" for n in got.blocked)
    assert planes["driver"].state == "ready"
    assert (planes["driver"].intent.kind, planes["driver"].intent.decided_by) == (
        "host",
        "cluster-policy",
    )
    assert planes["dcgm"].state == "disabled"  # off in the policy: the exporter embeds its own
    assert planes["device-plugin"].pod is not None
    assert planes["device-plugin"].pod.init_at == "toolkit-validation"
    assert got.policy is not None
    assert got.policy.ready is False
    assert got.policy.message == NOT_READY
    assert got.mig.strategy == "single"
    assert got.mig.reconciled is None


def test_stacks_are_in_dependency_order() -> None:
    for stack in (DEVICE_PLUGIN_STACK, DRA_STACK):
        seen: set[str] = set()
        for spec in stack:
            assert set(spec.needs) <= seen, f"{spec.name} needs a plane judged after it"
            seen.add(spec.name)


P = "cluster-policy"
DCGM_EXPORTER = next(s for s in DEVICE_PLUGIN_STACK if s.name == "dcgm-exporter")
DRIVER = DEVICE_PLUGIN_STACK[0]
VALIDATOR_SPEC = DEVICE_PLUGIN_STACK[-1]
KEY = "nvidia.com/gpu.deploy.dcgm-exporter"


NO_POLICY = (
    f"no ClusterPolicy in charge seen; {KEY}=true is the label the operator sets on every GPU "
    "node, not intent"
)


def policy(*ops: OperandSpec) -> ClusterPolicyRecord:
    return ClusterPolicyRecord(P, 1, operands=ops)


INTENTS = {
    # the operator sets every deploy label true on every GPU node: alone it is no intent
    "label true, no policy read": (
        DCGM_EXPORTER, {KEY: "true"}, None, ("unknown", "none", NO_POLICY),
    ),
    "label true, policy unset: the operator's default": (
        DCGM_EXPORTER, {KEY: "true"}, policy(),
        (
            "deploy", "operator-default",
            f"ClusterPolicy {P}: spec.dcgmExporter.enabled unset (default true); {KEY}=true",
        ),
    ),
    "label true, policy true": (
        DCGM_EXPORTER, {KEY: "true"}, policy(OperandSpec("dcgmExporter", True)),
        (
            "deploy", "cluster-policy",
            f"ClusterPolicy {P}: spec.dcgmExporter.enabled=true; {KEY}=true",
        ),
    ),
    "policy true, label false: the label decides": (
        DCGM_EXPORTER, {KEY: "false"}, policy(OperandSpec("dcgmExporter", True)),
        ("disabled", "node-label", f"{KEY}=false"),
    ),
    "policy false, label true: the policy decides": (
        DCGM_EXPORTER, {KEY: "true"}, policy(OperandSpec("dcgmExporter", False)),
        ("disabled", "cluster-policy", f"ClusterPolicy {P}: spec.dcgmExporter.enabled=false"),
    ),
    "policy driver false: the host's driver": (
        DRIVER, {"nvidia.com/gpu.deploy.driver": "true"}, policy(OperandSpec("driver", False)),
        ("host", "cluster-policy", f"ClusterPolicy {P}: spec.driver.enabled=false"),
    ),
    "driver label pre-installed": (
        DRIVER, {"nvidia.com/gpu.deploy.driver": "pre-installed"}, policy(),
        ("host", "node-label", "nvidia.com/gpu.deploy.driver=pre-installed"),
    ),
    "pre-installed means nothing for the exporter": (
        DCGM_EXPORTER, {KEY: "pre-installed"}, None,
        ("paused", "node-label", f"{KEY}=pre-installed"),
    ),
    "driver manager paused it": (
        DCGM_EXPORTER, {KEY: "paused-for-driver-upgrade"}, None,
        ("paused", "node-label", f"{KEY}=paused-for-driver-upgrade"),
    ),
    "label absent": (
        DCGM_EXPORTER, {}, None,
        ("unlabelled", "node-label", f"{KEY} not set on this node"),
    ),
    "operands off node-wide, whatever else": (
        DCGM_EXPORTER, {"nvidia.com/gpu.deploy.operands": "false", KEY: "true"},
        policy(OperandSpec("dcgmExporter", True)),
        ("disabled", "operands-label", "nvidia.com/gpu.deploy.operands=false"),
    ),
    "labels not seen": (
        DCGM_EXPORTER, None, None,
        ("unknown", "none", "neither the ClusterPolicy nor the node's labels seen"),
    ),
    "validator: not in the policy, its label decides": (
        VALIDATOR_SPEC, {"nvidia.com/gpu.deploy.operator-validator": "true"},
        policy(OperandSpec("dcgmExporter", False)),
        ("deploy", "node-label", "nvidia.com/gpu.deploy.operator-validator=true"),
    ),
    "a deleted policy is no policy": (
        DCGM_EXPORTER, {KEY: "true"},
        replace(policy(OperandSpec("dcgmExporter", False)), deleted=True),
        ("unknown", "none", NO_POLICY),
    ),
    "label false, no policy read: the admin's word stands": (
        DCGM_EXPORTER, {KEY: "false"}, None, ("disabled", "node-label", f"{KEY}=false"),
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "labels", "pol", "expected"), INTENTS.values(), ids=INTENTS.keys()
)
def test_intent(
    spec: PlaneSpec,
    labels: dict[str, str] | None,
    pol: ClusterPolicyRecord | None,
    expected: tuple[str, str, str],
) -> None:
    got = intent(spec, labels, pol)
    assert (got.kind, got.decided_by, got.detail) == expected


def test_a_dra_plane_s_label_decides_without_a_cluster_policy() -> None:
    dra = next(s for s in DRA_STACK if s.name == "dra-driver")
    label = "nvidia.com/gpu.deploy.dra-driver"
    got = intent(dra, {label: "true"}, None, governed=False)
    assert (got.kind, got.decided_by, got.detail) == ("deploy", "node-label", f"{label}=true")


TROUBLES = {
    "main container crash looping": (crashloop(EXPORTER, 12), "CrashLoopBackOff, 12 restarts"),
    "waiting in an init loop": (in_init(DP), "Init: toolkit-validation (running)"),
    "init container crash looping": (
        validator("toolkit-validation", 1),
        "Init: toolkit-validation (CrashLoopBackOff, 1 restart)",
    ),
    "image not pulled": (
        pod(
            EXPORTER,
            ready=False,
            phase="Pending",
            containers=(ContainerProgress(EXPORTER, "waiting", reason="ImagePullBackOff"),),
        ),
        "ImagePullBackOff",
    ),
    "init exited non-zero, no reason": (
        pod(
            TOOLKIT,
            ready=False,
            phase="Pending",
            init=(ContainerProgress("driver-validation", "terminated", exit_code=1),),
        ),
        "Init: driver-validation (exited 1)",
    ),
    "unschedulable": (
        pod(DP, ready=False, phase="Pending", reason="Unschedulable"),
        "Unschedulable",
    ),
    "running, readiness failing": (pod(GFD, ready=False), "Running, not ready"),
    "terminating": (pod(GFD, ready=False, deleting=True), "terminating"),
}


@pytest.mark.parametrize(("p", "expected"), TROUBLES.values(), ids=TROUBLES.keys())
def test_trouble(p: OperandPod, expected: str) -> None:
    assert trouble(p) == expected


@pytest.mark.parametrize(
    ("v", "name", "expected"),
    [
        (None, "toolkit-validation", "absent"),
        (validator(), "toolkit-validation", "passed"),
        (validator("toolkit-validation", 2), "driver-validation", "passed"),
        (validator("toolkit-validation", 2), "toolkit-validation", "failing"),
        (validator("toolkit-validation"), "toolkit-validation", "running"),
        (validator("driver-validation", 2), "plugin-validation", "not-reached"),
        (validator(), "gpu-validation", "absent"),
    ],
    ids=["no validator", "ready", "earlier passed", "failing", "running", "not reached", "other"],
)
def test_witness(v: OperandPod | None, name: str, expected: str) -> None:
    assert witness(v, name).verdict == expected


def test_driver_validation_is_checked_in_every_pod_that_runs_it() -> None:
    """The toolkit's and the DRA plugin's driver-validation run the same check as the
    validator's; toolkit-validation elsewhere is only a wait loop for the validator's file."""
    toolkit_passed = ready_pod(TOOLKIT, ("driver-validation",))
    assert witness(None, "driver-validation", [toolkit_passed]).verdict == "passed"
    stuck = validator("driver-validation", 2)
    assert witness(stuck, "driver-validation", [toolkit_passed]).verdict == "passed"
    assert witness(stuck, "driver-validation", [in_init(TOOLKIT, "driver-validation")]).verdict == (
        "failing"
    )
    dp_waiting = in_init(DP)
    assert witness(None, "toolkit-validation", [dp_waiting]).verdict == "absent"


MIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"


@pytest.mark.parametrize(
    ("labels", "reconciled", "reason"),
    [
        ({}, None, "no MIG configuration for this node"),
        ({MIG: "all-disabled", MIG_STATE: "success"}, True, "MIG config all-disabled applied"),
        ({MIG: "all-1g.10gb", MIG_STATE: "pending"}, False, "MIG config all-1g.10gb pending"),
        (
            {MIG: "all-1g.10gb", MIG_STATE: "rebooting"},
            False,
            "node rebooting to apply MIG config all-1g.10gb",
        ),
        (
            {MIG: "all-1g.10gb", MIG_STATE: "failed"},
            False,
            "MIG config all-1g.10gb failed to apply (nvidia.com/mig.config.state=failed)",
        ),
        (
            {MIG: "all-1g.10gb"},
            False,
            "MIG config all-1g.10gb not applied yet (nvidia.com/mig.config.state not set)",
        ),
    ],
    ids=["none", "success", "pending", "rebooting", "failed", "no state yet"],
)
def test_mig(labels: dict[str, str], reconciled: bool | None, reason: str) -> None:
    got = mig(labels, SEED_POLICY, None)
    assert (got.reconciled, got.reason, got.strategy) == (reconciled, reason, "single")


def test_mig_with_its_manager_disabled_is_not_reconciling() -> None:
    """An old ``failed`` state left on a node whose MIG manager is off on purpose: nobody
    reconciles it, so it is neither pending nor broken."""
    off = {"nvidia.com/gpu.deploy.mig-manager": "false", MIG: "all-1g.10gb", MIG_STATE: "failed"}
    spec = next(s for s in DEVICE_PLUGIN_STACK if s.name == "mig-manager")
    want = intent(spec, off, READY_POLICY)
    manager = judge(spec, want, HEALTHY, None, {})
    assert manager.state == "disabled"
    got = mig(off, READY_POLICY, manager)
    assert got.reconciled is None
    assert got.reason == (
        "MIG config all-1g.10gb not reconciled here (nvidia.com/mig.config.state failed): MIG "
        "manager disabled: nvidia.com/gpu.deploy.mig-manager=false"
    )


def test_mig_pending_says_why_the_manager_does_not_apply_it() -> None:
    labels = {
        **LABELS,
        "nvidia.com/gpu.deploy.mig-manager": "true",
        MIG: "all-1g.10gb",
        MIG_STATE: "pending",
    }
    pods = OperandPods(NODE, 1, NS, with_pods(crashloop("nvidia-mig-manager", 6)))
    got = node_status(NODE, 5, labels, READY_POLICY, pods, agent())
    assert got.first_broken == "mig-manager"
    assert got.mig.reason == (
        "MIG config all-1g.10gb pending; MIG manager not ready: CrashLoopBackOff, 6 restarts"
    )


@pytest.mark.parametrize(
    ("pol", "ready", "message"),
    [
        (None, None, None),
        (SEED_POLICY, False, NOT_READY),
        (READY_POLICY, True, "ClusterPolicy is ready"),
        (replace(SEED_POLICY, state="ignored", conditions=()), None, ""),
        (replace(SEED_POLICY, state="", conditions=()), None, ""),
        (replace(READY_POLICY, deleted=True), None, None),
    ],
    ids=["none", "notReady", "ready", "ignored", "no status yet", "deleted"],
)
def test_policy_standing(
    pol: ClusterPolicyRecord | None, ready: bool | None, message: str | None
) -> None:
    got = standing(pol)
    if message is None:
        assert got is None
    else:
        assert got is not None
        assert (got.ready, got.message) == (ready, message)


def test_inputs_round_trip_through_the_codec() -> None:
    pods = OperandPods(NODE, 1, NS, with_pods(validator("toolkit-validation", 7)), "42")
    assert codec.decode(codec.encode(pods)) == pods
    assert codec.decode(codec.encode(SEED_POLICY)) == SEED_POLICY
    assert codec.kind_of(pods).kind == "k8s.operand-pods"
    assert codec.kind_of(SEED_POLICY).kind == "k8s.clusterpolicy"
    assert codec.kind_of(node_status(NODE, 1, LABELS, None, None)).kind == "node-status"
    assert isinstance(node_status(NODE, 1, LABELS, None, None), NodeStatus)


# --- invariants over any stack (Hypothesis)

APPS = (
    "nvidia-driver-daemonset",
    TOOLKIT,
    DP,
    "nvidia-dcgm",
    EXPORTER,
    GFD,
    "nvidia-mig-manager",
    "nvidia-dra-driver-kubelet-plugin",
    "nvidia-dcgm-exporter-dra",
)
DEPLOY_KEYS = (
    "driver",
    "container-toolkit",
    "device-plugin",
    "dcgm",
    "dcgm-exporter",
    "gpu-feature-discovery",
    "mig-manager",
    "operator-validator",
    "dra-driver",
    "dcgm-exporter-dra",
)
reasons = st.sampled_from(["", "CrashLoopBackOff", "PodInitializing", "ImagePullBackOff", "Error"])
progress = st.builds(
    ContainerProgress,
    name=st.sampled_from([*VALIDATIONS, "config-manager-init"]),
    state=st.sampled_from(["waiting", "running", "terminated", "unknown"]),
    ready=st.booleans(),
    restarts=st.integers(0, 30),
    reason=reasons,
    exit_code=st.none() | st.integers(0, 2),
)
any_pod = st.builds(
    OperandPod,
    namespace=st.just(NS),
    name=st.text("abc", min_size=1, max_size=3),
    app=st.sampled_from([*APPS, VALIDATOR, "unrelated"]),
    phase=st.sampled_from(["Pending", "Running", "Unknown"]),
    ready=st.booleans(),
    restarts=st.integers(0, 30),
    reason=reasons,
    init=st.lists(progress, max_size=4).map(tuple),
    containers=st.lists(progress, max_size=2).map(tuple),
    deleting=st.booleans(),
)
label_values = st.sampled_from(["true", "false", "pre-installed", "paused-for-driver-upgrade"])
any_labels = st.none() | st.builds(
    lambda deploy, operands, mig_c, mig_s: {
        **{f"nvidia.com/gpu.deploy.{k}": v for k, v in deploy.items()},
        **({"nvidia.com/gpu.deploy.operands": "false"} if operands else {}),
        **({MIG: mig_c} if mig_c else {}),
        **({MIG_STATE: mig_s} if mig_s else {}),
    },
    st.dictionaries(st.sampled_from(DEPLOY_KEYS), label_values),
    st.booleans(),
    st.sampled_from(["", "all-disabled", "all-1g.10gb"]),
    st.sampled_from(["", "success", "pending", "rebooting", "failed"]),
)
any_policy = st.none() | st.builds(
    ClusterPolicyRecord,
    name=st.just(P),
    ts_ms=st.just(1),
    operands=st.lists(
        st.builds(
            OperandSpec,
            st.sampled_from(["driver", "toolkit", "devicePlugin", "dcgm", "dcgmExporter", "gfd"]),
            st.none() | st.booleans(),
        ),
        max_size=6,
    ).map(tuple),
    state=st.sampled_from(["", "ready", "notReady", "ignored"]),
    deleted=st.booleans(),
)
source_states = st.sampled_from(["ok", "failing", "disabled", "starting"])
any_status = st.none() | st.builds(
    lambda d, r: AgentStatus(
        NODE, 1, (SourceStatus("dcgm", d, 1, "timeout"), SourceStatus("podresources", r, 1))
    ),
    source_states,
    source_states,
)


@settings(max_examples=400, deadline=None)
@given(
    any_labels,
    any_policy,
    st.none() | st.lists(any_pod, max_size=8).map(tuple),
    any_status,
    st.none() | st.just("reports Hostname gpu-b"),
)
def test_any_stack_keeps_the_invariants(
    labels: dict[str, str] | None,
    pol: ClusterPolicyRecord | None,
    pods: tuple[OperandPod, ...] | None,
    status: AgentStatus | None,
    refused: str | None,
) -> None:
    operand = OperandPods(NODE, 1, NS, pods) if pods is not None else None
    got = node_status(NODE, 5, labels, pol, operand, status, refused)
    assert codec.decode(codec.encode(got)) == got
    names = [p.name for p in got.planes]
    assert names in ([s.name for s in DEVICE_PLUGIN_STACK], [s.name for s in DRA_STACK])
    index = {n: i for i, n in enumerate(names)}
    broken = [p for p in got.planes if p.state in ("not-ready", "unreachable", "refused")]
    if got.state == "unknown" and got.first_broken is None and broken:
        assert got.summary.startswith("no GPU Operator seen")
    elif broken:
        assert (got.state, got.first_broken) == ("broken", broken[0].name)
    else:
        assert got.state != "broken"
        assert got.first_broken is None
    for p in got.planes:
        if p.intent.kind in ("disabled", "paused", "unlabelled"):
            assert p.state == "disabled"
        if p.state == "waiting":
            assert p.waits_on is not None
            assert index[p.waits_on] < index[p.name]
            root = got.planes[index[p.waits_on]]
            assert root.state == "not-ready", "a plane waits on the root of the chain"
        else:
            assert p.waits_on is None
    if got.first_broken is not None:
        assert all(got.planes[index[b]].state == "waiting" for b in got.blocked)
        assert set(got.blocked) == {p.name for p in got.planes if p.waits_on == got.first_broken}
    if got.telemetry_disabled:
        exporter = got.planes[index["dcgm-exporter"]]
        assert exporter.state == "disabled"
        assert exporter.intent.kind in ("disabled", "paused")


def test_an_exporter_the_operator_did_not_deploy_here_leaves_telemetry_to_its_own_rule() -> None:
    """A node the operator has not labelled for dcgm-exporter, where an exporter pod runs anyway
    (deployed by other means, or the simulator's): the stack has nothing to say about its
    telemetry. Without that pod it says the exporter is not deployed here."""
    labels = {k: v for k, v in LABELS.items() if not k.endswith(".dcgm-exporter")}
    ran = node_status(NODE, 5, labels, None, OperandPods(NODE, 1, NS, HEALTHY), agent())
    exporter = next(p for p in ran.planes if p.name == "dcgm-exporter")
    assert (exporter.state, exporter.intent.kind) == ("disabled", "unlabelled")
    assert exporter.pod is not None
    assert (ran.telemetry_reason, ran.telemetry_disabled) == (None, False)
    none = node_status(
        NODE, 5, labels, None, OperandPods(NODE, 1, NS, with_pods(drop=(EXPORTER,))), agent()
    )
    assert none.telemetry_reason == (
        "dcgm-exporter not deployed on this node: "
        "nvidia.com/gpu.deploy.dcgm-exporter not set on this node"
    )
    assert none.telemetry_disabled is False
