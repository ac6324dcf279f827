"""The kubelet PodResources API (protobuf) ↔ our records: the one translation module.

Nothing else in the agent reads the generated stubs but :mod:`agents.podresources.collect`
(which makes the RPCs); the kubelet double builds its replies in :mod:`sim.podresources_replies`.

A container gets devices two ways, and both become :class:`DeviceAssignment` rows:

* device plugins (``ContainerDevices``): ``resource`` is the extended resource name and
  ``device_id`` the plugin's ID, verbatim — ``GPU-<uuid>``, a replica ``GPU-<uuid>::3``,
  ``MIG-<uuid>``, GKE's ``nvidia0/vgpu1``. Only resources whose name starts with one of
  ``resource_prefixes`` are kept (default ``nvidia.com/``: ``nvidia.com/gpu``,
  ``nvidia.com/gpu.shared``, ``nvidia.com/mig-1g.10gb``, …).
* Dynamic Resource Allocation (``dynamic_resources``): each claimed device becomes
  ``resource = "dra:<driver_name>"`` and ``device_id = "<pool_name>/<device_name>"``
  (e.g. ``dra:gpu.nvidia.com``, ``node-a/gpu-0``). Pool names may themselves contain ``/``;
  device names are DNS labels and never do, so the *last* ``/`` separates them. DRA rows are
  not filtered by ``resource_prefixes`` (driver names are not resource names). A device shared
  through consumable capacity (``share_id``, 1.35+) keeps the device's ID: several claims on one
  device are several holders of that device. Claim resources without a device name (not a
  device, or a kubelet older than 1.31) are skipped.

What is skipped because it cannot be used — not what is out of scope, like CPU-only pods or
another vendor's resources — is listed by :func:`unusable` with its reason, for the collector
to count (``gpuattr_agent_ignored_podresources_rows_total{reason}``) and log once per reason:
a wanted resource with an empty device ID, a DRA claim resource without a driver or device
name, a pod entry without a name or namespace.

The API names pods by namespace and name: there is no pod UID to carry.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from contract.inputs import DRA_PREFIX, AllocatableDevice, DeviceAssignment
from proto.podresources.v1 import api_pb2 as pb

DEFAULT_PREFIXES: tuple[str, ...] = ("nvidia.com/",)

EMPTY_DEVICE_ID = "empty_device_id"
DRA_WITHOUT_DEVICE = "dra_claim_resource_without_device"
POD_WITHOUT_NAME = "pod_without_name"


@dataclass(frozen=True, slots=True)
class Unusable:
    """One entry of a reply that was read but cannot be used, and where it was."""

    reason: str
    where: str


def _container_rows(
    namespace: str, pod: str, ctr: pb.ContainerResources, resource_prefixes: tuple[str, ...]
) -> Iterable[DeviceAssignment]:
    for devices in ctr.devices:
        if devices.resource_name.startswith(resource_prefixes):
            for device_id in devices.device_ids:
                if device_id:
                    yield DeviceAssignment(
                        namespace, pod, ctr.name, devices.resource_name, device_id
                    )
    for claim in ctr.dynamic_resources:
        for res in claim.claim_resources:
            if res.driver_name and res.device_name:
                yield DeviceAssignment(
                    namespace,
                    pod,
                    ctr.name,
                    f"{DRA_PREFIX}{res.driver_name}",
                    f"{res.pool_name}/{res.device_name}",
                )


def assignments_from_list(
    resp: pb.ListPodResourcesResponse, resource_prefixes: tuple[str, ...] = DEFAULT_PREFIXES
) -> tuple[DeviceAssignment, ...]:
    """One row per device ID per resource per container, sorted and without duplicates.

    Pods and containers without a wanted device (CPU-only pods, other vendors) add nothing.
    """
    rows = {
        row
        for pod in resp.pod_resources
        if pod.name and pod.namespace
        for ctr in pod.containers
        for row in _container_rows(pod.namespace, pod.name, ctr, resource_prefixes)
    }
    return tuple(sorted(rows))


def allocatable_from_response(
    resp: pb.AllocatableResourcesResponse, resource_prefixes: tuple[str, ...] = DEFAULT_PREFIXES
) -> tuple[AllocatableDevice, ...]:
    """Every device the kubelet can hand out, with its NUMA nodes, sorted and without duplicates."""
    rows: set[AllocatableDevice] = set()
    for devices in resp.devices:
        if devices.resource_name.startswith(resource_prefixes):
            numa = tuple(sorted({node.ID for node in devices.topology.nodes}))
            rows.update(
                AllocatableDevice(devices.resource_name, i, numa) for i in devices.device_ids if i
            )
    return tuple(sorted(rows))


def unusable(
    resp: pb.ListPodResourcesResponse | pb.AllocatableResourcesResponse,
    resource_prefixes: tuple[str, ...] = DEFAULT_PREFIXES,
) -> tuple[Unusable, ...]:
    """Entries of a wanted kind that the translations above skip because they cannot be used."""
    found: list[Unusable] = []
    if isinstance(resp, pb.AllocatableResourcesResponse):
        for devices in resp.devices:
            if devices.resource_name.startswith(resource_prefixes) and not all(devices.device_ids):
                found.append(Unusable(EMPTY_DEVICE_ID, f"allocatable {devices.resource_name}"))
        return tuple(found)
    for pod in resp.pod_resources:
        where = f"pod {pod.namespace or '?'}/{pod.name or '?'}"
        wanted = False
        for ctr in pod.containers:
            for devices in ctr.devices:
                if devices.resource_name.startswith(resource_prefixes):
                    wanted = True
                    if not all(devices.device_ids):
                        found.append(
                            Unusable(EMPTY_DEVICE_ID, f"{where} {ctr.name} {devices.resource_name}")
                        )
            for claim in ctr.dynamic_resources:
                for res in claim.claim_resources:
                    wanted = True
                    if not (res.driver_name and res.device_name):
                        claim_at = f"{where} {ctr.name} claim {claim.claim_name}"
                        found.append(Unusable(DRA_WITHOUT_DEVICE, claim_at))
        if wanted and not (pod.name and pod.namespace):
            found.append(Unusable(POD_WITHOUT_NAME, where))
    return tuple(found)
