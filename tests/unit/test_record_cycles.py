"""No record is part of a reference cycle.

Records are Structs the cyclic garbage collector does not track (``contract.records.Record``:
``gc=False``), which is what makes them cheap to keep by the hundred thousand. The price: a cycle
through a record would never be collected. Records are frozen and built from values that exist
before them, so a cycle needs a container inside a record to be changed afterwards to reach it.
This walks everything a worker keeps after the bench fleet (every sharing mode, MIG, pods
replaced, nodes' supply and demand) — tables, memos, the live view — and fails on any cycle that
passes through a record.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import MappingProxyType

from bench.fleet import stream
from contract import codec
from contract.inputs import NodeSupply, pool_resource
from contract.outputs import AttributionEvent
from contract.records import Record, field_names, is_record
from contract.topics import DEMAND_TABLES, TABLES
from infra.settings import AlertSettings, WorkerSettings
from streams.core.flow.demandstage import DemandStage, DemandTables
from streams.core.flow.processor import Processor, Tables
from streams.worker.live import LiveDevices


def _children(obj: object) -> Iterator[object]:
    if is_record(obj):  # Structs and the dataclasses holding them (memo frames)
        for name in field_names(type(obj)):
            yield getattr(obj, name)
    elif isinstance(obj, dict | MappingProxyType):
        yield from obj.keys()
        yield from obj.values()
    elif isinstance(obj, tuple | list | set | frozenset):
        yield from obj


def cycles_through_records(root: object, walked: list[int] | None = None) -> list[list[str]]:
    """Every cycle found below ``root`` that passes through a record (by type names);
    ``walked`` counts the records walked."""
    found: list[list[str]] = []
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    path: list[object] = []
    stack: list[tuple[object, Iterator[object]]] = [(root, _children(root))]
    state[id(root)] = 1
    path.append(root)
    while stack:
        obj, kids = stack[-1]
        child = next(kids, None)
        if child is None:
            stack.pop()
            path.pop()
            state[id(obj)] = 2
            continue
        if isinstance(child, str | int | float | bool | bytes) or child is None:
            continue
        seen = state.get(id(child))
        if seen == 1:
            cycle = path[next(i for i, o in enumerate(path) if o is child) :]
            if any(isinstance(o, Record) for o in cycle):
                found.append([type(o).__name__ for o in cycle])
        elif seen is None:
            if walked is not None and isinstance(child, Record):
                walked[0] += 1
            state[id(child)] = 1
            path.append(child)
            stack.append((child, _children(child)))
    return found


def test_nothing_a_worker_keeps_reaches_a_record_again_through_itself() -> None:
    alerts = AlertSettings.model_construct(idle_window_s=20)
    tables = Tables.in_memory()
    proc = Processor(tables, alerts)
    stage = DemandStage(
        DemandTables(**{f: {} for f in DEMAND_TABLES}),  # type: ignore[arg-type]
        20,
        WorkerSettings.model_construct().demand_supply_every_s,
    )
    live = LiveDevices()
    records = 0
    for record in stream(12, 8, start_ms=1_700_000_000_000, churn_every=2):
        for out in proc.handle(codec.decode(codec.encode(record))):
            records += 1
            if isinstance(out, AttributionEvent):
                live.update(0, out)
            elif isinstance(out, NodeSupply):
                stage.handle(out, 0, pool_resource(out.resource).encode())
    roots = {
        **{name: getattr(tables, name) for name in TABLES},
        **{name: getattr(stage.tables, name) for name in DEMAND_TABLES},
        "frames": proc.spine.joins.frames._frames,
        "supplied": proc.supplied._nodes,
        "live": live._latest,
    }
    walked = [0]
    cycles = {name: cycles_through_records(root, walked) for name, root in roots.items()}
    assert records > 1000
    assert walked[0] > 2000  # the walk had something to walk
    assert cycles == {name: [] for name in roots}


def test_the_walk_finds_a_cycle_through_a_record() -> None:
    class Box(Record, frozen=True):
        items: list[object]

    box = Box([])
    box.items.append({"again": box})
    assert cycles_through_records({"k": box}) == [["Box", "list", "dict"]]
