"""The node's device inventory: GPU index → UUID and MIG UUID → parent GPU and instance.

New-style MIG device IDs (``MIG-<uuid>``) do not name their parent GPU, and GKE's plugin names
devices by index (``nvidia0``): the worker needs this inventory to place them. Read through NVML
with the official ``nvidia-ml-py`` bindings when the driver library loads, else from a static
JSON file (``GPUATTR_INVENTORY_FILE``), as simulated clusters and NVML-less nodes do.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import msgspec

from contract.inputs import DeviceInventory, GpuInfo, MigInfo

log = logging.getLogger(__name__)


class InventoryError(RuntimeError):
    """No inventory source worked."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _profile_from_name(name: str) -> str | None:
    # NVML names MIG devices like "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
    _, sep, profile = name.partition(" MIG ")
    return profile.strip() or None if sep else None


def _pci_bus_id(nvml: Any, handle: Any) -> str:
    try:
        return _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
    except nvml.NVMLError as exc:  # the locality check does without it: said, not fatal
        log.warning("NVML has no PCI bus id for a GPU (%s): its exporter rows go unchecked", exc)
        return ""


def read_nvml(nvml: Any, node: str, ts_ms: int) -> DeviceInventory:
    """Read the inventory through an initialised ``pynvml`` module."""
    gpus: list[GpuInfo] = []
    migs: list[MigInfo] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        name = _text(nvml.nvmlDeviceGetName(handle))
        gpus.append(GpuInfo(index, uuid, name, _pci_bus_id(nvml, handle)))
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError:
            continue  # not MIG-capable
        if current != nvml.NVML_DEVICE_MIG_ENABLE:
            continue
        for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nvml.NVMLError:
                continue  # empty slot
            migs.append(
                MigInfo(
                    mig_uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                    parent_uuid=uuid,
                    gi=int(nvml.nvmlDeviceGetGpuInstanceId(mig)),
                    profile=_profile_from_name(_text(nvml.nvmlDeviceGetName(mig))),
                )
            )
    return DeviceInventory(node, ts_ms, "nvml", tuple(gpus), tuple(migs))


class _FileInventory(msgspec.Struct):
    gpus: list[GpuInfo]
    migs: list[MigInfo] = msgspec.field(default_factory=list)


def read_file(path: Path, node: str, ts_ms: int) -> DeviceInventory:
    """Read ``{"gpus": [{index, uuid, model, pci_bus_id}], "migs": [{mig_uuid, parent_uuid,
    gi, ...}]}`` (``model`` and ``pci_bus_id`` may be left out)."""
    try:
        doc = msgspec.json.decode(path.read_bytes(), type=_FileInventory, strict=False)
    except (OSError, msgspec.DecodeError) as exc:
        raise InventoryError(f"inventory file {path}: {exc}") from exc
    return DeviceInventory(node, ts_ms, "file", tuple(doc.gpus), tuple(doc.migs))


def read_inventory(node: str, ts_ms: int, file: Path | None) -> DeviceInventory | None:
    """NVML first, the static file second; ``None`` when neither is available."""
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            log.info("NVML not usable on this node (%s); trying the inventory file", exc)
        else:
            try:
                return read_nvml(pynvml, node, ts_ms)
            finally:
                pynvml.nvmlShutdown()
    if file is not None:
        return read_file(file, node, ts_ms)
    return None
