"""A record's writes, held until its pass is decided: the tables as one record sees them.

The processor decides a record against :class:`Staged` views of the worker's tables. A read
sees the record's own writes; the tables themselves are untouched until :func:`commit`, which
writes back only the keys whose value changed (an equal value written again, or a key written
and restored, costs no changelog record) and deletes the keys that went. A record refused part
way (bad input) or a defect leaves the tables as they were: :func:`discard`.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from dataclasses import fields
from typing import Final, Generic, TypeVar

from streams.core.flow.tables import Tables

V = TypeVar("V")


class _Gone:
    """A key the record deleted."""

    __slots__ = ()


GONE: Final = _Gone()
_ABSENT: Final = object()


class Staged(MutableMapping[str, V], Generic[V]):
    """One table through one record: reads pass through to ``base``, writes wait in ``writes``.

    ``dirty`` is shared by the views of one set of tables: a view joins it on its first write,
    so a commit visits only the tables the record wrote. Until then ``get`` is the table's own
    (most of a record's reads are of tables it does not write)."""

    __slots__ = ("base", "dirty", "get", "writes")

    def __init__(self, base: MutableMapping[str, V], dirty: list[Staged[object]]) -> None:
        self.base = base
        self.writes: dict[str, V | _Gone] = {}
        self.dirty = dirty
        self.get = base.get  # type: ignore[method-assign]  # the fast path: nothing staged

    def _staged_get(self, key: str, default: V | None = None) -> V | None:
        found = self.writes.get(key, _ABSENT)
        if found is _ABSENT:
            return self.base.get(key, default)
        if isinstance(found, _Gone):
            return default
        return found  # type: ignore[return-value]  # neither sentinel: a value

    def __getitem__(self, key: str) -> V:
        found = self.writes.get(key, _ABSENT)
        if found is _ABSENT:
            return self.base[key]
        if isinstance(found, _Gone):
            raise KeyError(key)
        return found  # type: ignore[return-value]  # neither sentinel: a value

    def __contains__(self, key: object) -> bool:
        found = self.writes.get(key, _ABSENT)  # type: ignore[call-overload]
        if found is _ABSENT:
            return key in self.base
        return not isinstance(found, _Gone)

    def _stage(self) -> None:
        """The view's first write in this record."""
        self.dirty.append(self)  # type: ignore[arg-type]  # any view commits alike
        self.get = self._staged_get  # type: ignore[method-assign,assignment]

    def __setitem__(self, key: str, value: V) -> None:
        if not self.writes:
            self._stage()
        self.writes[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        if not self.writes:
            self._stage()
        self.writes[key] = GONE

    def __iter__(self) -> Iterator[str]:
        writes = self.writes
        for key in self.base:
            if not isinstance(writes.get(key), _Gone):
                yield key
        for key, value in writes.items():
            if not isinstance(value, _Gone) and key not in self.base:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self) if self.writes else len(self.base)

    def changes(self) -> Iterator[tuple[str, V | None, V | None]]:
        """Each key the record wrote: its value before the record and now (``None``: absent)."""
        for key, value in self.writes.items():
            yield key, self.base.get(key), None if isinstance(value, _Gone) else value

    def commit(self) -> int:
        """Write back what changed; how many changelog records that took."""
        base = self.base
        written = 0
        for key, value in self.writes.items():
            if isinstance(value, _Gone):
                if key in base:
                    del base[key]
                    written += 1
            elif base.get(key, _ABSENT) != value:  # a sentinel: absent
                base[key] = value
                written += 1
        self.discard()
        return written

    def discard(self) -> None:
        """Forget the staged writes: the view reads the table as it is."""
        self.writes.clear()
        self.get = self.base.get  # type: ignore[method-assign]


class Stage:
    """Staged views of a set of tables (``tables``), committed or discarded per record."""

    def __init__(self, tables: Tables) -> None:
        self._dirty: list[Staged[object]] = []
        self.views: dict[str, Staged[object]] = {
            f.name: Staged(getattr(tables, f.name), self._dirty) for f in fields(tables)
        }
        self.tables = Tables(**self.views)  # type: ignore[arg-type]  # each view its table's

    def changes(self, table: str) -> Iterator[tuple[str, object, object]]:
        """What the record wrote to ``table`` so far (:meth:`Staged.changes`)."""
        return self.views[table].changes()

    def commit(self) -> int:
        """The record's pass is decided: its writes go to the tables; changelog records
        written."""
        written = sum(view.commit() for view in self._dirty)
        self._dirty.clear()
        return written

    def discard(self) -> None:
        """The record's pass did not finish: the tables stay as they were before it."""
        for view in self._dirty:
            view.discard()
        self._dirty.clear()
