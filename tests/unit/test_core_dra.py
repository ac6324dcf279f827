"""DRA placement and claim reading (streams/core/devices/dra.py): decision tables."""

from __future__ import annotations

from decimal import Decimal

import pytest

from contract.inputs import (
    ClaimConfig,
    ClaimConsumer,
    ClaimResult,
    DraDevice,
    ResourceClaimRecord,
    ResourceSliceRecord,
)
from streams.core.devices.dra import (
    Placed,
    Unplaced,
    UnplacedMig,
    claim_view,
    device_map,
    place,
    placed_keys,
    quantity,
    split_row,
)
from streams.core.devices.identity import Inventory, MigDevice

D = "gpu.nvidia.com"
NODE = "node-a"
GPU0 = "GPU-11111111-1111-4111-8111-111111111111"
GPU1 = "GPU-22222222-2222-4222-8222-222222222222"
MIG = "MIG-33333333-3333-5333-8333-333333333333"
INVENTORY = Inventory(gpus={0: GPU0, 1: GPU1}, migs={MIG: MigDevice(MIG, GPU0, 7, "1g.10gb")})

DEVICES = (
    DraDevice("gpu-1", "gpu", GPU1, capacity=(("memory", "80Gi"),), multiple_allocations=True),
    DraDevice("gpu-0-mig-1g10gb-19-0", "mig", MIG, GPU0, "1g.10gb"),
    DraDevice("gpu-0-mig-3g40gb-9-4", "mig", None, GPU0, "3g.40gb"),
    DraDevice("gpu-0-mig-2g20gb-14-2", "mig", "MIG-not-in-inventory", GPU0, "2g.20gb"),
    DraDevice("gpu-9", "gpu"),
    DraDevice("odd-mig", "mig"),
)


def slice_of(
    generation: int, devices: tuple[DraDevice, ...], name: str = "s"
) -> ResourceSliceRecord:
    return ResourceSliceRecord(NODE, 1, name, D, NODE, generation, devices)


MAP = device_map([slice_of(2, DEVICES)])


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        pytest.param("gpu-1", Placed(GPU1), id="full-gpu-by-uuid"),
        pytest.param(
            "gpu-0-mig-1g10gb-19-0", Placed(f"{GPU0}/gi7", MIG), id="static-mig-through-inventory"
        ),
        pytest.param(
            "gpu-0-mig-3g40gb-9-4", UnplacedMig(GPU0, "3g.40gb", None), id="dynamic-mig-no-uuid"
        ),
        pytest.param(
            "gpu-0-mig-2g20gb-14-2",
            UnplacedMig(GPU0, "2g.20gb", "MIG-not-in-inventory"),
            id="mig-uuid-unknown-to-inventory",
        ),
        pytest.param("gpu-9", Unplaced("device gpu-9 has no uuid attribute"), id="no-uuid"),
        pytest.param("odd-mig", Unplaced("MIG device odd-mig names no parent GPU"), id="no-parent"),
        pytest.param(
            "gpu-7",
            Unplaced(f"no ResourceSlice of this node lists {D} {NODE}/gpu-7"),
            id="not-in-any-slice",
        ),
    ],
)
def test_place(device: str, expected: object) -> None:
    assert place((D, NODE, device), MAP, INVENTORY) == expected


def test_dynamic_mig_is_described_not_guessed() -> None:
    placement = place((D, NODE, "gpu-0-mig-3g40gb-9-4"), MAP, INVENTORY)
    assert isinstance(placement, UnplacedMig)
    assert placement.describe() == f"MIG instance of {GPU0}, profile 3g.40gb, UUID unknown"


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = slice_of(1, (DraDevice("gpu-0", "gpu", GPU1),), "old")
    new = slice_of(2, (DraDevice("gpu-0", "gpu", GPU0),), "new")
    gone = ResourceSliceRecord(
        NODE, 1, "gone", D, NODE, 3, (DraDevice("gpu-5", "gpu", GPU0),), True
    )
    other_pool = ResourceSliceRecord(
        NODE, 1, "x", "other.example.com", NODE, 1, (DraDevice("gpu-0"),)
    )
    devices = device_map([old, new, gone, other_pool])
    assert devices[D, NODE, "gpu-0"].uuid == GPU0
    assert (D, NODE, "gpu-5") not in devices
    assert ("other.example.com", NODE, "gpu-0") in devices


