"""Slot holders rebuilt from snapshots and diffs, with as-of lookups."""

from __future__ import annotations

import pytest

from contract.inputs import DeviceAssignment as A
from contract.inputs import PodResourcesDiff, PodResourcesSnapshot
from contract.records import replace
from streams.core.devices.holders import apply_podresources
from streams.core.devices.identity import Inventory, MigDevice
from streams.core.lifetimes import HISTORY_MS

G0, G1 = "GPU-aaaa", "GPU-bbbb"
P1 = A("ml", "train-1", "c", "nvidia.com/gpu", G0)
P2 = A("ml", "train-2", "c", "nvidia.com/gpu", G1)
P3 = A("ml", "train-3", "c", "nvidia.com/gpu", G1)


def test_snapshot_builds_holders_and_index() -> None:
    index, changed = apply_podresources(None, {}, PodResourcesSnapshot("n", 100, (P1, P2)))
    assert set(changed) == {G0, G1}
    assert changed[G0].assignments == (P1,)
    assert index.keys == {G0: (G0,), G1: (G1,)}


def test_diff_replaces_holder_and_keeps_history_for_as_of() -> None:
    index, h = apply_podresources(None, {}, PodResourcesSnapshot("n", 100, (P1, P2)))
    index, changed = apply_podresources(
        index, h, PodResourcesDiff("n", 200, added=(P3,), removed=(P2,))
    )
    assert set(changed) == {G1}
    g1 = changed[G1]
    assert g1.at(250) == (P3,)
    assert g1.at(150) == (P2,)  # a late sample from before the hand-over joins the old holder
    assert g1.since_ms == 200


def test_snapshot_clears_devices_it_no_longer_lists() -> None:
    index, h = apply_podresources(None, {}, PodResourcesSnapshot("n", 100, (P1, P2)))
    index, changed = apply_podresources(index, h, PodResourcesSnapshot("n", 200, (P1,)))
    assert set(changed) == {G1}
    assert changed[G1].assignments == ()
    assert G1 in index.bases  # kept while its history is useful for late samples


def test_unchanged_snapshot_changes_nothing() -> None:
    index, h = apply_podresources(None, {}, PodResourcesSnapshot("n", 100, (P1,)))
    _, changed = apply_podresources(index, h, PodResourcesSnapshot("n", 200, (P1,)))
    assert changed == {}


def test_replicas_of_one_gpu_share_one_base() -> None:
    r0 = A("ml", "a", "c", "nvidia.com/gpu", f"{G0}::0")
    r1 = A("ml", "b", "c", "nvidia.com/gpu", f"{G0}::1")
    r2 = A("ml", "b", "c", "nvidia.com/gpu", f"{G0}::2")
    _, changed = apply_podresources(None, {}, PodResourcesSnapshot("n", 1, (r0, r1, r2)))
    assert list(changed) == [G0]
    assert changed[G0].assignments == (r0, r1, r2)


def test_mig_devices_index_once_inventory_known() -> None:
    mig = A("ml", "a", "c", "nvidia.com/mig-1g.10gb", "MIG-xyz")
    index, _ = apply_podresources(None, {}, PodResourcesSnapshot("n", 1, (mig,)))
    assert index.unresolved == ("MIG-xyz",)
    inv = Inventory({0: G0}, {"MIG-xyz": MigDevice("MIG-xyz", G0, 2)})
    index, _ = apply_podresources(None, {}, PodResourcesSnapshot("n", 1, (mig,)), inv)
    assert index.keys == {f"{G0}/gi2": ("MIG-xyz",)}


def test_old_empty_devices_leave_the_index() -> None:
    index, h = apply_podresources(None, {}, PodResourcesSnapshot("n", 0, (P1, P2)))
    index, h2 = apply_podresources(index, h, PodResourcesSnapshot("n", 10, (P1,)))
    later = 10 + HISTORY_MS + 1
    index, _ = apply_podresources(index, {**h, **h2}, PodResourcesSnapshot("n", later, (P1,)))
    assert index.bases == (G0,)


# A diff adding a device-plugin ID another pod holds: the kubelet allocates an ID to one pod at a
# time, so the ID moves (the other pod's release is in a record lost or out of order); a
# snapshot of 3 replicas at 100, then the diff at ``ts`` adding ``row``.
REPLICAS = tuple(A("ml", f"r{i}", "c", "nvidia.com/gpu", f"{G0}::{i}") for i in range(3))
DRA_ROW = A("ml", "d1", "c", "dra:gpu.example.com", "pool-0/gpu-0", claim="ml/shared")


@pytest.mark.parametrize(
    ("snapshot", "ts", "row", "held"),
    [
        (REPLICAS, 50, A("ml", "new", "c", "nvidia.com/gpu", f"{G0}::0"), ("new", "r1", "r2")),
        (REPLICAS, 200, A("ml", "new", "c", "nvidia.com/gpu", f"{G0}::0"), ("new", "r1", "r2")),
        (
            REPLICAS,
            200,
            A("ml", "new", "c", "nvidia.com/gpu", f"{G0}::3"),
            ("new", "r0", "r1", "r2"),
        ),
        (
            REPLICAS,
            200,
            A("ml", "r0", "side", "nvidia.com/gpu", f"{G0}::0"),
            ("r0", "r0", "r1", "r2"),
        ),
        ((P1,), 200, A("ml", "new", "c", "nvidia.com/gpu", G0), ("new",)),
        ((DRA_ROW,), 200, replace(DRA_ROW, pod="d2"), ("d1", "d2")),
    ],
    ids=[
        "older-diff-takes-a-replica",
        "diff-whose-release-was-lost",
        "another-replica-shares-the-gpu",
        "same-pod-other-container-keeps-it",
        "whole-gpu-moves",
        "dra-device-held-by-two-pods-of-one-claim",
    ],
)
def test_diff_adding_a_held_device_id_moves_it(
    snapshot: tuple[A, ...], ts: int, row: A, held: tuple[str, ...]
) -> None:
    index, h = apply_podresources(None, {}, PodResourcesSnapshot("n", 100, snapshot))
    _, changed = apply_podresources(index, h, PodResourcesDiff("n", ts, added=(row,), removed=()))
    (holders,) = changed.values()
    assert tuple(a.pod for a in holders.assignments) == held
