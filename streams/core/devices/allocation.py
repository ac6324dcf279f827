"""The two allocation paths, and the one test of which a device is on. Pure.

A device reaches a pod through a *device plugin* (``DeviceAssignment.resource`` an extended
resource such as ``nvidia.com/gpu``, ``device_id`` the plugin's ID, ``::n`` for a replica) or
through *DRA* (``resource`` ``dra:<driver>``, ``device_id`` ``<pool>/<device>``, and a claim).
A DRA device is named by all three (``dra:<driver>/<pool>/<device>``), as its base and, while no
ResourceSlice places it, as its device key; what a pending pod asks for through DRA is
``dra:<device class>``. Every ``dra:`` name is tested here.
"""

from __future__ import annotations

from collections.abc import Iterable

from contract.inputs import DRA_PREFIX, DeviceAssignment


def via_dra(name: str) -> bool:
    """A resource, base or device key of the DRA path (``dra:…``)."""
    return name.startswith(DRA_PREFIX)


def dra_name(name: str) -> str | None:
    """What follows ``dra:`` (a driver, a device class, ``<driver>/<pool>/<device>``);
    ``None`` for a name of the device-plugin path."""
    return name.removeprefix(DRA_PREFIX) if via_dra(name) else None


def dra_resource(name: str) -> str:
    """The DRA resource of a driver or device class."""
    return DRA_PREFIX + name


def through_dra(rows: Iterable[DeviceAssignment]) -> bool:
    """Some row holds its device through DRA."""
    return any(via_dra(a.resource) for a in rows)


def dra_base(a: DeviceAssignment) -> str:
    """A DRA row's base device: ``dra:<driver>/<pool>/<device>``."""
    return f"{a.resource}/{a.device_id}"
