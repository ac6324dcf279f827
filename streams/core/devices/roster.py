"""The devices a node has, whether or not its exporter answers. Pure.

Allocation is the spine: a GPU a pod holds is in every view even when no sample describes it.
A node's devices are the union of what its own sources list — its inventory (NVML: GPUs and MIG
instances), the kubelet's allocatable devices, the devices held now (PodResources), the devices
its DRA driver publishes (ResourceSlices) and the rows of its last accepted scrape — keyed like
the hardware reports (``GPU-<uuid>``, ``GPU-<parent>/gi<N>``). A MIG-enabled GPU is its
instances, not a device beside them. A held device we cannot place on a
GPU (a MIG UUID the inventory lacks, a DRA device no slice lists) is a device of its own, keyed
by its ID, so its holders are never dropped.

The same sources are what an exporter's answer is checked against (:func:`known_gpus`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from sys import intern

from streams.core.devices.attribution import DeviceFacts
from streams.core.devices.dra import Placed, UnplacedMig, place
from streams.core.devices.holders import DraDevices, NodeDevices, dra_ref
from streams.core.devices.identity import Inventory, mig_uuid_for

SHARED_SUFFIX = "-SHARED"


def is_gpu_uuid(key: str) -> bool:
    """A GPU UUID (or a MIG instance key on one): ``GPU-…`` as NVML and dcgm-exporter print it;
    any case, as DRA drivers publish it in their slices (the example driver: ``gpu-…``)."""
    return key[:4].upper() == "GPU-"


def gpu_of(key: str) -> str:
    """The physical GPU a device key is on."""
    return intern(key.partition("/gi")[0])


def known_gpus(
    inventory: Inventory,
    index: NodeDevices | None,
    dra_keys: Iterable[str],
    unplaced_parents: Iterable[str] = (),
) -> frozenset[str]:
    """Every GPU UUID the node itself lists (inventory, allocatable, held, slices)."""
    gpus = set(inventory.gpus.values()) | {m.parent_uuid for m in inventory.migs.values()}
    if index is not None:
        gpus |= {gpu_of(k) for k in (*index.advertised, *index.keys)}
        gpus |= set(index.unplaced_mig)
    gpus |= {gpu_of(k) for k in dra_keys}
    gpus |= set(unplaced_parents)
    return frozenset(g for g in gpus if is_gpu_uuid(g))


def _model(gpu_uuid: str, inventory: Inventory, product: str | None) -> str:
    if model := inventory.models.get(gpu_uuid):
        return model
    return (product or "").removesuffix(SHARED_SUFFIX)


def devices(
    node: str,
    inventory: Inventory,
    index: NodeDevices | None,
    dra: DraDevices,
    dra_keys: Iterable[str],
    scraped: Iterable[str],
    product: str | None = None,
) -> dict[str, DeviceFacts]:
    """The node's devices, key → what identifies each in an event (sorted by key)."""
    index_of = {uuid: i for i, uuid in inventory.gpus.items()}
    keys = set(inventory.gpus.values())
    keys |= {f"{m.parent_uuid}/gi{m.gi}" for m in inventory.migs.values()}
    keys |= set(dra_keys) | set(scraped)
    if index is not None:
        keys |= set(index.advertised) | set(index.keys)
    # a MIG-enabled GPU is its instances: it is not a device of its own beside them (a sample of
    # the parent itself, where an exporter prints one, is still reported as ``mig-parent``)
    parents = {gpu_of(k) for k in keys if "/gi" in k}
    if index is not None:
        parents |= set(index.unplaced_mig)
    profiles: dict[tuple[str, int], str | None] = {}  # (parent, gi) → the first instance's
    for m in inventory.migs.values():
        profiles.setdefault((m.parent_uuid, m.gi), m.profile)
    out: dict[str, DeviceFacts] = {}
    for key in sorted(k for k in keys if is_gpu_uuid(k) and k not in parents):
        gpu, sep, gi_text = key.partition("/gi")
        gi = int(gi_text) if sep and gi_text.isdigit() else None
        if sep and gi is None:
            continue  # not a key we make
        profile = profiles.get((gpu, gi)) if gi is not None else None
        out[key] = DeviceFacts(
            node=node,
            gpu_uuid=gpu,
            gpu_index=index_of.get(gpu),
            model=_model(gpu, inventory, product),
            mig_instance_id=gi,
            mig_profile=profile,
            device_uuid=mig_uuid_for(gpu, gi, inventory) if gi is not None else None,
        )
    for base in index.unresolved if index is not None else ():
        out[base] = _unplaced(node, base, inventory, dra, product)
    return out


def _unplaced(
    node: str, base: str, inventory: Inventory, dra: DraDevices, product: str | None
) -> DeviceFacts:
    """A held device no GPU key places: its ID stands for it."""
    ref = dra_ref(base)
    placement = place(ref, dra, inventory) if ref is not None else None
    if isinstance(placement, UnplacedMig):
        return DeviceFacts(
            node=node,
            gpu_uuid=placement.parent_uuid,
            gpu_index={u: i for i, u in inventory.gpus.items()}.get(placement.parent_uuid),
            model=_model(placement.parent_uuid, inventory, product),
            mig_profile=placement.profile or "unknown",
            device_uuid=base,
        )
    if isinstance(placement, Placed):  # placed since the index was built: the key speaks
        return DeviceFacts(node=node, gpu_uuid=gpu_of(placement.key), device_uuid=base)
    return DeviceFacts(node=node, gpu_uuid=base, device_uuid=base)


def device_ids(facts: Mapping[str, DeviceFacts]) -> tuple[tuple[str, str], ...]:
    """(key, the device's id in events) for each device: what the node's state remembers."""
    return tuple((key, event_id(key, f)) for key, f in facts.items())


def event_id(key: str, facts: DeviceFacts) -> str:
    return facts.device_uuid or key
