"""DRA on a simulated node, shaped like the NVIDIA DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu
v25.12, ../shared/FACTS.md): one ResourceSlice per node (pool named after the node), full GPUs
``gpu-<minor>`` with ``uuid``, MIG devices ``gpu-<minor>-mig-<profile without dots>-<gi>-0`` with
``parentUUID``/``profile`` and a ``uuid`` only when static; ResourceClaims allocated on the node
with ``reservedFor`` listing the pods holding them; the PodResources rows the kubelet reports
(``dynamic_resources``: claim, driver, pool, device, share ID); and dcgm-exporter's DRA labels.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from contract.inputs import DRA_PREFIX, DeviceAssignment
from sim.scenario import ClaimSpec, NodeSpec, PodSpec, Scenario, gpu_uuid, mig_uuid, parse_slot

DRIVER = "gpu.nvidia.com"
REQUEST = "gpu"


def device_name(node: NodeSpec, gpu: int, gi: int | None) -> str:
    if gi is None or node.mig is None:
        return f"gpu-{gpu}"
    return f"gpu-{gpu}-mig-{node.mig.profile.replace('.', '')}-{gi}-0"


def share_id(claim: ClaimSpec) -> str:
    """A consumable-capacity allocation's share ID (stable per claim); "" for a whole device."""
    if not claim.consumed_memory:
        return ""
    digest = hashlib.blake2b(f"{claim.namespace}/{claim.name}".encode(), digest_size=16).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-4{digest[13:16]}-8{digest[17:20]}-{digest[20:32]}"


def _slots(pod: PodSpec) -> list[tuple[int, int | None]]:
    """(GPU, MIG instance) of each slot: a DRA device has no replicas."""
    return [(slot.gpu, slot.gi) for slot in map(parse_slot, pod.slots)]


def podresources_rows(
    scenario: Scenario, node: NodeSpec, pods: list[PodSpec]
) -> list[DeviceAssignment]:
    """What the kubelet lists for the DRA node's pods: each claimed device, per container."""
    rows = []
    for pod in pods:
        for name in pod.claims:
            claim = scenario.claim(pod.namespace, name)
            for container, _ in pod.held_by_container:  # the whole claim, for each container
                for gpu, gi in _slots(pod):
                    rows.append(
                        DeviceAssignment(
                            pod.namespace,
                            pod.name,
                            container,
                            f"{DRA_PREFIX}{DRIVER}",
                            f"{node.name}/{device_name(node, gpu, gi)}",
                            f"{claim.namespace}/{claim.name}",
                            share_id(claim),
                        )
                    )
    return rows


def _quantity_mib(mib: int) -> str:
    """A memory size in the API server's canonical form (the largest exact binary unit)."""
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def _attr(value: str) -> dict[str, str]:
    return {"string": value}


def slice_object(node: NodeSpec) -> dict[str, Any]:
    devices: list[dict[str, Any]] = []
    for gpu in range(node.gpus):
        uuid = gpu_uuid(node.name, gpu)
        if node.mig and gpu in node.mig.gpus:
            for gi in node.mig.instances:
                attributes = {
                    "type": _attr("mig"),
                    "parentUUID": _attr(uuid),
                    "profile": _attr(node.mig.profile),
                    "productName": _attr(node.model),
                }
                if not node.dynamic_mig:
                    attributes["uuid"] = _attr(mig_uuid(node.name, gpu, gi))
                devices.append({"name": device_name(node, gpu, gi), "attributes": attributes})
            continue
        devices.append(
            {
                "name": device_name(node, gpu, None),
                "attributes": {
                    "type": _attr("gpu"),
                    "uuid": _attr(uuid),
                    "productName": _attr(node.model),
                },
                "capacity": {"memory": {"value": _quantity_mib(node.memory_mib)}},
                "allowMultipleAllocations": True,
            }
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node.name}-{DRIVER}", "uid": f"slice-{node.name}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node.name,
            "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _config(claim: ClaimSpec) -> list[dict[str, Any]]:
    if not claim.sharing:
        return []
    strategy = {"time-slicing": "TimeSlicing", "mps": "MPS"}[claim.sharing]
    return [
        {
            "source": "FromClaim",
            "requests": [REQUEST],
            "opaque": {
                "driver": DRIVER,
                "parameters": {
                    "apiVersion": "resource.nvidia.com/v1beta1",
                    "kind": "GpuConfig",
                    "sharing": {"strategy": strategy},
                },
            },
        }
    ]


def _request(claim: ClaimSpec) -> dict[str, Any]:
    """The claim's one request; dcgm-exporter's monitoring claim asks for every GPU with
    ``adminAccess`` (allowed only in a namespace labelled
    ``resource.kubernetes.io/admin-access``)."""
    request: dict[str, Any] = {"deviceClassName": DRIVER}
    if claim.admin:
        request |= {"adminAccess": True, "allocationMode": "All"}
    return request


def claim_objects(
    scenario: Scenario, holding: list[PodSpec], epoch_s: float
) -> list[dict[str, Any]]:
    """Every claim some pod holds now, allocated on its node, reserved by those pods."""
    by_claim: dict[tuple[str, str], list[PodSpec]] = defaultdict(list)
    for pod in holding:
        if scenario.node(pod.node).dra:
            for name in pod.claims:
                by_claim[pod.namespace, name].append(pod)
    out = []
    for (ns, name), pods in sorted(by_claim.items()):
        claim = scenario.claim(ns, name)
        node = scenario.node(pods[0].node)
        devices = sorted({device_name(node, g, gi) for p in pods for g, gi in _slots(p)})
        result: dict[str, Any] = {"request": REQUEST, "driver": DRIVER, "pool": node.name}
        if claim.admin:
            result["adminAccess"] = True
        if claim.consumed_memory:
            result |= {
                "shareID": share_id(claim),
                "consumedCapacity": {"memory": claim.consumed_memory},
            }
        created = datetime.fromtimestamp(int(epoch_s + min(p.start_s for p in pods)), tz=UTC)
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "uid": claim.uid,
                    "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
                },
                "spec": {
                    "devices": {
                        "requests": [{"name": REQUEST, "exactly": {"deviceClassName": DRIVER}}],
                        "config": _config(claim),
                    }
                },
                "status": {
                    "allocation": {
                        "devices": {
                            "results": [result | {"device": d} for d in devices],
                            "config": _config(claim),
                        },
                        "nodeSelector": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {
                                            "key": "metadata.name",
                                            "operator": "In",
                                            "values": [node.name],
                                        }
                                    ]
                                }
                            ]
                        },
                    },
                    "reservedFor": [
                        {"resource": "pods", "name": p.name, "uid": p.uid} for p in pods
                    ],
                },
            }
        )
    return out


def exporter_labels(pod: PodSpec, node: NodeSpec, gpu: int) -> tuple[tuple[str, str], ...]:
    """dcgm-exporter ``--kubernetes-enable-dra``: the claim and device beside the pod labels."""
    return (
        ("dra_claim_name", pod.claim),
        ("dra_claim_namespace", pod.namespace),
        ("dra_device_name", device_name(node, gpu, None)),
        ("dra_driver_name", DRIVER),
        ("dra_pool_name", node.name),
    )
