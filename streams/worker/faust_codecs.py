"""Faust serializers backed by our codec, so tables and changelogs hold our versioned records."""

from __future__ import annotations

from typing import Any

import faust
from faust.serializers import codecs

from streams.core.state import TABLE_CODEC

CODEC = "gpuattr"
KEY_CODEC = "gpuattr-key"


class RecordCodec(codecs.Codec):  # type: ignore[misc]
    """Table values: versioned orjson records."""

    def _dumps(self, obj: Any) -> bytes:
        return TABLE_CODEC.encode(obj)

    def _loads(self, s: bytes) -> Any:
        return TABLE_CODEC.decode(s)


class KeyCodec(codecs.Codec):  # type: ignore[misc]
    """Table keys: plain UTF-8 strings (``node/device``), readable on the changelog."""

    def _dumps(self, obj: Any) -> bytes:
        return str(obj).encode()

    def _loads(self, s: bytes) -> Any:
        return s.decode()


def register() -> None:
    codecs.register(CODEC, RecordCodec())
    codecs.register(KEY_CODEC, KeyCodec())


class RecordTable(faust.Table):  # type: ignore[misc]
    """A Faust table whose changelog carries our codec: string keys, versioned record values.

    Faust picks a table's serializers from its key/value *types* (JSON by default) and ignores a
    schema's serializers for the changelog; this makes the choice explicit."""

    def _serializer_from_type(self, typ: Any) -> str:
        return KEY_CODEC if typ is str else CODEC

    # A write goes to the app's outbox (streams.worker.outbox), encoded here, to the partition of
    # the event being processed (co-partitioned with the input, as Faust's own send would): no
    # per-write future or Faust buffer; the outbox drains before every commit. (The memory
    # store keeps no persisted offsets, so Faust's send callback had nothing to record.)

    def on_key_set(self, key: Any, value: Any) -> None:
        self._outbox().add(
            self.changelog_topic_name,
            str(key).encode(),
            TABLE_CODEC.encode(value),
            self._partition(key),
        )

    def on_key_del(self, key: Any) -> None:
        self._outbox().add(self.changelog_topic_name, str(key).encode(), None, self._partition(key))

    def _partition(self, key: Any) -> int | None:
        partition: int | None = self.partition_for_key(key)
        return partition

    def _outbox(self) -> Any:
        outbox = getattr(self.app, "outbox", None)
        if outbox is None:
            raise RuntimeError(f"table {self.name}: the app has no outbox to write changelogs to")
        return outbox
