"""One copy of each string a decoded record carries, for the records whose parts the worker keeps.

A JSON decoder makes a new ``str`` for every string it reads. The worker keeps parts of what it
decodes (a pod's names and owner in the pod watch, a snapshot's assignments in the slot holders,
a node's labels, its inventory) and builds its joins from them, so a namespace, a container
name, a resource name, an owner kind or a GPU model sat in memory once per record that carried
it: at 2,744 devices 70,344 decoded strings (4.4 MiB) held 11,960 distinct values (0.9 MiB)
(bench.run). :func:`interner` gives a record type the function that
rebuilds a decoded record with every string in it (fields, tuples, dicts, nested records)
replaced by the interpreter's interned copy (:func:`sys.intern`): one object per distinct value
while anything holds it. An interned string nothing holds is freed, so this keeps nothing alive.

The plan per type is made once, from its type hints: a part that can hold no string is passed
as it is, a string costs one lookup. The rebuilt record equals the decoded one (same type, equal
fields); only the objects' identities differ. A type whose hints this cannot follow is refused
when its codec is built (at import), never at a record.
"""

from __future__ import annotations

import collections.abc
import inspect
import sys
import types
import typing
from collections.abc import Callable
from typing import Any

from contract.records import field_types, is_record_type

Intern = Callable[[Any], Any]

_PLANS: dict[type[Any], Intern | None] = {}
_MAKING: set[type[Any]] = set()
_SCALARS = (int, float, bool, type(None), bytes)


def interner(cls: type[Any]) -> Intern | None:
    """The function that rebuilds a ``cls`` record with interned strings, or ``None`` when a
    ``cls`` can hold no string (nothing to do)."""
    if cls in _PLANS:
        return _PLANS[cls]
    if cls in _MAKING:
        raise TypeError(f"interning: {cls.__name__} contains itself")
    _MAKING.add(cls)
    try:
        plan = _PLANS[cls] = _record_plan(cls)
    finally:
        _MAKING.discard(cls)
    return plan


def _record_plan(cls: type[Any]) -> Intern | None:
    if not is_record_type(cls):
        raise TypeError(f"interning: {cls.__name__} is not a record type")
    hints = field_types(cls)
    params = inspect.signature(cls).parameters.values()
    positional = [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    if positional != list(hints):  # the rebuild passes every field in order
        raise TypeError(f"interning: {cls.__name__} has keyword-only or non-init fields")
    steps = [(name, _plan(hint)) for name, hint in hints.items()]
    if all(step is None for _, step in steps):
        return None
    # generated once per type (as contract.records.fast_init does): each field read by name and
    # passed on, or through its step, in one call of the class — no loop, no getattr per field
    scope: dict[str, Any] = {"cls": cls}
    parts = []
    for i, (name, step) in enumerate(steps):
        if step is None:
            parts.append(f"r.{name}")
        else:
            scope[f"s{i}"] = step
            parts.append(f"s{i}(r.{name})")
    source = f"def rebuild(r):\n    return cls({', '.join(parts)})\n"
    exec(compile(source, f"<interning {cls.__name__}>", "exec"), scope)
    rebuild: Intern = scope["rebuild"]
    return rebuild


def _plan(hint: Any) -> Intern | None:
    """How to intern the strings in a value of type ``hint`` (``None``: it holds none)."""
    if hint is str:
        return sys.intern
    if hint in _SCALARS:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return _str_or_same if any(isinstance(a, str) for a in args) else None
    if origin is typing.Union or origin is types.UnionType:
        return _union(args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _each(_plan(args[0]), tuple)
        parts = tuple(_plan(a) for a in args)
        if all(p is None for p in parts):
            return None
        return lambda v: tuple([x if p is None else p(x) for p, x in zip(parts, v, strict=True)])
    if origin is frozenset:
        return _each(_plan(args[0]), frozenset)
    if origin is dict or origin is collections.abc.Mapping:  # both decoded as a dict
        key, value = _plan(args[0]) or _same, _plan(args[1]) or _same
        if key is _same and value is _same:
            return None
        return lambda v: {key(a): value(b) for a, b in v.items()}
    if is_record_type(hint):
        return interner(hint)
    raise TypeError(f"interning: no plan for {hint!r}")


def _each(item: Intern | None, kind: Callable[[list[Any]], Any]) -> Intern | None:
    """A homogeneous collection: each item through ``item``, rebuilt as ``kind``."""
    if item is None:
        return None
    step: Intern = item
    return lambda v: kind([step(x) for x in v])


def _same(v: Any) -> Any:
    return v


def _str_or_same(v: Any) -> Any:
    return sys.intern(v) if type(v) is str else v


def _union(args: tuple[Any, ...]) -> Intern | None:
    """A union: by the value's own type (``None`` and scalars pass as they are)."""
    by_type: dict[Any, Intern | None] = {}
    for a in args:
        base = typing.get_origin(a) or a
        member: Intern | None
        if base is typing.Literal or base is str:
            base, member = str, _str_or_same
        else:
            member = _plan(a)
        if base in by_type and by_type[base] is not member:
            raise TypeError(f"interning: two members of {args!r} share the type {base!r}")
        by_type[base] = member
    if all(s is None for s in by_type.values()):
        return None
    if len(by_type) == 2 and type(None) in by_type:  # Optional[X]: the common case
        (only,) = (s for t, s in by_type.items() if t is not type(None))
        if only is None:
            return None
        one: Intern = only
        return lambda v: None if v is None else one(v)

    def step(v: Any) -> Any:
        s = by_type.get(type(v))
        return v if s is None else s(v)

    return step
