"""Table values: the worker's state, serialized by the same codec as the topics.

Changelog topics carry these as versioned JSON, readable by anyone debugging a table.
"""

from __future__ import annotations

from streams.alerts import DeviceAlerts
from streams.holders import NodeDevices, SlotHolders
from streams.identity import Inventory
from streams.pods import NodePods, PodNames

#: State kinds kept in changelog-backed tables (see :mod:`gpuattr.codec`).
KINDS: dict[str, tuple[type, int]] = {
    "state.slot_holders": (SlotHolders, 1),
    "state.node_devices": (NodeDevices, 1),
    "state.inventory": (Inventory, 1),
    "state.pod_names": (PodNames, 1),
    "state.node_pods": (NodePods, 1),
    "state.device_alerts": (DeviceAlerts, 1),
}