@pytest.mark.parametrize(
    ("resource", "device_id", "expected"),
    [
        ("dra:gpu.nvidia.com", "node-a/gpu-0", (D, "node-a", "gpu-0")),
        ("dra:gpu.nvidia.com", "cluster/rack-1/gpu-3", (D, "cluster/rack-1", "gpu-3")),
        ("dra:gpu.nvidia.com", "gpu-0", None),
        ("dra:gpu.nvidia.com", "/gpu-0", None),
        ("nvidia.com/gpu", "GPU-x", None),
    ],
)
def test_split_row(resource: str, device_id: str, expected: object) -> None:
    assert split_row(resource, device_id) == expected


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("80Gi", Decimal(80 * 2**30)),
        ("500M", Decimal(500 * 10**6)),
        ("2", Decimal(2)),
        ("1.5Gi", Decimal("1.5") * 2**30),
        ("lots", None),
        ("-1Gi", None),
        ("", None),
    ],
)
def test_quantity(text: str, value: Decimal | None) -> None:
    assert quantity(text) == value


PODS = (ClaimConsumer("pods", "a", "u1"), ClaimConsumer("pods", "b", "u2"))


def claim(
    results: tuple[ClaimResult, ...], config: tuple[ClaimConfig, ...] = ()
) -> ResourceClaimRecord:
    return ResourceClaimRecord(NODE, 1, "ml", "c", "claim-uid", results, PODS, config)


def result(device: str = "gpu-1", request: str = "gpu", **kw: object) -> ClaimResult:
    return ClaimResult(request, D, NODE, device, **kw)  # type: ignore[arg-type]


def test_shared_claim_with_time_slicing_config() -> None:
    view = claim_view(
        claim((result(),), (ClaimConfig(D, ("gpu",), "GpuConfig", "time-slicing"),)),
        (D, NODE, "gpu-1"),
        MAP[D, NODE, "gpu-1"],
    )
    assert view is not None
    assert (view.claim, view.uid, view.consumers, view.sharing) == (
        "ml/c",
        "claim-uid",
        PODS,
        "time-slicing",
    )
    assert not view.observer
    assert view.allocation_share is None


def test_config_for_other_requests_or_drivers_does_not_apply_and_later_config_wins() -> None:
    configs = (
        ClaimConfig(D, ("other",), "GpuConfig", "mps"),
        ClaimConfig("other.example.com", (), None, "mps"),
        ClaimConfig(D, (), "GpuConfig", "time-slicing"),
        ClaimConfig(D, ("gpu",), "GpuConfig", "mps"),
    )
    view = claim_view(claim((result(),), configs), (D, NODE, "gpu-1"), None)
    assert view is not None
    assert view.sharing == "mps"
    view = claim_view(claim((result(),), configs[:2]), (D, NODE, "gpu-1"), None)
    assert view is not None
    assert view.sharing is None


def test_admin_access_is_an_observer() -> None:
    view = claim_view(claim((result(admin_access=True),)), (D, NODE, "gpu-1"), None)
    assert view is not None
    assert view.observer


def test_consumable_capacity_share_is_an_allocation_share() -> None:
    share = result(share_id="s-1", consumed=(("memory", "20Gi"),))
    other = result(share_id="s-2", consumed=(("memory", "40Gi"),))
    c = claim((share, other))
    device = MAP[D, NODE, "gpu-1"]
    one = claim_view(c, (D, NODE, "gpu-1"), device, share_id="s-1")
    two = claim_view(c, (D, NODE, "gpu-1"), device, share_id="s-2")
    assert one is not None
    assert two is not None
    assert (one.share_id, one.allocation_share) == ("s-1", 0.25)
    assert (two.share_id, two.allocation_share) == ("s-2", 0.5)
    unreadable = claim((result(share_id="s-3", consumed=(("memory", "a lot"),)),))
    view = claim_view(unreadable, (D, NODE, "gpu-1"), device)
    assert view is not None
    assert view.allocation_share is None


def test_a_claim_that_did_not_allocate_the_device_says_nothing() -> None:
    assert claim_view(claim((result("gpu-0"),)), (D, NODE, "gpu-1"), None) is None
    assert claim_view(claim((result(share_id="s-1"),)), (D, NODE, "gpu-1"), None, "s-9") is None


def test_placed_keys_are_every_placeable_device_of_the_slices() -> None:
    assert placed_keys(MAP, INVENTORY) == {GPU1, f"{GPU0}/gi7"}
