"""diff_assignments: what changed between two PodResources polls."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.podresources.diff import diff_assignments
from contract.inputs import DeviceAssignment

A = DeviceAssignment("ml", "a", "main", "nvidia.com/gpu", "GPU-aaaa")
B = DeviceAssignment("ml", "b", "main", "nvidia.com/gpu", "GPU-bbbb")
C = DeviceAssignment("dev", "c", "main", "nvidia.com/gpu.shared", "GPU-cccc::1")
# Same device, another pod: a reassignment is one removal and one addition.
A_MOVED = DeviceAssignment("ml", "a2", "main", "nvidia.com/gpu", "GPU-aaaa")

CASES = [
    pytest.param(None, set(), (), (), id="first-poll-empty"),
    pytest.param(None, {B, A}, (A, B), (), id="first-poll-everything-added"),
    pytest.param(set(), {A}, (A,), (), id="empty-then-one"),
    pytest.param({A, B}, {A, B}, (), (), id="unchanged"),
    pytest.param({A}, {A, B}, (B,), (), id="added"),
    pytest.param({A, B}, {B}, (), (A,), id="removed"),
    pytest.param({A, B}, set(), (), (A, B), id="all-gone"),
    pytest.param({A, B}, {A_MOVED, B, C}, (C, A_MOVED), (A,), id="moved-and-added-sorted"),
]


@pytest.mark.parametrize(("previous", "current", "added", "removed"), CASES)
def test_diff(
    previous: set[DeviceAssignment] | None,
    current: set[DeviceAssignment],
    added: tuple[DeviceAssignment, ...],
    removed: tuple[DeviceAssignment, ...],
) -> None:
    before = None if previous is None else frozenset(previous)
    assert diff_assignments(before, frozenset(current)) == (added, removed)


rows = st.frozensets(
    st.builds(
        DeviceAssignment,
        st.sampled_from(["ml", "dev"]),
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["main", "sidecar"]),
        st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu.shared", "dra:gpu.nvidia.com"]),
        st.sampled_from(["GPU-a", "GPU-a::1", "GPU-a::2", "MIG-c", "nvidia0", "node/gpu-0"]),
    ),
    max_size=10,
)


@given(st.none() | rows, rows)
def test_applying_the_diff_to_previous_gives_current(
    previous: frozenset[DeviceAssignment] | None, current: frozenset[DeviceAssignment]
) -> None:
    added, removed = diff_assignments(previous, current)
    before = previous or frozenset()
    assert (before - set(removed)) | set(added) == current
    assert set(removed) <= before
    assert not set(added) & before
    assert list(added) == sorted(set(added))
    assert list(removed) == sorted(set(removed))
