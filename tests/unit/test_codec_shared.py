"""The table codec's shared records: a state that keeps the records it emitted is written with
each shared record's JSON made once and spliced in — byte for byte what a plain encode writes,
for every value a real stream writes, and read back the same."""

from __future__ import annotations

from typing import Any

from bench.fleet import stream
from contract import codec, inputs
from contract.codec import SHARED_KEPT, Codec
from contract.inputs import NodeSupply
from contract.outputs import Pool
from contract.records import replace
from infra.settings import AlertSettings
from streams.core.demand import demand
from streams.core.flow.demandstage import DemandStage, DemandTables, Emission, ResourceDemand
from streams.core.flow.processor import Processor, Tables
from streams.core.flow.state import KINDS, TABLE_CODEC

PLAIN = Codec(inputs.KINDS, KINDS)


class Recording(dict[str, Any]):
    """A table that keeps every value written to it."""

    def __init__(self, written: list[object]) -> None:
        super().__init__()
        self.written = written

    def __setitem__(self, key: str, value: Any) -> None:
        self.written.append(value)
        super().__setitem__(key, value)


def test_every_value_a_churning_fleet_writes_encodes_as_a_plain_encode() -> None:
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
    kinds = {type(v).__name__ for v in written}
    assert {"ResourceDemand", "NodeSupplyState"} <= kinds
    for value in written:
        encoded = TABLE_CODEC.encode(value)
        assert encoded == PLAIN.encode(value)
        assert TABLE_CODEC.decode(encoded) == value


def test_a_shared_record_is_encoded_by_its_own_content_past_the_memo_bound() -> None:
    supply = NodeSupply(1, "n1", "nvidia.com/gpu", ())
    record = demand.pool_demand(Pool("nvidia.com/gpu"), [], [supply], 5)
    values = [
        ResourceDemand(pools=(replace(record, ts_ms=i),), emitted=(Emission(i, "x", (record,)),))
        for i in range(SHARED_KEPT + 5)
    ]
    for value in values + values[:3]:  # the first ones fell out of the memo: made again
        assert TABLE_CODEC.encode(value) == PLAIN.encode(value)
