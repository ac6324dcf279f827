"""Device identity: every device ID the kubelet hands out, mapped to a physical GPU and a slot.

Pure. Forms the NVIDIA and GKE device plugins use (see docs/ARCHITECTURE.md):

- ``GPU-<uuid>`` whole GPU; ``GPU-<uuid>::<n>`` its n-th replica (time-slicing or MPS)
- ``MIG-<uuid>`` MIG device (parent not encoded: needs the node's inventory);
  ``MIG-<uuid>::<n>`` a replica of a time-sliced MIG device
- ``MIG-GPU-<parent-uuid>/<gi>/<ci>`` legacy MIG device (parent and GPU instance encoded)
- GKE: ``nvidia0``, ``nvidia0/vgpu1`` (replica), ``nvidia0/gi3`` and ``nvidia0/gi3/vgpu0`` (MIG)

A *device key* names what the hardware reports on: ``GPU-<uuid>`` for a whole GPU or
``GPU-<uuid>/gi<N>`` for one MIG GPU instance. dcgm-exporter rows map to the same keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from sys import intern
from typing import Literal

from contract.records import Record
from streams.core.memo import live_memo

Family = Literal["gpu", "mig", "mig-legacy", "gke", "other"]

# Indexes are ASCII digits, at most 9 of them: anything else is not an index we can trust
# (``\d`` would also match other scripts' digits, and int() refuses very long numbers).
_N = r"[0-9]{1,9}"
_GKE = re.compile(rf"^nvidia(?P<index>{_N})(?:/gi(?P<gi>{_N}))?(?:/vgpu(?P<replica>{_N}))?$")
_LEGACY_MIG = re.compile(rf"^MIG-(?P<parent>GPU-[^/]+)/(?P<gi>{_N})/(?P<ci>{_N})$")


def small_index(text: str) -> int | None:
    """``text`` as a non-negative index if it is 1-9 ASCII digits, else ``None``."""
    return int(text) if re.fullmatch(_N, text) else None


class DeviceId(Record, frozen=True):
    """A kubelet device ID taken apart: its base device and the replica it names, if any."""

    raw: str
    base: str
    replica: int | None
    family: Family
    gpu_uuid: str | None = None
    gpu_index: int | None = None
    mig_gi: int | None = None


class MigDevice(Record, frozen=True):
    """One MIG device from the node's inventory (NVML or a static file)."""

    mig_uuid: str
    parent_uuid: str
    gi: int
    profile: str | None = None


@dataclass(frozen=True, slots=True)
class Inventory:
    """What the node agent knows of its GPUs: index → UUID and MIG UUID → parent."""

    gpus: Mapping[int, str]
    migs: Mapping[str, MigDevice]
    models: Mapping[str, str] = field(default_factory=dict)  # GPU UUID → model (additive)
    #: GPU UUID → PCI bus id as NVML reports it (GPUs it reported one for)
    pci_buses: Mapping[str, str] = field(default_factory=dict)


EMPTY_INVENTORY = Inventory(gpus={}, migs={})


@live_memo(65_536)  # pure; a node's IDs repeat every sample (kept while asked for)
def parse_device_id(raw: str) -> DeviceId:
    """Split a kubelet device ID into base device and replica (split on the first ``::``)."""
    base, sep, rest = raw.partition("::")
    replica = small_index(rest) if sep else None
    if sep and replica is None:
        base = raw  # "::" followed by something that is not a replica index: keep it whole
    if m := _LEGACY_MIG.match(base):
        return DeviceId(raw, base, replica, "mig-legacy", m["parent"], None, int(m["gi"]))
    if base.startswith("GPU-"):
        return DeviceId(raw, base, replica, "gpu", gpu_uuid=base)
    if base.startswith("MIG-"):
        return DeviceId(raw, base, replica, "mig")
    if m := _GKE.match(raw):
        gi = int(m["gi"]) if m["gi"] is not None else None
        gke_base = f"nvidia{m['index']}" + (f"/gi{gi}" if gi is not None else "")
        gke_replica = int(m["replica"]) if m["replica"] is not None else None
        return DeviceId(raw, gke_base, gke_replica, "gke", None, int(m["index"]), gi)
    return DeviceId(raw, base, replica, "other")


def device_key(gpu_uuid: str, mig_gi: int | None) -> str:
    """The key of what the hardware reports on: a whole GPU or one of its GPU instances."""
    # interned: a decoded scrape's strings are its own, and device keys are kept in state
    return intern(gpu_uuid if mig_gi is None else f"{gpu_uuid}/gi{mig_gi}")


def resolve(dev: DeviceId, inventory: Inventory) -> str | None:
    """The device key a kubelet device ID occupies, or ``None`` when the inventory lacks it."""
    if dev.family == "gpu" and dev.gpu_uuid is not None:
        return device_key(dev.gpu_uuid, None)
    if dev.family == "mig-legacy" and dev.gpu_uuid is not None:
        return device_key(dev.gpu_uuid, dev.mig_gi)
    if dev.family == "mig":
        mig = inventory.migs.get(dev.base)
        return device_key(mig.parent_uuid, mig.gi) if mig else None
    if dev.family == "gke" and dev.gpu_index is not None:
        uuid = inventory.gpus.get(dev.gpu_index)
        return device_key(uuid, dev.mig_gi) if uuid else None
    return None


def mig_uuid_for(key_uuid: str, gi: int, inventory: Inventory) -> str | None:
    """The MIG device UUID of GPU instance ``gi`` on ``key_uuid``, when the inventory has it."""
    for mig in inventory.migs.values():
        if mig.parent_uuid == key_uuid and mig.gi == gi:
            return mig.mig_uuid
    return None
