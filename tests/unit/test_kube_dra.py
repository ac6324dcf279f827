"""DRA translation golden tests: ResourceSlices and ResourceClaims shaped like the NVIDIA driver's
(kubernetes-sigs/dra-driver-nvidia-gpu v25.12 on resource.k8s.io/v1, ../shared/FACTS.md)."""

from __future__ import annotations

import copy
from typing import Any

from agents.kube.dra import allocated_node, claim_record, slice_record
from contract import codec
from contract.inputs import (
    ClaimConfig,
    ClaimConsumer,
    ClaimResult,
    DraDevice,
    ResourceClaimRecord,
    ResourceSliceRecord,
)

NODE = "gpu-node-1"
DRIVER = "gpu.nvidia.com"
GPU0 = "GPU-4f6b2d3e-9a1c-4e8b-8d7f-0a1b2c3d4e5f"
GPU1 = "GPU-9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b"
MIG_STATIC = "MIG-1c2d3e4f-5a6b-5c7d-8e9f-0a1b2c3d4e5f"


def attrs(**values: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in values.items():
        kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "string"
        out[name] = {kind: value}
    return out


SLICE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {
        "name": "gpu-node-1-gpu.nvidia.com-x7k2p",
        "resourceVersion": "81234",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "n-1"}],
    },
    "spec": {
        "driver": DRIVER,
        "nodeName": NODE,
        "pool": {"name": NODE, "generation": 3, "resourceSliceCount": 1},
        "devices": [
            {
                "name": "gpu-1",
                "attributes": attrs(
                    type="gpu",
                    uuid=GPU1,
                    productName="NVIDIA H100 80GB HBM3",
                    brand="Nvidia",
                    architecture="Hopper",
                    driverVersion="570.124.06",
                    cudaComputeCapability="9.0",
                )
                | {"resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"}},
                "capacity": {"memory": {"value": "80Gi"}},
                "allowMultipleAllocations": True,
            },
            {
                "name": "gpu-0",
                "attributes": attrs(type="gpu", uuid=GPU0, productName="NVIDIA A100-SXM4-40GB"),
                "capacity": {"memory": {"value": "40Gi"}},
            },
            {  # static MIG: created ahead, published with its own UUID
                "name": "gpu-0-mig-1g5gb-19-0",
                "attributes": {
                    "type": {"string": "mig"},
                    "gpu.nvidia.com/uuid": {"string": MIG_STATIC},  # a qualified name
                    "parentUUID": {"string": GPU0},
                    "profile": {"string": "1g.5gb"},
                    "productName": {"string": "NVIDIA A100-SXM4-40GB"},
                },
            },
            {  # dynamic MIG: a placement, created at prepare time: no UUID yet
                "name": "gpu-0-mig-3g20gb-9-4",
                "attributes": attrs(type="mig", parentUUID=GPU0, profile="3g.20gb"),
                "consumesCounters": [{"counterSet": "gpu-0-counters", "counters": {}}],
            },
            {"attributes": attrs(type="gpu")},  # no name: not a device we can name
        ],
    },
}


def test_slice_devices_resolve_to_uuids_and_mig_placements() -> None:
    record = slice_record(SLICE, node=NODE, ts_ms=5)
    assert record == ResourceSliceRecord(
        node=NODE,
        ts_ms=5,
        name="gpu-node-1-gpu.nvidia.com-x7k2p",
        driver=DRIVER,
        pool=NODE,
        pool_generation=3,
        devices=(
            DraDevice(
                "gpu-0",
                "gpu",
                GPU0,
                None,
                None,
                "NVIDIA A100-SXM4-40GB",
                capacity=(("memory", "40Gi"),),
            ),
            DraDevice(
                "gpu-0-mig-1g5gb-19-0", "mig", MIG_STATIC, GPU0, "1g.5gb", "NVIDIA A100-SXM4-40GB"
            ),
            DraDevice("gpu-0-mig-3g20gb-9-4", "mig", None, GPU0, "3g.20gb", None),
            DraDevice(
                "gpu-1",
                "gpu",
                GPU1,
                None,
                None,
                "NVIDIA H100 80GB HBM3",
                True,
                (("memory", "80Gi"),),
            ),
        ),
        resource_version="81234",
    )
    assert codec.decode(codec.encode(record)) == record


def test_slice_of_another_node_or_without_a_pool_gives_nothing() -> None:
    other = copy.deepcopy(SLICE)
    other["spec"]["nodeName"] = "gpu-node-2"
    assert slice_record(other, node=NODE, ts_ms=1) is None
    broken = copy.deepcopy(SLICE)
    del broken["spec"]["pool"]
    assert slice_record(broken, node=NODE, ts_ms=1) is None
    assert slice_record({}, node=NODE, ts_ms=1) is None
    assert slice_record({"spec": "nonsense", "metadata": []}, node=NODE, ts_ms=1) is None


