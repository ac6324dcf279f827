"""What a record is, and how records are copied with changes.

The contract's records and the pure core's values are :class:`Record` classes, frozen
:class:`msgspec.Struct` types: C code builds, compares, hashes and copies them (about a tenth of
a slotted dataclass's ``__init__``, which was 16 % of the core's bytecodes), and msgspec encodes
and decodes them directly. :func:`replace` copies any record with changes; :func:`field_names`,
:func:`field_types` and :func:`is_record` read a record type the same way whether it is a
Struct or a dataclass. The JSON schemas see them as pydantic sees a dataclass
(:mod:`contract.schemas`).

The presentation rows the query API validates with pydantic stay frozen, slotted dataclasses;
:func:`fast_init` gives them an ``__init__`` with the same signature that sets each field
through its slot's own descriptor (``Cls.field.__set__``, C code, bound once at import) instead of
``object.__setattr__``: about half the time per row. Everything else stays the dataclass's.
Classes using what this ``__init__`` does not reproduce (``default_factory``, ``InitVar``,
``__post_init__``, fields left out of ``__init__``, a field named ``self``) are refused at import,
never built differently.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
D = TypeVar("D", bound="DataclassInstance")
R = TypeVar("R", bound="DataclassInstance | msgspec.Struct")


class Record(msgspec.Struct, frozen=True, gc=False):
    """A record of the contract or a value of the pure core: frozen, built and compared by C
    code, encoded and decoded by msgspec. Not tracked by the cyclic garbage collector
    (``gc=False``): a worker keeps hundreds of thousands of them, and every collection would
    walk them all. A record never reaches itself (it is frozen and made of values older than
    it): ``tests/unit/test_record_cycles.py`` walks what a worker keeps to hold that."""


#: every class given a fast ``__init__``, with the dataclass's own (for the conformance test)
GENERATED: dict[type[Any], Any] = {}
#: per such class, its copy-with-changes (:func:`replace`). Apart from ``GENERATED`` on purpose:
#: :func:`replace` runs several times per GPU sample and reads this one value, no pair to unpack
_REPLACERS: dict[type[Any], Callable[[Any, dict[str, Any]], Any]] = {}


def replace(obj: R, /, **changes: Any) -> R:
    """A copy of a record with ``changes``: :func:`msgspec.structs.replace` for a
    :class:`Record`; for a dataclass, ``dataclasses.replace``, without its per-field checks for a
    class given :func:`fast_init` (the same result, the same ``TypeError`` for a name that is no
    field)."""
    if isinstance(obj, msgspec.Struct):
        return msgspec.structs.replace(obj, **changes)
    copy = _REPLACERS.get(type(obj))
    if copy is None:
        return dataclasses.replace(obj, **changes)
    result: R = copy(obj, changes)
    return result


def field_names(cls: type[Any]) -> tuple[str, ...]:
    """A record type's fields in order (a :class:`msgspec.Struct` or a dataclass)."""
    if issubclass(cls, msgspec.Struct):
        return cls.__struct_fields__
    return tuple(f.name for f in dataclasses.fields(cls))


def field_types(cls: type[Any]) -> dict[str, Any]:
    """A record type's fields and their types, resolved (a :class:`msgspec.Struct` or a
    dataclass)."""
    if issubclass(cls, msgspec.Struct):
        return {f.name: f.type for f in msgspec.structs.fields(cls)}
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def is_record_type(hint: object) -> bool:
    """A record type: a :class:`msgspec.Struct` or a dataclass."""
    return isinstance(hint, type) and (
        issubclass(hint, msgspec.Struct) or dataclasses.is_dataclass(hint)
    )


def is_record(obj: object) -> bool:
    """A record instance (not a class): a :class:`msgspec.Struct` or a dataclass."""
    return is_record_type(type(obj))


def fast_init(cls: type[T]) -> type[T]:
    """Give a frozen, slotted dataclass an ``__init__`` that sets its slots directly."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: fast_init wants a frozen dataclass with slots=True")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: fast_init does not call __post_init__")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if len(fields) != len(cls.__dataclass_fields__):  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__}: fast_init does not handle InitVar or ClassVar fields")
    for f in fields:
        if not f.init or f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: fast_init wants init fields without factory")
    if "self" in cls.__dataclass_fields__:  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__}: fast_init does not handle a field named self")
    original = cls.__init__
    signature = inspect.signature(original)
    names = [f.name for f in fields]
    if list(signature.parameters)[1:] != names:
        raise TypeError(f"{cls.__name__}: __init__ parameters differ from its fields")
    # the same parameters, kinds and defaults as the dataclass's own __init__ (defaults by name,
    # never rendered into the source)
    scope: dict[str, Any] = {}
    params_src = ["self"]
    keyword_only = False
    for f in fields:
        if f.kw_only and not keyword_only:
            params_src.append("*")
            keyword_only = True
        if f.default is dataclasses.MISSING:
            params_src.append(f.name)
        else:
            scope[f"_default_{f.name}"] = f.default
            params_src.append(f"{f.name}=_default_{f.name}")
    setters = {f"_set_{name}": getattr(cls, name).__set__ for name in names}
    body = "".join(f"        _set_{name}(self, {name})\n" for name in names) or "        pass\n"
    source = (
        f"def _make({', '.join(setters)}):\n"
        f"    def __init__({', '.join(params_src)}) -> None:\n{body}"
        f"    return __init__\n"
    )
    exec(source, scope)
    init = scope["_make"](*setters.values())
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = original.__doc__
    init.__annotations__ = dict(original.__annotations__)
    if inspect.signature(init) != signature:
        raise TypeError(f"{cls.__name__}: the fast __init__'s signature differs from the original")
    GENERATED[cls] = original
    _REPLACERS[cls] = _replacer(cls, fields)
    setattr(cls, "__init__", init)  # noqa: B010 - mypy: cannot assign to a method
    return cls


def _replacer(
    cls: type[Any], fields: tuple[dataclasses.Field[Any], ...]
) -> Callable[[Any, dict[str, Any]], Any]:
    """``cls``'s copy-with-changes: each field from the changes where named, else from the
    object; a name that is no field raises what ``dataclasses.replace`` raises."""
    names = frozenset(f.name for f in fields)
    args = ", ".join(
        (f"{f.name}=" if f.kw_only else "")
        + f"(changes[{f.name!r}] if {f.name!r} in changes else obj.{f.name})"
        for f in fields
    )
    scope: dict[str, Any] = {}
    source = (
        "def _make(cls, names, unknown):\n"
        "    def replace(obj, changes):\n"
        "        if not names.issuperset(changes):\n"
        "            unknown(changes)\n"
        f"        return cls({args})\n"
        "    return replace\n"
    )
    exec(source, scope)

    def unknown(changes: dict[str, Any]) -> None:
        name = min(set(changes) - names)
        raise TypeError(
            f"{cls.__qualname__}.__init__() got an unexpected keyword argument {name!r}"
        )

    made: Callable[[Any, dict[str, Any]], Any] = scope["_make"](cls, names, unknown)
    return made
