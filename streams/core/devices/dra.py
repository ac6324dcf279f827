"""DRA devices: which GPU (or MIG instance) a claimed device is, and what its claim says. Pure.

A PodResources DRA row names a device by driver, pool and device name (``gpu-0``, a MIG
placement): not a GPU UUID. The node's ResourceSlices say which GPU that is (:func:`place`):

* a full GPU carries ``uuid``: its device key is that UUID;
* a static MIG device carries its MIG ``uuid``: the node's inventory (NVML) gives its parent GPU
  and GPU instance, the key DCGM reports on;
* a dynamic MIG placement has no UUID (the instance is created when the pod starts): it stays
  "MIG instance of <parent>, profile <p>, UUID unknown" (:class:`UnplacedMig`) — never guessed.

Only slices of a pool's newest generation count (older ones are being replaced).

The claim (:func:`claim_view`) says who reserves the device (``reservedFor``, with UIDs), whether
this allocation is an observer's (``adminAccess``: a monitoring pod, never a holder), the
sharing its driver config turns on (``GpuConfig``/``MigDeviceConfig`` ``sharing.strategy``), and,
for consumable capacity, the share of the device the allocation consumes — an *allocation*
share, not a usage figure.

Which DeviceClass selects a device (:func:`device_class`): NVIDIA's driver (``gpu.nvidia.com``)
publishes whole GPUs (``type=gpu``) for class ``gpu.nvidia.com`` and MIG devices (``type=mig``)
for class ``mig.nvidia.com`` (the selectors of its deviceclass manifests); any other driver's
devices are taken to be its class of the same name (the example driver's ``gpu.example.com``).
What a pending pod asks for (``dra:<device class>``) and what a node supplies are both named so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from contract.inputs import (
    ClaimConsumer,
    DraDevice,
    ResourceClaimRecord,
    ResourceSliceRecord,
)
from contract.quantity import parse as parse_quantity
from contract.records import Record
from streams.core.devices.allocation import dra_name, dra_resource
from streams.core.devices.identity import Inventory, device_key

DeviceRef = tuple[str, str, str]  # driver, pool, device name

NVIDIA_DRIVER = "gpu.nvidia.com"
#: the classes NVIDIA's driver installs, by the ``type`` attribute each one's selector takes
NVIDIA_CLASSES = {"gpu": "gpu.nvidia.com", "mig": "mig.nvidia.com"}


def device_class(driver: str, mig: bool) -> str:
    """The DeviceClass that selects a device of ``driver`` (a MIG device, or a whole one)."""
    if driver == NVIDIA_DRIVER:
        return NVIDIA_CLASSES["mig" if mig else "gpu"]
    return driver


def class_resource(resource: str, mig: bool) -> str:
    """A held device's resource as demand names it: ``dra:<driver>`` → ``dra:<device class>``
    (:func:`device_class`); a device-plugin resource as it is."""
    named = dra_name(resource)
    return resource if named is None else dra_resource(device_class(named, mig))


def selects(resource: str, mig: bool) -> bool:
    """A device of this kind can be supply of ``resource``: a class of NVIDIA's takes only its
    own type (a MIG device is never one of ``dra:gpu.nvidia.com``); any other resource, any."""
    klass = dra_name(resource)
    types = [t for t, c in NVIDIA_CLASSES.items() if c == klass]
    return not types or (types[0] == "mig") == mig


class NodeSlices(Record, frozen=True):
    """The live ResourceSlices of one node (a table value, keyed by node)."""

    slices: tuple[ResourceSliceRecord, ...] = ()

    def apply(self, record: ResourceSliceRecord) -> NodeSlices:
        """The slices after one slice record (a deleted one leaves), sorted by name."""
        kept = [s for s in self.slices if s.name != record.name]
        if not record.deleted:
            kept.append(record)
        return NodeSlices(tuple(sorted(kept, key=lambda s: s.name)))


def device_map(slices: Iterable[ResourceSliceRecord]) -> dict[DeviceRef, DraDevice]:
    """Every device of the newest generation of each pool, by (driver, pool, device)."""
    live = [s for s in slices if not s.deleted]
    newest: dict[tuple[str, str], int] = {}
    for s in live:
        pool = (s.driver, s.pool)
        newest[pool] = max(newest.get(pool, s.pool_generation), s.pool_generation)
    return {
        (s.driver, s.pool, d.name): d
        for s in live
        if s.pool_generation == newest[s.driver, s.pool]
        for d in s.devices
    }


def split_row(resource: str, device_id: str) -> DeviceRef | None:
    """``dra:<driver>`` + ``<pool>/<device>`` → (driver, pool, device); pools may hold ``/``."""
    driver = dra_name(resource)
    if driver is None:
        return None
    pool, sep, name = device_id.rpartition("/")
    if not sep or not pool or not name:
        return None
    return driver, pool, name


class Placed(Record, frozen=True):
    """The device key DCGM reports on (a GPU UUID, or ``<parent>/gi<N>``), and the MIG UUID."""

    key: str
    mig_uuid: str | None = None


class UnplacedMig(Record, frozen=True):
    """A MIG device whose instance we cannot name: no UUID in the slice (dynamic MIG), or a
    UUID the node's inventory does not list (yet)."""

    parent_uuid: str
    profile: str | None
    mig_uuid: str | None

    def describe(self) -> str:
        uuid = self.mig_uuid or "unknown"
        return (
            f"MIG instance of {self.parent_uuid}, profile {self.profile or 'unknown'}, UUID {uuid}"
        )


