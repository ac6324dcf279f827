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

The API names pods by namespace and name: there is no pod UID to carry.
"""

from __future__ import annotations

from collections.abc import Iterable

from contract.inputs import DRA_PREFIX, AllocatableDevice, DeviceAssignment
from proto.podresources.v1 import api_pb2 as pb

DEFAULT_PREFIXES: tuple[str, ...] = ("nvidia.com/",)


def _container_rows(
    namespace: str, pod: str, ctr: pb.ContainerResources, resource_prefixes: tuple[str, ...]
) -> Iterable[DeviceAssignment]:
    for devices in ctr.devices:
        if devices.resource_name.startswith(resource_prefixes):
            for device_id in devices.device_ids:
                yield DeviceAssignment(namespace, pod, ctr.name, devices.resource_name, device_id)
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
                AllocatableDevice(devices.resource_name, i, numa) for i in devices.device_ids
            )
    return tuple(sorted(rows))
