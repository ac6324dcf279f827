"""The node's GPUs, whoever names them: NVML's ``GPU-…`` and a DRA driver's ``gpu-…`` alike."""

from __future__ import annotations

import pytest

from streams.core.devices.identity import EMPTY_INVENTORY, Inventory
from streams.core.devices.roster import devices, is_gpu_uuid, known_gpus

# the DRA example driver publishes lowercase UUIDs in its ResourceSlices; NVML prints uppercase
DRA_GPU = "gpu-156262fb-a23a-dcad-79b2-88a4ddefeb79"
NVML_GPU = "GPU-45ec6b66-23f1-5b2a-9c1e-2f6a3c1d7e10"


@pytest.mark.parametrize(
    ("key", "gpu"),
    [
        (NVML_GPU, True),
        (DRA_GPU, True),
        (f"{NVML_GPU}/gi3", True),
        ("MIG-6f2a1b7c-0000-5555-aaaa-000000000001", False),
        ("nvidia0", False),
        ("0", False),
        ("gpu", False),
    ],
)
def test_a_gpu_uuid_in_any_case(key: str, gpu: bool) -> None:
    assert is_gpu_uuid(key) is gpu


def test_a_dra_drivers_lowercase_uuids_are_the_nodes_gpus_and_devices() -> None:
    """Slices of the DRA example driver: the exporter's rows for them are the node's own (not
    refused as another node's) and each is a device of the node."""
    inventory = Inventory(gpus={0: NVML_GPU}, migs={})
    assert known_gpus(inventory, None, [DRA_GPU]) == frozenset({NVML_GPU, DRA_GPU})
    assert set(devices("n1", EMPTY_INVENTORY, None, {}, [DRA_GPU], [])) == {DRA_GPU}
