"""The DRA stack's verdict under the GPU Operator's GPUCluster (and the NVIDIADriver that may own a
node's driver): intent from the GPUCluster's spec and its controller's defaults, its own word
(``status.state``, conditions), both it and a ClusterPolicy present (the operator refuses the
GPUCluster), neither present. Operand names, labels and init containers are upstream's
(NVIDIA/gpu-operator ``manifests/state-dra-*``, ``controllers/gpucluster_controller.go``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from contract import codec
from contract.inputs import (
    GpuClusterRecord,
    NvidiaDriverRecord,
    OperandPod,
    OperandPods,
    OperandSpec,
    PolicyCondition,
)
from contract.outputs import PlaneName
from contract.records import replace
from streams.core.stack.operatorstack import node_status
from tests.gpuoperator_objects import RECONCILED, refused_message
from tests.unit.test_operatorstack import (
    HEALTHY,
    LABELS,
    NODE,
    NS,
    READY_POLICY,
    agent,
    crashloop,
    done,
    pod,
    ready_pod,
    running_ready,
)

PLUGIN = "nvidia-dra-driver-kubelet-plugin"
DCGM = "nvidia-dcgm-dra"
EXPORTER = "nvidia-dcgm-exporter-dra"
VALIDATOR = "nvidia-operator-validator"  # the DRA validator's pods carry the validator's label

#: the labels the operator's node-labelling puts on a GPU node when a GPUCluster exists
#: (``gpuClusterStateLabels``)
DRA_LABELS = {
    f"nvidia.com/gpu.deploy.{x}": "true"
    for x in ("driver", "dra-driver", "dra-validator", "dcgm-dra", "dcgm-exporter-dra")
}
OWNED = {**DRA_LABELS, "nvidia.com/gpu-operator.driver.owner": "default"}

READY = GpuClusterRecord(
    "gpu-cluster",
    1,
    state="ready",
    namespace=NS,
    conditions=(
        PolicyCondition("Ready", "True", "Reconciled", RECONCILED),
        PolicyCondition("Error", "False", "Ready"),
    ),
)
WAITING = replace(
    READY,
    state="notReady",
    conditions=(
        PolicyCondition("Ready", "False", "Error"),
        PolicyCondition("Error", "True", "OperandNotReady", "Waiting for operand pods to be ready"),
    ),
)
REFUSED = replace(
    READY,
    state="notReady",
    conditions=(
        PolicyCondition("Ready", "False", "Error"),
        PolicyCondition(
            "Error",
            "True",
            "PrerequisiteNotMet",
            'A ClusterPolicy CR "cluster-policy" exists; a ClusterPolicy CR and GPUCluster CR may '
            "not exist at the same time",
        ),
    ),
)
BOTH = (
    "ClusterPolicy cluster-policy and GPUCluster gpu-cluster both exist: the GPU Operator "
    "refuses a GPUCluster while a ClusterPolicy exists"
)
DRIVER = NvidiaDriverRecord("default", 1, "gpu", "580.95.05", "notReady", NS)


def plugin(ready: bool = True) -> OperandPod:
    if not ready:
        return replace(crashloop(PLUGIN, 7), init=(done("driver-validation"),))
    return ready_pod(PLUGIN, ("driver-validation",))


DRA_HEALTHY = (
    plugin(),
    ready_pod(EXPORTER),
    ready_pod(VALIDATOR, ("gpu-validation",)),
)


def driver_pod(ready: bool) -> OperandPod:
    app = "nvidia-gpu-driver-ubuntu22.04-7c4d8b5f9"
    if ready:
        return pod(app, containers=(running_ready("nvidia-driver-ctr"),))
    return crashloop(app, 4)


@dataclass(frozen=True)
class Case:
    cluster: GpuClusterRecord | None = READY
    labels: dict[str, str] = field(default_factory=lambda: dict(DRA_LABELS))
    pods: tuple[OperandPod, ...] = DRA_HEALTHY
    policy_present: bool = False
    drivers: tuple[NvidiaDriverRecord, ...] = ()
    # expected
    state: str = "ready"
    first: PlaneName | None = None
    blocked: tuple[PlaneName, ...] = ()
    summary: str = f"GPU stack ready on {NODE}"
    intents: dict[PlaneName, tuple[str, str]] = field(default_factory=dict)
    telemetry: str | None = None


CASES: dict[str, Case] = {
    "ready: the host's driver, DCGM off by the controller's default": Case(
        intents={
            "driver": ("host", "gpu-cluster"),
            "dra-driver": ("deploy", "node-label"),
            "dcgm": ("disabled", "operator-default"),
            "dcgm-exporter": ("deploy", "operator-default"),
            "operator-validator": ("deploy", "node-label"),
        },
    ),
    "the DRA driver crash looping: the first broken boundary, the GPUCluster waits on it": Case(
        cluster=WAITING,
        pods=(plugin(ready=False), *DRA_HEALTHY[1:2], pod(VALIDATOR, ready=False)),
        state="broken",
        first="dra-driver",
        blocked=("operator-validator",),
        summary=f"DRA driver not ready on {NODE} (CrashLoopBackOff, 7 restarts)",
    ),
    "standalone DCGM asked for and absent: dcgm-exporter waits on it": Case(
        cluster=replace(WAITING, operands=(OperandSpec("dcgm", True),)),
        pods=(plugin(), ready_pod(VALIDATOR, ("gpu-validation",)), crashloop(EXPORTER, 3)),
        state="broken",
        first="dcgm",
        blocked=("dcgm-exporter",),
        summary=(
            f"DCGM not ready on {NODE} (no {DCGM} pod on this node); dcgm-exporter waits on it"
        ),
        intents={"dcgm": ("deploy", "gpu-cluster")},
        telemetry=(
            "dcgm-exporter waits on the DCGM (DCGM not ready: no nvidia-dcgm-dra pod on this node)"
        ),
    ),
    "dcgm-exporter off in the GPUCluster: telemetry off on purpose": Case(
        cluster=replace(READY, operands=(OperandSpec("dcgmExporter", False),)),
        pods=(plugin(), ready_pod(VALIDATOR, ("gpu-validation",))),
        intents={"dcgm-exporter": ("disabled", "gpu-cluster")},
        telemetry=(
            "dcgm-exporter disabled by GPUCluster gpu-cluster: spec.dcgmExporter.enabled=false"
        ),
    ),
    "the GPUCluster not ready while this node is: said, not on the node's account": Case(
        cluster=WAITING,
        summary=(
            f"GPU stack ready on {NODE}; GPUCluster gpu-cluster not ready, not on this node's "
            "account: Waiting for operand pods to be ready"
        ),
    ),
    "an NVIDIADriver owns the node's driver, and its pod crash loops": Case(
        labels=OWNED,
        drivers=(DRIVER,),
        pods=(driver_pod(False), *DRA_HEALTHY),
        state="broken",
        first="driver",
        summary=f"driver not ready on {NODE} (CrashLoopBackOff, 4 restarts)",
        intents={"driver": ("deploy", "nvidia-driver")},
    ),
    "an NVIDIADriver owns the node's driver, ready": Case(
        labels=OWNED,
        drivers=(replace(DRIVER, state="ready"),),
        pods=(driver_pod(True), *DRA_HEALTHY),
        intents={"driver": ("deploy", "nvidia-driver")},
    ),
    "the owner label names an NVIDIADriver not seen: still the operator's driver": Case(
        labels=OWNED,
        pods=(driver_pod(True), *DRA_HEALTHY),
        intents={"driver": ("deploy", "node-label")},
    ),
    "no GPUCluster: the operator's own labels are not intent": Case(
        cluster=None,
        pods=(plugin(ready=False), *DRA_HEALTHY[1:]),
        state="unknown",
        summary=(
            f"driver, DRA driver and DCGM unknown on {NODE}: driver: no pod on this node; no "
            "GPUCluster in charge seen; nvidia.com/gpu.deploy.driver=true is the label the "
            "operator sets on every GPU node, not intent"
        ),
    ),
    "a deleted GPUCluster is none": Case(
        cluster=replace(READY, deleted=True),
        state="unknown",
        summary=(
            f"driver and DCGM unknown on {NODE}: driver: no pod on this node; no GPUCluster in "
            "charge seen; nvidia.com/gpu.deploy.driver=true is the label the operator sets on "
            "every GPU node, not intent"
        ),
    ),
    "both present, a DRA node: the operator refuses the GPUCluster": Case(
        cluster=REFUSED,
        policy_present=True,
        pods=(),
        state="conflict",
        summary=(
            f"{BOTH} (PrerequisiteNotMet: {refused_message()}); "
            f"the DRA stack on {NODE} is not reconciled"
        ),
    ),
    "both present, a device-plugin node that works: the conflict is the verdict": Case(
        cluster=REFUSED,
        policy_present=True,
        labels=LABELS,
        pods=HEALTHY,
        state="conflict",
        summary=(
            f"{BOTH} (PrerequisiteNotMet: {refused_message()}); "
            f"the device-plugin stack on {NODE} stays the ClusterPolicy's"
        ),
    ),
    "both present, a device-plugin node that is broken: its break first": Case(
        cluster=replace(READY, conditions=()),
        policy_present=True,
        labels=LABELS,
        pods=tuple(p for p in HEALTHY if p.app != "nvidia-dcgm-exporter"),
        state="broken",
        first="dcgm-exporter",
        summary=(
            f"dcgm-exporter not ready on {NODE} (no nvidia-dcgm-exporter pod on this node); "
            "ClusterPolicy cluster-policy and GPUCluster gpu-cluster both exist: the GPU Operator "
            "refuses a GPUCluster while a ClusterPolicy exists"
        ),
        telemetry="dcgm-exporter no nvidia-dcgm-exporter pod on this node",
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_dra_stack_verdict(case: Case) -> None:
    pods = OperandPods(NODE, 1, NS, case.pods)
    policy = READY_POLICY if case.policy_present else None
    got = node_status(NODE, 5, case.labels, policy, pods, agent(), None, case.cluster, case.drivers)
    assert (got.state, got.first_broken, got.blocked) == (case.state, case.first, case.blocked)
    assert got.summary == case.summary
    assert got.telemetry_reason == case.telemetry
    planes = {p.name: p for p in got.planes}
    for name, (kind, by) in case.intents.items():
        assert (planes[name].intent.kind, planes[name].intent.decided_by) == (kind, by), name
    assert codec.decode(codec.encode(got)) == got


def test_the_dra_node_reports_the_gpuclusters_own_word() -> None:
    got = node_status(
        NODE,
        5,
        DRA_LABELS,
        READY_POLICY,
        OperandPods(NODE, 1, NS, DRA_HEALTHY),
        agent(),
        None,
        WAITING,
    )
    assert got.policy is not None
    assert (got.policy.kind, got.policy.name, got.policy.ready) == (
        "GPUCluster",
        "gpu-cluster",
        False,
    )
    assert got.policy.message == "Waiting for operand pods to be ready"


def test_a_device_plugin_node_reports_the_clusterpolicys_word_beside_a_gpucluster() -> None:
    got = node_status(
        NODE, 5, LABELS, READY_POLICY, OperandPods(NODE, 1, NS, HEALTHY), agent(), None, READY
    )
    assert got.policy is not None
    assert (got.policy.kind, got.policy.name) == ("ClusterPolicy", "cluster-policy")


def test_the_nvidiadriver_is_named_in_the_drivers_intent() -> None:
    got = node_status(
        NODE, 5, OWNED, None, OperandPods(NODE, 1, NS, DRA_HEALTHY), agent(), None, READY, (DRIVER,)
    )
    driver = next(p for p in got.planes if p.name == "driver")
    assert driver.intent.detail == "NVIDIADriver default (gpu 580.95.05), status notReady"


def test_an_admins_driver_label_stands_under_a_gpucluster() -> None:
    labels = {**DRA_LABELS, "nvidia.com/gpu.deploy.driver": "false"}
    got = node_status(
        NODE, 5, labels, None, OperandPods(NODE, 1, NS, DRA_HEALTHY), agent(), None, READY
    )
    driver = next(p for p in got.planes if p.name == "driver")
    assert (driver.state, driver.intent.kind) == ("disabled", "disabled")
