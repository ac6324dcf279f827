"""Table values: the worker's state, serialized like every topic (:mod:`contract.codec`).

Changelog topics carry these as versioned JSON, readable by anyone debugging a table.
"""

from __future__ import annotations

from contract import inputs
from contract.codec import Codec
from streams.core.alerts.alerts import DeviceAlerts
from streams.core.demand.demand import Waiter
from streams.core.demand.supply import NodeSupplyState
from streams.core.devices.dra import NodeSlices
from streams.core.devices.holders import NodeDevices, SlotHolders
from streams.core.devices.identity import Inventory
from streams.core.devices.taintrules import PartitionTaintRules
from streams.core.flow.demandstage import PartitionResources, ResourceDemand
from streams.core.node.nodestate import NodeState, PartitionNodes
from streams.core.node.pods import NodePods, PodNames
from streams.core.stack.nodestack import NodeStack, PartitionPolicies

#: State kinds kept in changelog-backed tables.
KINDS: dict[str, tuple[type, int]] = {
    "state.slot_holders": (SlotHolders, 1),
    "state.node_devices": (NodeDevices, 1),
    "state.inventory": (Inventory, 1),
    "state.pod_names": (PodNames, 1),
    "state.node_pods": (NodePods, 1),
    "state.device_alerts": (DeviceAlerts, 1),
    "state.node_slices": (NodeSlices, 1),
    "state.node_state": (NodeState, 1),
    "state.partition_nodes": (PartitionNodes, 1),
    "state.node_stack": (NodeStack, 1),
    "state.partition_policies": (PartitionPolicies, 1),
    "state.demand_waiter": (Waiter, 1),
    "state.resource_demand": (ResourceDemand, 1),
    "state.partition_resources": (PartitionResources, 1),
    "state.node_supply": (NodeSupplyState, 1),
    "state.partition_taint_rules": (PartitionTaintRules, 1),
}

#: What the tables hold: these state kinds and the input records kept as they came (nodes,
#: claims, operand pods)
TABLE_CODEC = Codec(
    inputs.KINDS,
    KINDS,
    # what a worker recovers from its changelogs is its whole state: one copy of each string
    interned=(*inputs.KEPT, *(kind[0] for kind in KINDS.values())),
)
