"""The worker's table: on the memory store, reads and writes go straight to the store's dict;
every write and delete sends its changelog record to the app's outbox first, encoded in the
table codec, to the partition of the event being processed."""

from __future__ import annotations

from typing import Any

import pytest

from contract.inputs import NodeRecord
from streams.core.flow.state import TABLE_CODEC
from streams.worker.faust_codecs import RecordTable, register
from streams.worker.transport import App


class Outbox:
    def __init__(self) -> None:
        self.added: list[tuple[str, bytes | None, bytes | None, int | None]] = []

    def add(
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None
    ) -> None:
        self.added.append((topic, key, value, partition))


@pytest.fixture
def table() -> Any:
    register()
    app = App("rt-test", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    app.outbox = Outbox()
    t = app.tables.add(RecordTable(app, name="nodes", key_type=str, partitions=4))
    t.partition_for_key = lambda key: 3  # the partition of the event being processed
    return t


def test_writes_send_their_changelog_record_and_reads_see_them(table: Any) -> None:
    record = NodeRecord("n1", 5, (("a", "b"),))
    assert table.get("n1") is None
    assert "n1" not in table
    table["n1"] = record
    assert table.get("n1") is record
    assert table["n1"] is record
    assert "n1" in table
    assert len(table) == 1
    assert dict(table.items()) == {"n1": record}
    del table["n1"]
    assert table.get("n1", "gone") == "gone"
    with pytest.raises(KeyError):
        table["n1"]
    with pytest.raises(KeyError):  # nothing to delete: no tombstone sent
        del table["n1"]
    name = table.changelog_topic_name
    assert table.app.outbox.added == [
        (name, b"n1", TABLE_CODEC.encode(record), 3),
        (name, b"n1", None, 3),
    ]


def test_the_fast_path_is_the_memory_stores_own_dict(table: Any) -> None:
    table["n2"] = NodeRecord("n2", 1, ())
    assert table.data.data == {"n2": NodeRecord("n2", 1, ())}
    table.data.data.clear()  # what recovery's clear does: the same dict, emptied
    assert table.get("n2") is None
