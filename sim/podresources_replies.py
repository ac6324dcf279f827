"""The replies a kubelet's PodResources API gives, built from our records: for the kubelet double
(:mod:`sim.kubelet_server`). The inverse of :mod:`agents.podresources.translate`, whose tests
round-trip through both."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from contract.inputs import DRA_PREFIX, AllocatableDevice, DeviceAssignment
from proto.podresources.v1 import api_pb2 as pb


def _container(name: str, rows: list[DeviceAssignment]) -> pb.ContainerResources:
    """A container's devices: plugin devices grouped by resource; DRA devices grouped by their
    claim (a row without one: a claim named ``<container>-devices``)."""
    plugin: dict[str, list[str]] = defaultdict(list)
    claims: dict[tuple[str, str], list[pb.ClaimResource]] = defaultdict(list)
    for row in sorted(rows):
        if row.resource.startswith(DRA_PREFIX):
            pool, _, device = row.device_id.rpartition("/")
            driver = row.resource.removeprefix(DRA_PREFIX)
            ns, _, claim = (row.claim or f"{row.namespace}/{name}-devices").partition("/")
            claims[ns, claim].append(
                pb.ClaimResource(
                    driver_name=driver,
                    pool_name=pool,
                    device_name=device,
                    share_id=row.share_id,
                )
            )
        else:
            plugin[row.resource].append(row.device_id)
    return pb.ContainerResources(
        name=name,
        devices=[
            pb.ContainerDevices(resource_name=resource, device_ids=ids)
            for resource, ids in sorted(plugin.items())
        ],
        dynamic_resources=[
            pb.DynamicResource(claim_name=claim, claim_namespace=ns, claim_resources=resources)
            for (ns, claim), resources in sorted(claims.items())
        ],
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


Pod = tuple[str, str]  # namespace, name


def _bare(namespace: str, name: str) -> pb.PodResources:
    """An active pod without devices: the kubelet lists it too, with its container."""
    return pb.PodResources(
        name=name, namespace=namespace, containers=[pb.ContainerResources(name="main")]
    )


def list_response(
    assignments: Iterable[DeviceAssignment], bare_pods: Iterable[Pod] = ()
) -> pb.ListPodResourcesResponse:
    """The ``List`` reply for these assignments and the active pods without devices
    (``bare_pods``), pods ordered by namespace, then name."""
    by_pod: dict[tuple[str, str], list[DeviceAssignment]] = defaultdict(list)
    for row in assignments:
        by_pod[(row.namespace, row.pod)].append(row)
    bare = {pod for pod in bare_pods if pod not in by_pod}
    pods = {**{pod: _pod(*pod, rows) for pod, rows in by_pod.items()}}
    pods |= {pod: _bare(*pod) for pod in bare}
    return pb.ListPodResourcesResponse(pod_resources=[pods[k] for k in sorted(pods)])


def get_response(
    assignments: Iterable[DeviceAssignment],
    namespace: str,
    name: str,
    bare_pods: Iterable[Pod] = (),
) -> pb.GetPodResourcesResponse | None:
    """The ``Get`` reply for one active pod, or ``None`` when the pod is not active (the kubelet
    answers that with an error)."""
    rows = [row for row in assignments if (row.namespace, row.pod) == (namespace, name)]
    if rows:
        return pb.GetPodResourcesResponse(pod_resources=_pod(namespace, name, rows))
    if (namespace, name) in set(bare_pods):
        return pb.GetPodResourcesResponse(pod_resources=_bare(namespace, name))
    return None


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
