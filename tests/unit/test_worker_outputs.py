"""Where the worker writes each output: its key and value (streams/worker/app.py)."""

from __future__ import annotations

from contract import codec
from contract.inputs import NodeSupply, SupplyDevice
from contract.outputs import MigReconcile, NodeStatus, NodeStatusRetired, TelemetryRefused
from streams.worker.app import output_key, output_value

STATUS = NodeStatus(
    "gpu-a", 5, "unknown", "s", (), MigReconcile(None, None, None, None, "no MIG configuration")
)


def test_a_node_status_is_keyed_by_its_node_and_retired_by_a_tombstone() -> None:
    assert output_key(STATUS) == b"gpu-a"
    assert codec.decode(output_value(STATUS) or b"") == STATUS
    assert output_key(NodeStatusRetired("gpu-a")) == b"gpu-a"
    assert output_value(NodeStatusRetired("gpu-a")) is None  # compaction removes the key


def test_a_refused_scrape_is_the_nodes() -> None:
    refused = TelemetryRefused("gpu-a", 1, "hostname", "r", "h", "e", ("GPU-1",), 1)
    assert output_key(refused) == b"gpu-a"


def test_a_nodes_supply_is_keyed_by_its_resource_for_the_demand_stage() -> None:
    supply = NodeSupply(5, "gpu-a", "nvidia.com/gpu.shared", (SupplyDevice("GPU-1", slots=2),))
    assert output_key(supply) == b"nvidia.com/gpu.shared"  # the demand-events key
    assert codec.decode(output_value(supply) or b"") == supply
