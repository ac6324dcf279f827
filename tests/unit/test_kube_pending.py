"""Pending-pod translation: golden tests from pods as the API server returns them (a pod the real
kube-scheduler marked Unschedulable, a Deployment's replica, DRA claims) and the counting table."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agents.kube.pending import (
    CLAIM,
    TEMPLATE,
    claim_sources,
    device_plugin_counts,
    gpu_requests,
    pending_pod,
    per_resource,
    selected_profile,
    wanted_product,
)
from contract import codec
from contract.inputs import GpuRequest, OwnerRef, PendingPod

#: a replica of Deployment ``llm-infer`` that kube-scheduler 1.35 left Pending (as served by
#: ``GET /api/v1/namespaces/serving/pods/llm-infer-7d9c6b5f4-x2kqp``; managedFields trimmed)
UNSCHEDULABLE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "llm-infer-7d9c6b5f4-x2kqp",
        "generateName": "llm-infer-7d9c6b5f4-",
        "namespace": "serving",
        "uid": "0b6f3c9e-2f1a-4f7e-9d3c-8a7b6c5d4e3f",
        "resourceVersion": "918273",
        "creationTimestamp": "2026-04-02T08:15:00Z",
        "labels": {"app": "llm-infer", "pod-template-hash": "7d9c6b5f4"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "llm-infer-7d9c6b5f4",
                "uid": "5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    },
    "spec": {
        "containers": [
            {
                "name": "server",
                "image": "nvcr.io/nvidia/tritonserver:24.05-py3",
                "resources": {
                    "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                    "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                },
            }
        ],
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "priority": 1000,
        "priorityClassName": "inference",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
    },
    "status": {
        "phase": "Pending",
        "qosClass": "Guaranteed",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": "2026-04-02T08:15:01Z",
                "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: "
                "0/1 nodes are available: 1 No preemption victims found for incoming pod.",
            }
        ],
    },
}


def test_a_pod_the_scheduler_left_pending_golden() -> None:
    record = pending_pod(UNSCHEDULABLE, ts_ms=1_775_200_000_000)
    assert record == PendingPod(
        ts_ms=1_775_200_000_000,
        namespace="serving",
        name="llm-infer-7d9c6b5f4-x2kqp",
        uid="0b6f3c9e-2f1a-4f7e-9d3c-8a7b6c5d4e3f",
        created_ms=1_775_117_700_000,
        requests=(GpuRequest("nvidia.com/gpu", 1),),
        priority=1000,
        priority_class="inference",
        workload=OwnerRef("Deployment", "llm-infer", inferred=True),
        scheduled_status="False",
        scheduled_reason="Unschedulable",
        scheduled_message=UNSCHEDULABLE["status"]["conditions"][0]["message"],
        scheduled_since_ms=1_775_117_701_000,
        resource_version="918273",
    )
    assert codec.decode(codec.encode(record)) == record  # it travels as it is


def test_a_pod_not_yet_seen_by_the_scheduler_has_no_condition() -> None:
    pod = copy.deepcopy(UNSCHEDULABLE)
    pod["status"] = {"phase": "Pending"}
    record = pending_pod(pod, ts_ms=1)
    assert record is not None
    assert (record.scheduled_status, record.scheduled_reason, record.scheduled_since_ms) == (
        "",
        "",
        None,
    )


def test_a_pod_asking_for_no_gpu_gives_no_record() -> None:
    pod = copy.deepcopy(UNSCHEDULABLE)
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    assert pending_pod(pod, ts_ms=1) is None


def c(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **kw: Any):  # type: ignore[no-untyped-def]
    return {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}, **kw}


GPU = "nvidia.com/gpu"


@pytest.mark.parametrize(
    ("spec", "counts"),
    [
        pytest.param({"containers": [c({GPU: "1"})]}, {GPU: 1}, id="request"),
        pytest.param({"containers": [c(limits={GPU: "2"})]}, {GPU: 2}, id="limit-only"),
        pytest.param(
            {"containers": [c({GPU: "1"}, {GPU: "1"}), c(limits={GPU: "2"})]},
            {GPU: 3},
            id="containers-sum",
        ),
        pytest.param(
            {"containers": [c({GPU: "1"})], "initContainers": [c({GPU: "4"})]},
            {GPU: 4},
            id="init-larger",
        ),
        pytest.param(
            {"containers": [c({GPU: "2"})], "initContainers": [c({GPU: "1"}), c({GPU: "1"})]},
            {GPU: 2},
            id="init-max-not-sum",
        ),
        pytest.param(
            {
                "containers": [c({GPU: "1"})],
                "initContainers": [c({GPU: "1"}, restartPolicy="Always"), c({GPU: "2"})],
            },
            {GPU: 3},
            id="sidecar-adds-to-app-and-later-inits",
        ),
        pytest.param(
            {"containers": [c({"nvidia.com/gpu.shared": "1", "cpu": "2"})]},
            {"nvidia.com/gpu.shared": 1},
            id="renamed-shared",
        ),
        pytest.param(
            {"containers": [c(limits={"nvidia.com/mig-1g.10gb": "2"}), c({GPU: "1"})]},
            {GPU: 1, "nvidia.com/mig-1g.10gb": 2},
            id="two-resources",
        ),
        pytest.param({"containers": [c({GPU: "0"})]}, {}, id="zero"),
        pytest.param({"containers": [c({GPU: "500m"})]}, {}, id="fraction-refused"),
        pytest.param({"containers": [c({GPU: "lots"})]}, {}, id="garbage-refused"),
        pytest.param({"containers": "nope"}, {}, id="malformed"),
    ],
)
def test_counts_as_the_scheduler_does(spec: dict[str, Any], counts: dict[str, int]) -> None:
    assert device_plugin_counts(spec) == counts


def affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
                }
            }
        }
    }


def product_in(*values: str) -> dict[str, Any]:
    return {"key": "nvidia.com/gpu.product", "operator": "In", "values": list(values)}


H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.mark.parametrize(
    ("spec", "product"),
    [
        pytest.param({"nodeSelector": {"nvidia.com/gpu.product": H100}}, H100, id="selector"),
        pytest.param(affinity([product_in(H100)]), H100, id="affinity-one-value"),
        pytest.param(affinity([product_in(H100, "NVIDIA-A100")]), "", id="two-values"),
        pytest.param(affinity([product_in(H100)], [product_in("NVIDIA-A100")]), "", id="2-terms"),
        pytest.param(
            affinity([{**product_in(H100), "operator": "NotIn"}]), "", id="not-in-says-nothing"
        ),
        pytest.param({"nodeSelector": {"nvidia.com/mig.config": "all-1g.10gb"}}, "", id="mig-cfg"),
        pytest.param({}, "", id="nothing"),
    ],
)
def test_product_only_when_unambiguous(spec: dict[str, Any], product: str) -> None:
    assert wanted_product(spec) == product


def test_product_and_mig_profile_on_the_requests() -> None:
    pod = copy.deepcopy(UNSCHEDULABLE)
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": H100}
    pod["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/mig-1g.10gb": "1", GPU: "1"}
    }
    assert gpu_requests(pod) == (
        GpuRequest(GPU, 1, product=H100),
        GpuRequest("nvidia.com/mig-1g.10gb", 1, product=H100, mig_profile="1g.10gb"),
    )


def dra_pod() -> dict[str, Any]:
    pod = copy.deepcopy(UNSCHEDULABLE)
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}, {"name": "one"}]}
    pod["spec"]["resourceClaims"] = [
        {"name": "gpus", "resourceClaimTemplateName": "two-gpus"},
        {"name": "one", "resourceClaimName": "shared-gpu"},
    ]
    pod["status"]["resourceClaimStatuses"] = [
        {"name": "gpus", "resourceClaimName": "llm-infer-7d9c6b5f4-x2kqp-gpus-8kzrf"}
    ]
    return pod


TWO_GPUS = {  # a ResourceClaimTemplate's spec.spec (the NVIDIA driver's class)
    "devices": {
        "requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}},
            {
                "name": "any",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": "gpu.nvidia.com"},
                    {"name": "small", "deviceClassName": "mig.nvidia.com"},
                ],
            },
        ]
    }
}
SHARED = {
    "devices": {
        "requests": [
            {
                "name": "gpu",
                "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"},
            }
        ]
    }
}


def test_dra_claims_count_their_requests() -> None:
    pod = dra_pod()
    assert claim_sources(pod) == [
        (TEMPLATE, "serving", "two-gpus"),
        (CLAIM, "serving", "shared-gpu"),
    ]
    claims = {(TEMPLATE, "serving", "two-gpus"): TWO_GPUS, (CLAIM, "serving", "shared-gpu"): SHARED}
    assert gpu_requests(pod, claims) == (
        # the firstAvailable list names two classes: ambiguous, not counted
        GpuRequest("dra:gpu.nvidia.com", 2, claim="serving/llm-infer-7d9c6b5f4-x2kqp-gpus-8kzrf"),
        GpuRequest("dra:gpu.nvidia.com", 1, claim="serving/shared-gpu"),  # All: at least one
    )
    # a claim not read (yet) says nothing; no claim read at all: no record
    assert pending_pod(pod, ts_ms=1, claims={}) is None


#: a ResourceClaimTemplate's spec.spec asking NVIDIA's MIG class for one 1g.10gb instance
PROFILE_1G = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
ONE_MIG = {
    "devices": {
        "requests": [
            {
                "name": "mig",
                "exactly": {
                    "deviceClassName": "mig.nvidia.com",
                    "selectors": [{"cel": {"expression": PROFILE_1G}}],
                },
            }
        ]
    }
}


def mig_pod(name: str, made: str) -> dict[str, Any]:
    """A pod of the MIG template, its claim made (``made``) or not yet (``""``)."""
    pod = copy.deepcopy(UNSCHEDULABLE)
    pod["metadata"]["name"] = name
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "mig"}]}
    pod["spec"]["resourceClaims"] = [{"name": "mig", "resourceClaimTemplateName": "one-mig"}]
    pod["status"]["resourceClaimStatuses"] = (
        [{"name": "mig", "resourceClaimName": made}] if made else []
    )
    return pod


def test_a_mig_claim_asks_its_class_for_the_profile_its_selector_names() -> None:
    claims = {(TEMPLATE, "serving", "one-mig"): ONE_MIG}
    assert gpu_requests(mig_pod("a", "a-mig-x7k2p"), claims) == (
        GpuRequest("dra:mig.nvidia.com", 1, mig_profile="1g.10gb", claim="serving/a-mig-x7k2p"),
    )
    # a template's claim not made yet is still the pod's own: no claim two pods could share
    assert gpu_requests(mig_pod("b", ""), claims) == (
        GpuRequest("dra:mig.nvidia.com", 1, mig_profile="1g.10gb"),
    )


def cel(*expressions: str) -> dict[str, Any]:
    return {"selectors": [{"cel": {"expression": e}} for e in expressions]}


@pytest.mark.parametrize(
    ("request_", "profile"),
    [
        pytest.param({}, "", id="no-selector"),
        pytest.param(
            cel("device.attributes['gpu.nvidia.com'].profile == '2g.20gb'"), "2g.20gb", id="one"
        ),
        pytest.param(
            cel('device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'),
            "3g.40gb",
            id="double-quotes",
        ),
        pytest.param(
            cel(
                "device.attributes['gpu.nvidia.com'].type == 'mig' && "
                "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
            ),
            "1g.10gb",
            id="and-type",
        ),
        pytest.param(
            cel(
                "device.attributes['gpu.nvidia.com'].profile == '1g.10gb' || "
                "device.attributes['gpu.nvidia.com'].profile == '2g.20gb'"
            ),
            "",
            id="either",
        ),
        pytest.param(
            cel(
                "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",
                "device.attributes['gpu.nvidia.com'].profile == '2g.20gb'",
            ),
            "",
            id="two-profiles",
        ),
        pytest.param(
            cel("device.capacity['gpu.nvidia.com'].memory >= quantity('10Gi')"), "", id="capacity"
        ),
        pytest.param({"selectors": [None, {"cel": 3}]}, "", id="odd"),
    ],
)
def test_the_profile_a_selector_names(request_: dict[str, Any], profile: str) -> None:
    assert selected_profile(request_) == profile


def test_pods_sharing_a_claim_name_it_alike_and_one_pod_naming_it_twice_counts_it_once() -> None:
    claims = {(CLAIM, "serving", "shared-gpu"): TWO_GPUS}
    first = copy.deepcopy(UNSCHEDULABLE)
    first["spec"]["containers"][0]["resources"] = {"claims": [{"name": "a"}, {"name": "b"}]}
    first["spec"]["resourceClaims"] = [
        {"name": "a", "resourceClaimName": "shared-gpu"},
        {"name": "b", "resourceClaimName": "shared-gpu"},
    ]
    second = copy.deepcopy(first)
    second["metadata"]["name"] = "llm-infer-7d9c6b5f4-q8w2z"
    shared = (GpuRequest("dra:gpu.nvidia.com", 2, claim="serving/shared-gpu"),)
    assert gpu_requests(first, claims) == gpu_requests(second, claims) == shared


def test_one_record_per_resource_each_with_its_own_requests() -> None:
    pod = copy.deepcopy(UNSCHEDULABLE)
    pod["spec"]["containers"].append(c(limits={"nvidia.com/gpu.shared": "1"}))
    record = pending_pod(pod, ts_ms=1)
    assert record is not None
    parts = per_resource(record)
    assert [(key, part.requests) for key, part in parts] == [
        (GPU, (GpuRequest(GPU, 1),)),
        ("nvidia.com/gpu.shared", (GpuRequest("nvidia.com/gpu.shared", 1),)),
    ]
    assert {part.uid for _, part in parts} == {record.uid}


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda p: p.pop("metadata"), id="no-metadata"),
        pytest.param(lambda p: p["metadata"].update(creationTimestamp="yesterday"), id="bad-time"),
        pytest.param(lambda p: p["status"].update(conditions=[None, 3]), id="odd-conditions"),
        pytest.param(lambda p: p["spec"].update(priority="high"), id="odd-priority"),
        pytest.param(lambda p: p["metadata"].update(ownerReferences=[{}]), id="odd-owner"),
    ],
)
def test_a_partial_pod_never_crashes(mangle: Any) -> None:
    pod = copy.deepcopy(UNSCHEDULABLE)
    mangle(pod)
    record = pending_pod(pod, ts_ms=1)
    assert record is not None
    assert record.requests == (GpuRequest(GPU, 1),)
