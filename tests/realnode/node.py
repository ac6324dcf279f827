"""What the real-node tests share: pod manifests, the kubelet's own view (its PodResources socket,
read directly) and the API server's (pods and their UIDs), and what a record stream amounts to.

Pods are created through the API without a node: the real scheduler places them, the real
kubelet admits them, its device manager calls our device plugin's ``Allocate``, the DRA example
driver prepares their claims, and the fake runtime "runs" them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from agents.podresources.translate import read_list
from agents.types import AgentRecord
from contract.inputs import (
    DRA_PREFIX,
    DeviceAssignment,
    PodResourcesDiff,
    PodResourcesSnapshot,
)
from gpuattr.localkube.cluster import LocalCluster
from gpuattr.localkube.node import DRA_DRIVER
from proto.podresources.v1 import api_pb2 as pb
from proto.podresources.v1 import api_pb2_grpc as pb_grpc
from tests.helpers import wait_for_async
from tests.kube_fixture import KubeError, Rest

IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
AGENT_NS, AGENT_POD = "gpuattr-agent", "gpuattr-agent"


def pod(
    name: str,
    *,
    resource: str | None = None,
    count: int = 1,
    claim_template: str | None = None,
    claim: str | None = None,
    prestop_s: int | None = None,
    restart_policy: str = "Always",
    grace_s: int = 30,
) -> dict[str, Any]:
    """A pod with one container ``main`` holding ``count`` of ``resource``, or a DRA claim (from
    a template, or a claim shared by name)."""
    container: dict[str, Any] = {"name": "main", "image": IMAGE, "resources": {}}
    spec: dict[str, Any] = {
        "containers": [container],
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": grace_s,
    }
    if resource:
        container["resources"]["limits"] = {resource: str(count)}
    if claim_template or claim:
        ref: dict[str, str | None] = {"resourceClaimTemplateName": claim_template}
        ref = ref if claim_template else {"resourceClaimName": claim}
        spec["resourceClaims"] = [{"name": "gpu", **ref}]
        container["resources"]["claims"] = [{"name": "gpu"}]
    if prestop_s is not None:
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": prestop_s}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def claim_template(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": DRA_DRIVER}}]
                }
            }
        },
    }


def shared_claim(name: str) -> dict[str, Any]:
    """One ResourceClaim that several pods reference: one device, several holders."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRA_DRIVER}}]}
        },
    }


async def namespace(rest: Rest, name: str) -> None:
    """A namespace whose default ServiceAccount exists (the controller manager makes it)."""
    await rest.create("/api/v1/namespaces", {"metadata": {"name": name}})

    async def has_sa() -> bool:
        status, _ = await rest.call("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")
        return status == 200

    await wait_for_async(has_sa, timeout_s=60, what=f"namespace {name}'s ServiceAccount")


async def delete_namespace(rest: Rest, name: str) -> None:
    """Delete a namespace and wait until it is gone (the node is shared by the session)."""
    await rest.call("DELETE", f"/api/v1/namespaces/{name}")

    async def gone() -> bool:
        status, _ = await rest.call("GET", f"/api/v1/namespaces/{name}")
        return status == 404

    await wait_for_async(gone, timeout_s=120, every_s=0.2, what=f"namespace {name} deleted")


async def running(rest: Rest, ns: str, names: Iterable[str], timeout_s: float = 90) -> None:
    async def all_running() -> bool:
        listing = await rest.get(f"/api/v1/namespaces/{ns}/pods")
        phases = {p["metadata"]["name"]: p["status"].get("phase") for p in listing["items"]}
        return all(phases.get(n) == "Running" for n in names)

    await wait_for_async(all_running, timeout_s=timeout_s, every_s=0.2, what=f"{ns} pods running")


