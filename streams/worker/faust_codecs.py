"""Faust serializers backed by our codec, so tables and changelogs hold our versioned records."""

from __future__ import annotations

from typing import Any

import faust
from faust.serializers import codecs
from faust.stores.memory import Store as MemoryStore

from streams.core.flow.state import TABLE_CODEC

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

    # Reads and writes go straight to the memory store's dict (the worker's store is
    # ``memory://``): Faust's path through its managed mapping, the store wrapper and a sensor
    # call per read cost more than the lookup (about 19 reads per GPU sample). Writes still send
    # their changelog record first (on_key_set / on_key_del). Another store: Faust's own path.

    def _dict(self) -> Any:
        fast = self.__dict__.get("_fast_dict")
        if fast is None:
            store = self.data
            fast = store.data if isinstance(store, MemoryStore) else False
            self.__dict__["_fast_dict"] = fast
        return fast

    def get(self, key: Any, default: Any = None) -> Any:
        d = self._dict()
        return d.get(key, default) if d is not False else super().get(key, default)

    def __contains__(self, key: Any) -> bool:
        d = self._dict()
        return key in d if d is not False else super().__contains__(key)

    def __getitem__(self, key: Any) -> Any:
        d = self._dict()
        if d is False:
            return super().__getitem__(key)
        try:
            return d[key]
        except KeyError:
            return self.__missing__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        d = self._dict()
        if d is False:
            super().__setitem__(key, value)
            return
        self.on_key_set(key, value)
        d[key] = value

    def __delitem__(self, key: Any) -> None:
        d = self._dict()
        if d is False:
            super().__delitem__(key)
            return
        if key not in d:
            raise KeyError(key)
        self.on_key_del(key)
        del d[key]

    def _outbox(self) -> Any:
        outbox = getattr(self.app, "outbox", None)
        if outbox is None:
            raise RuntimeError(f"table {self.name}: the app has no outbox to write changelogs to")
        return outbox
