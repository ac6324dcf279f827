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
  device names are DNS labels and never do, so the *last* ``/`` separates them. The row names
  its claim (``claim``: ``<claim_namespace>/<claim_name>``). DRA rows are not filtered by
  ``resource_prefixes`` (driver names are not resource names). A device shared through
  consumable capacity keeps the device's ID and carries the allocation's ``share_id`` (1.35+):
  several claims on one device are several holders of that device. Claim resources without a
  device name (not a device, or a kubelet older than 1.31) are skipped.

What is skipped because it cannot be used — not what is out of scope, like CPU-only pods or
another vendor's resources — is listed by :func:`read_list` / :func:`read_allocatable` (one
pass each) with its reason, for the collector
to count (``gpuattr_agent_ignored_podresources_rows_total{reason}``) and log once per reason:
a wanted resource with an empty device ID, a DRA claim resource without a driver or device
name, a pod entry without a name or namespace.

The API names pods by namespace and name: there is no pod UID to carry.
"""

from __future__ import annotations

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


Device = tuple[str, str, str, str]  # resource, device ID, DRA claim, share ID ("": none)


def _container(
    where: str, ctr: pb.ContainerResources, resource_prefixes: tuple[str, ...]
) -> tuple[list[Device], list[Unusable], bool]:
    """A container's wanted devices (resource, device ID, DRA claim, share ID), what of them
    cannot be used, and whether it has any wanted device at all."""
    devices: list[Device] = []
    bad: list[Unusable] = []
    wanted = False
    for entry in ctr.devices:
        if entry.resource_name.startswith(resource_prefixes):
            wanted = True
            devices += [(entry.resource_name, i, "", "") for i in entry.device_ids if i]
            if not all(entry.device_ids):
                bad.append(Unusable(EMPTY_DEVICE_ID, f"{where} {ctr.name} {entry.resource_name}"))
    for claim in ctr.dynamic_resources:
        ref = f"{claim.claim_namespace}/{claim.claim_name}"
        for res in claim.claim_resources:
            wanted = True
            if res.driver_name and res.device_name:
                resource = f"{DRA_PREFIX}{res.driver_name}"
                device_id = f"{res.pool_name}/{res.device_name}"
                devices.append((resource, device_id, ref, res.share_id))
            else:
                bad.append(
                    Unusable(DRA_WITHOUT_DEVICE, f"{where} {ctr.name} claim {claim.claim_name}")
                )
    return devices, bad, wanted


def read_list(
    resp: pb.ListPodResourcesResponse, resource_prefixes: tuple[str, ...] = DEFAULT_PREFIXES
) -> tuple[tuple[DeviceAssignment, ...], tuple[Unusable, ...]]:
    """One pass over a ``List`` reply: one row per device ID per resource per container (sorted,
    without duplicates), and the wanted entries that cannot be used (in reply order).

    Rows are a set: a DRA device a kubelet lists twice or three times for one container (after
    a restart and a sandbox re-creation, kubernetes/kubernetes#140471, each copy with a longer
    CDI list) is one row — merged by (claim, driver, pool, device, share); the CDI names are not
    read. Pod and replica order change between calls and change nothing here.

    Pods and containers without a wanted device (CPU-only pods, other vendors) add nothing."""
    rows: set[DeviceAssignment] = set()
    bad: list[Unusable] = []
    for pod in resp.pod_resources:
        where = f"pod {pod.namespace or '?'}/{pod.name or '?'}"
        named, wanted = bool(pod.name and pod.namespace), False
        for ctr in pod.containers:
            devices, unusable_here, wanted_here = _container(where, ctr, resource_prefixes)
            bad += unusable_here
            wanted = wanted or wanted_here
            if named:
                rows.update(
                    DeviceAssignment(pod.namespace, pod.name, ctr.name, *device)
                    for device in devices
                )
        if wanted and not named:
            bad.append(Unusable(POD_WITHOUT_NAME, where))
    return tuple(sorted(rows)), tuple(bad)


def listed_pods(resp: pb.ListPodResourcesResponse) -> frozenset[str]:
    """``namespace/name`` of every pod the reply names, with devices or without: a kubelet that
    has its pods lists every active pod (how :mod:`agents.podresources.readiness` tells a
    kubelet that has just started from an empty node)."""
    return frozenset(f"{p.namespace}/{p.name}" for p in resp.pod_resources if p.name)


def read_allocatable(
    resp: pb.AllocatableResourcesResponse, resource_prefixes: tuple[str, ...] = DEFAULT_PREFIXES
) -> tuple[tuple[AllocatableDevice, ...], tuple[Unusable, ...]]:
    """One pass over a ``GetAllocatableResources`` reply: every device the kubelet can hand out,
    with its NUMA nodes (sorted, without duplicates), and the entries that cannot be used."""
    rows: set[AllocatableDevice] = set()
    bad: list[Unusable] = []
    for devices in resp.devices:
        if devices.resource_name.startswith(resource_prefixes):
            numa = tuple(sorted({node.ID for node in devices.topology.nodes}))
            rows.update(
                AllocatableDevice(devices.resource_name, i, numa) for i in devices.device_ids if i
            )
            if not all(devices.device_ids):
                bad.append(Unusable(EMPTY_DEVICE_ID, f"allocatable {devices.resource_name}"))
    return tuple(sorted(rows)), tuple(bad)


def assignments_from_list(
    resp: pb.ListPodResourcesResponse, resource_prefixes: tuple[str, ...] = DEFAULT_PREFIXES
) -> tuple[DeviceAssignment, ...]:
    """The rows of :func:`read_list`."""
    return read_list(resp, resource_prefixes)[0]


def allocatable_from_response(
    resp: pb.AllocatableResourcesResponse, resource_prefixes: tuple[str, ...] = DEFAULT_PREFIXES
) -> tuple[AllocatableDevice, ...]:
    """The devices of :func:`read_allocatable`."""
    return read_allocatable(resp, resource_prefixes)[0]


def unusable(
    resp: pb.ListPodResourcesResponse | pb.AllocatableResourcesResponse,
    resource_prefixes: tuple[str, ...] = DEFAULT_PREFIXES,
) -> tuple[Unusable, ...]:
    """The entries of a wanted kind that the readings above skip because they cannot be used."""
    if isinstance(resp, pb.AllocatableResourcesResponse):
        return read_allocatable(resp, resource_prefixes)[1]
    return read_list(resp, resource_prefixes)[1]
