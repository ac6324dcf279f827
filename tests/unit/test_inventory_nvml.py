"""The inventory read through NVML carries each GPU's PCI bus id (the locality check's side)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from agents.inventory import read_nvml
from contract.inputs import GpuInfo


class FakeNvml:
    """The few ``pynvml`` calls :func:`read_nvml` makes, over two GPUs; the second has no PCI
    info (NVML answers an error). Method names are NVML's own."""

    class NVMLError(Exception):
        pass

    NVML_DEVICE_MIG_ENABLE = 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return f"GPU-{handle}".encode()

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetPciInfo(self, handle: int) -> Any:
        if handle == 1:
            raise self.NVMLError("Not Supported")
        return SimpleNamespace(busId=b"00000000:3B:00.0")

    def nvmlDeviceGetMigMode(self, handle: int) -> tuple[int, int]:
        raise self.NVMLError("Not Supported")


def test_read_nvml_keeps_each_gpus_pci_bus_id() -> None:
    inventory = read_nvml(FakeNvml(), "gpu-a", 1)
    assert inventory.gpus == (
        GpuInfo(0, "GPU-0", "NVIDIA H100 80GB HBM3", "00000000:3B:00.0"),
        GpuInfo(1, "GPU-1", "NVIDIA H100 80GB HBM3", ""),
    )
