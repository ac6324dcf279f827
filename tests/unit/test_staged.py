"""A record's writes are staged: reads see them, the tables get only what changed, together."""

from __future__ import annotations

from dataclasses import fields

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contract.inputs import DeviceAssignment as A
from contract.inputs import PodResourcesSnapshot
from streams.core.flow.processor import Processor, Tables
from streams.core.flow.staged import Stage, Staged

G0 = "GPU-aaaa"


class Counting(dict[str, object]):
    """A table that counts its changelog records (every assignment and deletion)."""

    def __init__(self) -> None:
        super().__init__()
        self.records = 0

    def __setitem__(self, key: str, value: object) -> None:
        self.records += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.records += 1
        super().__delitem__(key)


KEYS = st.sampled_from(["a", "b", "c", "d"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, st.integers(0, 2)),
        st.tuples(st.just("del"), KEYS, st.just(0)),
    ),
    max_size=20,
)


@given(before=st.dictionaries(KEYS, st.integers(0, 2)), ops=OPS, keep=st.booleans())
def test_a_staged_view_reads_as_the_table_would_and_writes_back_only_what_changed(
    before: dict[str, int], ops: list[tuple[str, str, int]], keep: bool
) -> None:
    base = Counting()
    base.update(before)
    dirty: list[Staged[object]] = []
    view: Staged[object] = Staged(base, dirty)
    model: dict[str, object] = dict(before)
    for op, key, value in ops:
        if op == "set":
            view[key] = value
            model[key] = value
        elif key in model:
            del view[key]
            del model[key]
        else:
            with pytest.raises(KeyError):
                del view[key]
        assert dict(view) == model
        assert len(view) == len(model)
        assert all(view.get(k) == model.get(k) and (k in view) == (k in model) for k in "abcd")
    assert dict(base) == before  # nothing reaches the table before the commit
    if not keep:
        for v in dirty:
            v.discard()
        assert dict(base) == before
        assert dict(view) == before
        return
    written = sum(v.commit() for v in dirty)
    assert dict(base) == model
    changed = {k for k in before.keys() | model.keys() if before.get(k) != model.get(k)}
    assert written == base.records == len(changed)  # an equal value written back costs nothing
    assert dict(view) == model  # the view reads the table again


def processor() -> tuple[Processor, Tables]:
    tables = Tables(**{f.name: Counting() for f in fields(Tables)})  # type: ignore[arg-type]
    return Processor(tables), tables


def snapshot(tables: Tables) -> dict[str, dict[str, object]]:
    return {f.name: dict(getattr(tables, f.name)) for f in fields(tables)}


def test_a_record_whose_pass_fails_part_way_leaves_the_tables_as_they_were() -> None:
    proc, tables = processor()
    proc.handle(PodResourcesSnapshot("n1", 100, (A("ml", "a", "c", "nvidia.com/gpu", G0),)))
    before = snapshot(tables)

    def broken(*args: object, **kwargs: object) -> list[object]:
        raise RuntimeError("a defect after the record's first writes")

    proc.spine.sync = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        proc.handle(PodResourcesSnapshot("n1", 200, (A("ml", "b", "c", "nvidia.com/gpu", G0),)))
    assert snapshot(tables) == before
    assert all(not v.writes for v in proc._stage.views.values())


def test_a_record_writes_each_key_it_changed_once() -> None:
    proc, tables = processor()
    proc.handle(PodResourcesSnapshot("n1", 100, (A("ml", "a", "c", "nvidia.com/gpu", G0),)))
    counts = {f.name: getattr(tables, f.name).records for f in fields(tables)}
    # the first record of a node moves its state several times (heard, its devices, ...)
    assert counts["node_state"] == 1
    assert counts["partition_nodes"] == 1
    before = snapshot(tables)
    written = {f.name: getattr(tables, f.name).records for f in fields(tables)}
    proc.handle(PodResourcesSnapshot("n1", 100, (A("ml", "a", "c", "nvidia.com/gpu", G0),)))
    # the same record again changes nothing: no changelog record at all
    assert snapshot(tables) == before
    assert {f.name: getattr(tables, f.name).records for f in fields(tables)} == written


def test_the_stage_lists_what_a_record_wrote_before_and_after() -> None:
    tables = Tables.in_memory()
    tables.alert_state["n1/x"] = 1  # type: ignore[assignment]
    stage = Stage(tables)
    stage.tables.alert_state["n1/x"] = 2  # type: ignore[assignment]
    stage.tables.alert_state["n1/y"] = 3  # type: ignore[assignment]
    assert sorted(stage.changes("alert_state")) == [("n1/x", 1, 2), ("n1/y", None, 3)]
    assert stage.commit() == 2
    assert list(stage.changes("alert_state")) == []