class Unplaced(Record, frozen=True):
    """A device we cannot relate to any GPU (no slice lists it, or it lists no UUID)."""

    reason: str


Placement = Placed | UnplacedMig | Unplaced


def place(
    ref: DeviceRef, devices: Mapping[DeviceRef, DraDevice], inventory: Inventory
) -> Placement:
    device = devices.get(ref)
    if device is None:
        return Unplaced(f"no ResourceSlice of this node lists {ref[0]} {ref[1]}/{ref[2]}")
    if device.type == "mig" or device.parent_uuid:
        mig = inventory.migs.get(device.uuid) if device.uuid else None
        if mig is not None:
            return Placed(device_key(mig.parent_uuid, mig.gi), mig.mig_uuid)
        if device.parent_uuid:
            return UnplacedMig(device.parent_uuid, device.profile, device.uuid)
        return Unplaced(f"MIG device {ref[2]} names no parent GPU")
    if device.uuid:
        return Placed(device_key(device.uuid, None))
    return Unplaced(f"device {ref[2]} has no uuid attribute")


def placed_keys(devices: Mapping[DeviceRef, DraDevice], inventory: Inventory) -> frozenset[str]:
    """The device keys (GPUs, MIG instances) a node's DRA slices place: DRA devices, held or not."""
    placements = (place(ref, devices, inventory) for ref in devices)
    return frozenset(p.key for p in placements if isinstance(p, Placed))


class ClaimView(Record, frozen=True):
    """What one claim says about one of its devices."""

    claim: str  # namespace/name
    uid: str
    observer: bool  # adminAccess: monitoring, not a holder
    consumers: tuple[ClaimConsumer, ...]
    sharing: str | None  # from the driver config: time-slicing | mps
    share_id: str | None
    allocation_share: float | None  # consumed capacity / device capacity


def quantity(text: str) -> Decimal | None:
    """A Kubernetes quantity (``80Gi``, ``500M``, ``2``) as a number; ``None`` if unreadable or
    out of bounds (:mod:`contract.quantity`)."""
    return parse_quantity(text)


def _share(consumed: tuple[tuple[str, str], ...], device: DraDevice | None) -> float | None:
    """The allocation share of consumable capacity: consumed / total of the first capacity both
    name (``memory`` first), rounded; ``None`` when either is missing or unreadable."""
    if not consumed or device is None:
        return None
    total = dict(device.capacity)
    used = dict(consumed)
    for name in sorted(used, key=lambda n: (n != "memory", n)):
        if name in total:
            part, whole = quantity(used[name]), quantity(total[name])
            if part is not None and whole and part >= 0 and whole > 0:
                return round(min(1.0, float(part / whole)), 4)
    return None


def claim_view(
    claim: ResourceClaimRecord, ref: DeviceRef, device: DraDevice | None, share_id: str = ""
) -> ClaimView | None:
    """The claim's word on device ``ref`` (the allocation with ``share_id`` when given);
    ``None`` when the claim did not allocate that device."""
    driver, pool, name = ref
    results = [
        r
        for r in claim.results
        if (r.driver, r.pool, r.device) == (driver, pool, name)
        and (not share_id or r.share_id == share_id)
    ]
    if not results:
        return None
    requests = {r.request for r in results}
    sharing = next(
        (
            c.sharing
            for c in reversed(claim.config)  # later entries override earlier ones
            if c.driver == driver and c.sharing and (not c.requests or requests & set(c.requests))
        ),
        None,
    )
    result = results[0]
    return ClaimView(
        claim=f"{claim.namespace}/{claim.name}",
        uid=claim.uid,
        observer=all(r.admin_access for r in results),
        consumers=claim.reserved_for,
        sharing=sharing,
        share_id=result.share_id,
        allocation_share=_share(result.consumed, device),
    )
