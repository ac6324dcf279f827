"""The kubelet PodResources API (protobuf) ↔ our records: the one translation module.

Nothing else reads the generated stubs, except :mod:`agents.podresources` (which makes the RPCs)
and the kubelet double in :mod:`sim.kubelet_server` (which uses the reverse builders below).

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

from collections import defaultdict
from collections.abc import Iterable

from agents.events import AllocatableDevice, DeviceAssignment
from proto.podresources.v1 import api_pb2 as pb

DEFAULT_PREFIXES: tuple[str, ...] = ("nvidia.com/",)
DRA_PREFIX = "dra:"


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


# Reverse builders: the replies a kubelet would give, for the double in sim/kubelet_server.py.


def _container(name: str, rows: list[DeviceAssignment]) -> pb.ContainerResources:
    """A container's devices: plugin devices grouped by resource; DRA devices as one claim
    named ``<container>-devices`` (our records do not carry claim names)."""
    plugin: dict[str, list[str]] = defaultdict(list)
    dra: list[pb.ClaimResource] = []
    for row in sorted(rows):
        if row.resource.startswith(DRA_PREFIX):
            pool, _, device = row.device_id.rpartition("/")
            driver = row.resource.removeprefix(DRA_PREFIX)
            dra.append(pb.ClaimResource(driver_name=driver, pool_name=pool, device_name=device))
        else:
            plugin[row.resource].append(row.device_id)
    return pb.ContainerResources(
        name=name,
        devices=[
            pb.ContainerDevices(resource_name=resource, device_ids=ids)
            for resource, ids in sorted(plugin.items())
        ],
        dynamic_resources=(
            [
                pb.DynamicResource(
                    claim_name=f"{name}-devices",
                    claim_namespace=rows[0].namespace,
                    claim_resources=dra,
                )
            ]
            if dra
            else []
        ),
    )


def _pod(namespace: str, name: str, rows: Iterable[DeviceAssignment]) -> pb.PodResources:
    by_container: dict[str, list[DeviceAssignment]] = defaultdict(list)
    for row in rows:
        by_container[row.container].append(row)
    return pb.PodResources(
        name=name,
        namespace=namespace,
        containers=[_container(ctr, ctr_rows) for ctr, ctr_rows in sorted(by_container.items())],
    )


def list_response(assignments: Iterable[DeviceAssignment]) -> pb.ListPodResourcesResponse:
    """The ``List`` reply for these assignments (pods ordered by namespace, then name)."""
    by_pod: dict[tuple[str, str], list[DeviceAssignment]] = defaultdict(list)
    for row in assignments:
        by_pod[(row.namespace, row.pod)].append(row)
    return pb.ListPodResourcesResponse(
        pod_resources=[_pod(ns, name, rows) for (ns, name), rows in sorted(by_pod.items())]
    )


def get_response(
    assignments: Iterable[DeviceAssignment], namespace: str, name: str
) -> pb.GetPodResourcesResponse | None:
    """The ``Get`` reply for one pod, or ``None`` when no assignment names it (the double only
    knows pods that hold devices; the kubelet answers an unknown pod with an error)."""
    rows = [row for row in assignments if (row.namespace, row.pod) == (namespace, name)]
    if not rows:
        return None
    return pb.GetPodResourcesResponse(pod_resources=_pod(namespace, name, rows))


def allocatable_response(devices: Iterable[AllocatableDevice]) -> pb.AllocatableResourcesResponse:
    """The ``GetAllocatableResources`` reply: one entry per resource and NUMA placement."""
    grouped: dict[tuple[str, tuple[int, ...]], list[str]] = defaultdict(list)
    for device in sorted(devices):
        grouped[(device.resource, device.numa_nodes)].append(device.device_id)
    return pb.AllocatableResourcesResponse(
        devices=[
            pb.ContainerDevices(
                resource_name=resource,
                device_ids=ids,
                topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in numa]) if numa else None,
            )
            for (resource, numa), ids in sorted(grouped.items())
        ]
    )
