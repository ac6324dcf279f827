"""Translate the kubelet PodResources API (protobuf) to our records, and back for the double.

The only module that reads the generated stubs (with :mod:`sim.kubelet_server`). Devices come
from two places: ``devices`` (device plugins: resource name + device IDs) and, on DRA clusters,
``dynamic_resources`` — a DRA device becomes an assignment with resource ``dra:<driver>`` and
device ID ``<pool>/<device>`` (plus ``#<share_id>`` for a shared consumable-capacity device).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from agents.events import AllocatableDevice, DeviceAssignment
from proto.podresources.v1 import api_pb2 as pb

DEFAULT_PREFIXES = ("nvidia.com/",)


def _wanted(resource: str, prefixes: tuple[str, ...]) -> bool:
    return resource.startswith(prefixes)


def assignments_from_list(
    resp: pb.ListPodResourcesResponse, resource_prefixes: tuple[str, ...] = DEFAULT_PREFIXES
) -> tuple[DeviceAssignment, ...]:
    """Every (pod, container, resource, device ID) of the wanted resources, sorted, unique."""
    out: set[DeviceAssignment] = set()
    for pod in resp.pod_resources:
        for ctr in pod.containers:
            for dev in ctr.devices:
                if _wanted(dev.resource_name, resource_prefixes):
                    out.update(
                        DeviceAssignment(pod.namespace, pod.name, ctr.name, dev.resource_name, i)
                        for i in dev.device_ids
                    )
            for dyn in ctr.dynamic_resources:
                for claim in dyn.claim_resources:
                    device = f"{claim.pool_name}/{claim.device_name}"
                    if claim.HasField("share_id"):
                        device += f"#{claim.share_id}"
                    out.add(
                        DeviceAssignment(
                            pod.namespace, pod.name, ctr.name, f"dra:{claim.driver_name}", device
                        )
                    )
    return tuple(sorted(out))


def allocatable_from_response(
    resp: pb.AllocatableResourcesResponse, resource_prefixes: tuple[str, ...] = DEFAULT_PREFIXES
) -> tuple[AllocatableDevice, ...]:
    out: set[AllocatableDevice] = set()
    for dev in resp.devices:
        if not _wanted(dev.resource_name, resource_prefixes):
            continue
        numa = tuple(sorted(n.ID for n in dev.topology.nodes))
        out.update(AllocatableDevice(dev.resource_name, i, numa) for i in dev.device_ids)
    return tuple(sorted(out))


def _pod_resources(namespace: str, name: str, rows: Iterable[DeviceAssignment]) -> pb.PodResources:
    by_container: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for a in rows:
        by_container[a.container][a.resource].append(a.device_id)
    return pb.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            pb.ContainerResources(
                name=ctr,
                devices=[
                    pb.ContainerDevices(resource_name=res, device_ids=ids)
                    for res, ids in sorted(resources.items())
                ],
            )
            for ctr, resources in sorted(by_container.items())
        ],
    )


def list_response(assignments: Iterable[DeviceAssignment]) -> pb.ListPodResourcesResponse:
    """The ``List`` reply a kubelet would give for these assignments (device plugins only)."""
    by_pod: dict[tuple[str, str], list[DeviceAssignment]] = defaultdict(list)
    for a in assignments:
        by_pod[(a.namespace, a.pod)].append(a)
    return pb.ListPodResourcesResponse(
        pod_resources=[_pod_resources(ns, n, rows) for (ns, n), rows in sorted(by_pod.items())]
    )


def get_response(
    assignments: Iterable[DeviceAssignment], namespace: str, name: str
) -> pb.GetPodResourcesResponse | None:
    rows = [a for a in assignments if (a.namespace, a.pod) == (namespace, name)]
    return (
        pb.GetPodResourcesResponse(pod_resources=_pod_resources(namespace, name, rows))
        if rows
        else None
    )


def allocatable_response(devices: Iterable[AllocatableDevice]) -> pb.AllocatableResourcesResponse:
    return pb.AllocatableResourcesResponse(
        devices=[
            pb.ContainerDevices(
                resource_name=d.resource,
                device_ids=[d.device_id],
                topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in d.numa_nodes]),
            )
            for d in devices
        ]
    )