def node_selector(node: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


def pod_ref(name: str, uid: str) -> dict[str, str]:
    return {"resource": "pods", "name": name, "uid": uid}


def claim(
    name: str,
    results: list[dict[str, Any]],
    *,
    reserved: list[dict[str, str]] | None = None,
    config: list[dict[str, Any]] | None = None,
    node: str | None = NODE,
) -> dict[str, Any]:
    status: dict[str, Any] = {"reservedFor": reserved or []}
    if node is not None:
        status["allocation"] = {
            "devices": {"results": results, "config": config or []},
            "nodeSelector": node_selector(node),
        }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "resourceVersion": "9"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        },
        "status": status,
    }


def result(device: str, **extra: Any) -> dict[str, Any]:
    return {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device, **extra}


def sharing(strategy: str, kind: str = "GpuConfig") -> dict[str, Any]:
    return {
        "source": "FromClaim",
        "requests": ["gpu"],
        "opaque": {
            "driver": DRIVER,
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": kind,
                "sharing": {
                    "strategy": strategy,
                    strategy[0].lower() + strategy[1:] + "Config": {},
                },
            },
        },
    }


def test_shared_claim_lists_every_reserving_pod_with_its_uid() -> None:
    obj = claim(
        "shared-gpu",
        [result("gpu-0")],
        reserved=[pod_ref("infer-c", "u3"), pod_ref("infer-a", "u1"), pod_ref("infer-b", "u2")],
        config=[sharing("TimeSlicing")],
    )
    record = claim_record(obj, node=NODE, ts_ms=7)
    assert record == ResourceClaimRecord(
        node=NODE,
        ts_ms=7,
        namespace="ml",
        name="shared-gpu",
        uid="uid-shared-gpu",
        results=(ClaimResult("gpu", DRIVER, NODE, "gpu-0"),),
        reserved_for=(
            ClaimConsumer("pods", "infer-a", "u1"),
            ClaimConsumer("pods", "infer-b", "u2"),
            ClaimConsumer("pods", "infer-c", "u3"),
        ),
        config=(ClaimConfig(DRIVER, ("gpu",), "GpuConfig", "time-slicing"),),
        resource_version="9",
    )
    assert codec.decode(codec.encode(record)) == record


def test_mps_mig_config_admin_access_and_consumable_capacity() -> None:
    mps = claim_record(claim("mps", [result("gpu-1")], config=[sharing("MPS")]), node=NODE, ts_ms=1)
    assert mps is not None
    assert mps.config[0].sharing == "mps"
    mig = claim_record(
        claim(
            "mig",
            [result("gpu-0-mig-1g5gb-19-0")],
            config=[sharing("TimeSlicing", "MigDeviceConfig")],
        ),
        node=NODE,
        ts_ms=1,
    )
    assert mig is not None
    assert (mig.config[0].kind, mig.config[0].sharing) == ("MigDeviceConfig", "time-slicing")
    admin = claim_record(
        claim(
            "dcgm-exporter", [result("gpu-0", adminAccess=True), result("gpu-1", adminAccess=True)]
        ),
        node=NODE,
        ts_ms=1,
    )
    assert admin is not None
    assert all(r.admin_access for r in admin.results)
    share = claim_record(
        claim(
            "slice-of-h100",
            [
                result(
                    "gpu-1",
                    shareID="2f1c0e7a-77b1-4c0e-9a6e-5d4c3b2a1f00",
                    consumedCapacity={"memory": "20Gi"},
                )
            ],
            reserved=[pod_ref("tiny", "u9")],
        ),
        node=NODE,
        ts_ms=1,
    )
    assert share is not None
    assert share.results == (
        ClaimResult(
            "gpu",
            DRIVER,
            NODE,
            "gpu-1",
            False,
            "2f1c0e7a-77b1-4c0e-9a6e-5d4c3b2a1f00",
            (("memory", "20Gi"),),
        ),
    )


def test_claims_not_allocated_here_give_nothing() -> None:
    assert claim_record(claim("pending", [], node=None), node=NODE, ts_ms=1) is None
    assert (
        claim_record(claim("elsewhere", [result("gpu-0")], node="gpu-node-2"), node=NODE, ts_ms=1)
        is None
    )
    assert allocated_node(claim("x", [result("gpu-0")])) == NODE
    assert allocated_node({"status": {"allocation": {"nodeSelector": "garbage"}}}) is None
    assert claim_record({}, node=NODE, ts_ms=1) is None


def test_claim_config_falls_back_to_the_spec_and_skips_unreadable_parts() -> None:
    obj = claim("spec-config", [result("gpu-0"), {"request": "gpu"}], reserved=[{"name": "no-uid"}])
    obj["spec"]["devices"]["config"] = [sharing("MPS"), {"opaque": {}}, "junk"]
    record = claim_record(obj, node=NODE, ts_ms=1)
    assert record is not None
    assert [r.device for r in record.results] == ["gpu-0"]
    assert record.reserved_for == ()
    assert [c.sharing for c in record.config] == ["mps"]
