"""What changed between two PodResources polls. Pure."""

from __future__ import annotations

from contract.inputs import DeviceAssignment


def diff_assignments(
    previous: frozenset[DeviceAssignment] | None, current: frozenset[DeviceAssignment]
) -> tuple[tuple[DeviceAssignment, ...], tuple[DeviceAssignment, ...]]:
    """``(added, removed)``, each sorted; with no previous poll everything is added."""
    before = previous or frozenset()
    return tuple(sorted(current - before)), tuple(sorted(before - current))
