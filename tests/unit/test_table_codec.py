"""The table codec on what a worker really writes: every value a churning fleet's pass and demand
stage write to their tables reads back equal, and is written exactly as the wire codec would write
the same record (one encoder for every record, nested or not)."""

from __future__ import annotations

from typing import Any

from bench.fleet import stream
from contract import codec
from contract.inputs import NodeSupply
from infra.settings import AlertSettings
from streams.core.flow.demandstage import DemandStage, DemandTables
from streams.core.flow.processor import Processor, Tables
from streams.core.flow.state import TABLE_CODEC


class Recording(dict[str, Any]):
    """A table that keeps every value written to it."""

    def __init__(self, written: list[object]) -> None:
        super().__init__()
        self.written = written

    def __setitem__(self, key: str, value: Any) -> None:
        self.written.append(value)
        super().__setitem__(key, value)


def written_by_a_churning_fleet() -> list[object]:
    written: list[object] = []
    tables = Tables(**{f: Recording(written) for f in Tables.__dataclass_fields__})
    stage_tables = DemandTables(
        **{f: Recording(written) for f in DemandTables.__dataclass_fields__}
    )
    processor = Processor(tables, AlertSettings.model_construct(idle_window_s=20))
    stage = DemandStage(stage_tables, 20.0)
    for record in stream(24, 8, start_ms=1_700_000_000_000, churn_every=2, switch=0.3):
        for out in processor.handle(codec.decode(codec.encode(record))):
            if isinstance(out, NodeSupply):
                stage.handle(out, 0, out.resource.encode())
    return written


def test_every_value_a_churning_fleet_writes_reads_back_equal() -> None:
    written = written_by_a_churning_fleet()
    kinds = {type(v).__name__ for v in written}
    # the states that keep the records they emitted, nested three deep, are among them
    assert {"ResourceDemand", "NodeSupplyState", "DeviceAlerts", "SlotHolders"} <= kinds
    for value in written:
        assert TABLE_CODEC.decode(TABLE_CODEC.encode(value)) == value


def test_a_nested_record_is_written_as_the_wire_writes_it_alone() -> None:
    """A state's emitted records are spliced from nothing: the bytes of a ``pool.supply`` inside
    a node's supply state are the wire's bytes of that record, envelope aside."""
    for value in written_by_a_churning_fleet():
        for supply in getattr(value, "current", ()):
            assert isinstance(supply, NodeSupply)
            alone = codec.encode(supply)
            body = alone[alone.index(b',"ts_ms"') + 1 :]
            assert b"{" + body in TABLE_CODEC.encode(value)
