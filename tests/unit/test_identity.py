"""Device-ID normalization: every form the NVIDIA and GKE device plugins hand the kubelet."""

from __future__ import annotations

import pytest

from streams.core.devices.identity import (
    EMPTY_INVENTORY,
    Inventory,
    MigDevice,
    device_key,
    mig_uuid_for,
    parse_device_id,
    resolve,
)

U = "GPU-8b2c4a51-8a9e-4f1b-a0d2-3c5e7f9a1b2c"
M = "MIG-5f0e1d2c-3b4a-5968-7a8b-9c0d1e2f3a4b"
INV = Inventory(gpus={0: U, 1: "GPU-other"}, migs={M: MigDevice(M, U, 3, "1g.10gb")})


@pytest.mark.parametrize(
    ("raw", "base", "replica", "family", "key"),
    [
        pytest.param(U, U, None, "gpu", U, id="whole-gpu"),
        pytest.param(f"{U}::3", U, 3, "gpu", U, id="time-sliced-replica"),
        pytest.param(f"{U}::0", U, 0, "gpu", U, id="replica-zero"),
        pytest.param(M, M, None, "mig", f"{U}/gi3", id="mig-new-style"),
        pytest.param(f"{M}::7", M, 7, "mig", f"{U}/gi3", id="time-sliced-mig"),
        pytest.param(f"MIG-{U}/5/0", f"MIG-{U}/5/0", None, "mig-legacy", f"{U}/gi5", id="legacy"),
        pytest.param("nvidia0", "nvidia0", None, "gke", U, id="gke-whole"),
        pytest.param("nvidia0/vgpu1", "nvidia0", 1, "gke", U, id="gke-shared"),
        pytest.param("nvidia0/gi3", "nvidia0/gi3", None, "gke", f"{U}/gi3", id="gke-mig"),
        pytest.param("nvidia0/gi3/vgpu0", "nvidia0/gi3", 0, "gke", f"{U}/gi3", id="gke-mig-shared"),
        pytest.param("0000:3b:00.0", "0000:3b:00.0", None, "other", None, id="unknown-form"),
    ],
)
def test_parse_and_resolve(
    raw: str, base: str, replica: int | None, family: str, key: str | None
) -> None:
    dev = parse_device_id(raw)
    assert (dev.base, dev.replica, dev.family) == (base, replica, family)
    assert resolve(dev, INV) == key


def test_split_on_first_double_colon_only() -> None:
    dev = parse_device_id(f"{U}::2::9")
    assert dev.base == f"{U}::2::9"  # not a replica index after the first "::": kept whole
    assert dev.replica is None


@pytest.mark.parametrize("raw", [M, "nvidia0", "nvidia2/gi1"])
def test_unresolvable_without_inventory(raw: str) -> None:
    assert resolve(parse_device_id(raw), EMPTY_INVENTORY) is None


def test_device_key_and_mig_lookup() -> None:
    assert device_key(U, None) == U
    assert device_key(U, 3) == f"{U}/gi3"
    assert mig_uuid_for(U, 3, INV) == M
    assert mig_uuid_for(U, 4, INV) is None
