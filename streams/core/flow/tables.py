"""The worker's tables: what each holds (their keys are made by :mod:`streams.core.keys`).

Tables are plain ``MutableMapping`` objects here — Faust tables in the worker, dicts in tests —
and every new value is *assigned* back (Faust persists to the changelog only on assignment).
Every key starts with the node, the key of the input topic, so all state for a node lives in the
partition its records arrive on; ``partition-nodes``, ``cluster-policies`` and
``device-taint-rules`` are keyed by that partition.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, fields

from contract.inputs import NodeRecord, OperandPods, ResourceClaimRecord
from streams.core.alerts.alerts import DeviceAlerts
from streams.core.demand.supply import NodeSupplyState
from streams.core.devices.dra import NodeSlices
from streams.core.devices.holders import NodeDevices, SlotHolders
from streams.core.devices.identity import Inventory
from streams.core.devices.taintrules import PartitionTaintRules
from streams.core.node.nodestate import NodeState, PartitionNodes
from streams.core.node.pods import NodePods, PodNames
from streams.core.stack.nodestack import NodeStack, PartitionPolicies


@dataclass
class Tables:
    """The worker's state; every key starts with the node (see docs/ARCHITECTURE.md)."""

    slot_holders: MutableMapping[str, SlotHolders]  # node/base-device-id
    node_devices: MutableMapping[str, NodeDevices]  # node
    inventories: MutableMapping[str, Inventory]  # node
    pods: MutableMapping[str, PodNames]  # node/namespace/name
    node_pods: MutableMapping[str, NodePods]  # node
    nodes: MutableMapping[str, NodeRecord]  # node
    alert_state: MutableMapping[str, DeviceAlerts]  # node/device-uuid
    dra_slices: MutableMapping[str, NodeSlices]  # node
    dra_claims: MutableMapping[str, ResourceClaimRecord]  # node/namespace/name
    node_state: MutableMapping[str, NodeState]  # node
    partition_nodes: MutableMapping[str, PartitionNodes]  # input partition number
    operand_pods: MutableMapping[str, OperandPods]  # node
    node_stack: MutableMapping[str, NodeStack]  # node
    cluster_policies: MutableMapping[str, PartitionPolicies]  # input partition number
    node_supply: MutableMapping[str, NodeSupplyState]  # node
    device_taint_rules: MutableMapping[str, PartitionTaintRules]  # input partition number

    @classmethod
    def in_memory(cls) -> Tables:
        """Plain dicts: the processor without Faust (tests, the soak benchmark, tools)."""
        return cls(**{f.name: {} for f in fields(cls)})

    def sizes(self) -> dict[str, int]:
        return {f.name: len(getattr(self, f.name)) for f in fields(self)}