@contextlib.asynccontextmanager
async def workload(rest: Rest, ns: str) -> AsyncIterator[None]:
    """Every ``nvidia.com/gpu`` ID taken (the layout's two whole GPUs and the two replicas
    beside them under that name: a mixed node), three of four renamed replicas by two pods, one
    MIG device, a DRA claim from a template, one claim shared by two pods, and a CPU-only pod,
    running; the namespace deleted after."""
    await namespace(rest, ns)
    base = f"/api/v1/namespaces/{ns}"
    dra = f"/apis/resource.k8s.io/v1/namespaces/{ns}"
    await rest.create(f"{dra}/resourceclaimtemplates", claim_template("one-gpu"))
    await rest.create(f"{dra}/resourceclaims", shared_claim("shared-gpu"))
    pods = [
        pod("train", resource="nvidia.com/gpu"),
        pod("batch", resource="nvidia.com/gpu", count=3),
        pod("notebook", resource="nvidia.com/gpu.shared", count=2),
        pod("infer", resource="nvidia.com/gpu.shared"),
        pod("mig", resource="nvidia.com/mig-1g.10gb"),
        pod("claimed", claim_template="one-gpu"),
        pod("shared-a", claim="shared-gpu"),
        pod("shared-b", claim="shared-gpu"),
        pod("cpu-only"),
    ]
    try:
        for p in pods:
            await rest.create(f"{base}/pods", p)
        await running(rest, ns, [p["metadata"]["name"] for p in pods])
        yield
    finally:
        await delete_namespace(rest, ns)


async def agent_pod(rest: Rest) -> str:
    """The agent's own pod, as its DaemonSet would run it on the node (no devices); returns
    ``namespace/name`` for ``GPUATTR_KUBELET_OWN_POD``."""
    status, _ = await rest.call("GET", f"/api/v1/namespaces/{AGENT_NS}")
    if status == 404:
        await namespace(rest, AGENT_NS)
    try:
        await rest.create(f"/api/v1/namespaces/{AGENT_NS}/pods", pod(AGENT_POD))
    except KubeError as err:
        if err.status != 409:
            raise
    await running(rest, AGENT_NS, [AGENT_POD])
    return f"{AGENT_NS}/{AGENT_POD}"


async def uids(rest: Rest) -> dict[str, str]:
    """``namespace/name`` → UID of every pod the API server has."""
    listing = await rest.get("/api/v1/pods")
    return {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["metadata"]["uid"]
        for p in listing["items"]
    }


async def kubelet_list(socket: Path) -> pb.ListPodResourcesResponse:
    """The kubelet's own ``List`` answer, raw."""
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = pb_grpc.PodResourcesListerStub(channel)
        reply: pb.ListPodResourcesResponse = await stub.List(
            pb.ListPodResourcesRequest(), timeout=5
        )
        return reply


async def kubelet_rows(socket: Path) -> frozenset[DeviceAssignment]:
    return frozenset(read_list(await kubelet_list(socket))[0])


@dataclass(frozen=True, slots=True)
class DeviceMap:
    """Device ID → the device key attribution events name: a GPU UUID, or a MIG UUID."""

    plugin_ids: dict[str, str]  # device-plugin ID → key
    dra: dict[str, str]  # "<pool>/<device>" → key (the slice's uuid attribute)

    @classmethod
    def of(cls, cluster: LocalCluster) -> DeviceMap:
        plugin: dict[str, str] = {}
        for gpu in cluster.node.layout:
            for _, device_id in gpu.ids():
                plugin[device_id] = device_id.split("::", 1)[0]
        dra = {f"{cluster.node_name}/{name}": uuid for name, uuid in cluster.node.dra_hardware()}
        return cls(plugin, dra)

    def key(self, row: DeviceAssignment) -> str:
        if row.resource.startswith(DRA_PREFIX):
            return self.dra[row.device_id]
        return self.plugin_ids[row.device_id]


def holders_by_device(rows: Iterable[DeviceAssignment], devices: DeviceMap) -> dict[str, set[str]]:
    """device key → ``namespace/pod`` of every holder, from PodResources rows."""
    out: dict[str, set[str]] = {}
    for row in rows:
        out.setdefault(devices.key(row), set()).add(f"{row.namespace}/{row.pod}")
    return out


def fold(records: Iterable[AgentRecord]) -> list[frozenset[DeviceAssignment]]:
    """What a consumer of the records believes after each PodResources record."""
    state: frozenset[DeviceAssignment] = frozenset()
    out = []
    for rec in records:
        if isinstance(rec, PodResourcesSnapshot):
            state = frozenset(rec.assignments)
        elif isinstance(rec, PodResourcesDiff):
            state = (state - set(rec.removed)) | set(rec.added)
        else:
            continue
        out.append(state)
    return out
