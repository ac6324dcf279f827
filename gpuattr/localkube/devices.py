"""The GPUs of a local node, as NVIDIA's device plugin would advertise them. Pure.

A :class:`Gpu` is handed out whole (``GPU-<uuid>`` under ``nvidia.com/gpu``), as time-slicing
replicas (``GPU-<uuid>::<n>``, under ``nvidia.com/gpu`` or, renamed, ``nvidia.com/gpu.shared``:
replicas and whole GPUs of one node can share a resource name, as NVIDIA's plugin does when
sharing covers some GPUs only), or split into MIG devices (``MIG-<uuid>`` under
``nvidia.com/mig-<profile>``, the mixed strategy). :func:`plugin_config` is what our device plugin
(``go/deviceplugin``) reads; :func:`inventory` is what NVML would report on that node (the
agent's ``GPUATTR_INVENTORY_FILE``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from contract.records import replace

WHOLE = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
MODEL = "NVIDIA A100-SXM4-80GB"


@dataclass(frozen=True, slots=True)
class Mig:
    uuid: str  # MIG-<uuid>
    gi: int
    profile: str


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    uuid: str  # GPU-<uuid>
    replicas: int = 0  # time-slicing replicas; 0: the GPU is handed out whole
    renamed: bool = False  # replicas under nvidia.com/gpu.shared
    migs: tuple[Mig, ...] = field(default=())
    model: str = MODEL

    def ids(self) -> list[tuple[str, str]]:
        """(resource name, device ID) of everything the plugin advertises for this GPU."""
        if self.migs:
            return [(f"nvidia.com/mig-{m.profile}", m.uuid) for m in self.migs]
        if self.replicas:
            resource = SHARED if self.renamed else WHOLE
            return [(resource, f"{self.uuid}::{n}") for n in range(self.replicas)]
        return [(WHOLE, self.uuid)]

    def device_keys(self) -> list[str]:
        """What attribution events name: the GPU, or each of its MIG instances."""
        return [m.uuid for m in self.migs] if self.migs else [self.uuid]


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}.gpu{index}.gpuattr.local')}"


def mig_uuid(node: str, index: int, gi: int) -> str:
    return f"MIG-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}.gpu{index}.gi{gi}.gpuattr.local')}"


def default_layout(node: str) -> tuple[Gpu, ...]:
    """Five GPUs: two whole, four renamed replicas, two replicas beside the whole GPUs under
    ``nvidia.com/gpu``, and one split into two 1g.10gb MIG devices."""
    g = [Gpu(i, gpu_uuid(node, i)) for i in range(5)]
    migs = tuple(Mig(mig_uuid(node, 4, gi), gi, "1g.10gb") for gi in (7, 8))
    return (
        g[0],
        g[1],
        replace(g[2], replicas=4, renamed=True),
        replace(g[3], replicas=2),
        replace(g[4], migs=migs),
    )


def with_replicas(
    layout: tuple[Gpu, ...], index: int, replicas: int, *, renamed: bool
) -> tuple[Gpu, ...]:
    """The layout after the plugin's config shares GPU ``index`` (``replicas=0``: whole again)."""
    return tuple(
        replace(g, replicas=replicas, renamed=renamed) if g.index == index else g for g in layout
    )


def plugin_config(layout: tuple[Gpu, ...]) -> dict[str, Any]:
    """Our device plugin's config: every resource and its devices (NUMA node: index parity)."""
    resources: dict[str, list[dict[str, Any]]] = {}
    for gpu in layout:
        for resource, device_id in gpu.ids():
            resources.setdefault(resource, []).append({"id": device_id, "numa": gpu.index % 2})
    return {"resources": [{"name": n, "devices": d} for n, d in sorted(resources.items())]}


def inventory(layout: tuple[Gpu, ...], extra: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    """What NVML reports on the node: the layout's GPUs and MIG devices, then ``extra`` GPUs
    (uuid, model; e.g. the DRA driver's) by the next indices."""
    gpus: list[dict[str, Any]] = [
        {"index": g.index, "uuid": g.uuid, "model": g.model} for g in layout
    ]
    first = max((g.index for g in layout), default=-1) + 1
    gpus += [{"index": first + n, "uuid": u, "model": m} for n, (u, m) in enumerate(extra)]
    migs = [
        {"mig_uuid": m.uuid, "parent_uuid": g.uuid, "gi": m.gi, "ci": 0, "profile": m.profile}
        for g in layout
        for m in g.migs
    ]
    return {"gpus": gpus, "migs": migs}
