"""contract.records: the contract's and the core's records are Structs; the fast ``__init__`` and
``replace`` build what the dataclass's own do, for every row they are given to, and refuse what
they do not reproduce; ``replace`` copies a Struct as msgspec does."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from typing import Any

import msgspec
import pytest

import contract
import streams.core
import streams.present
from contract.records import GENERATED, fast_init, field_names, replace


def _modules() -> list[Any]:
    """Every module of the contract and the pure core, imported."""
    return [
        importlib.import_module(f"{package.__name__}.{info.name}")
        for package in (contract, streams.core, *_packages(streams.core), streams.present)
        for info in pkgutil.iter_modules(package.__path__)
        if not info.ispkg
    ]


def _packages(package: Any) -> list[Any]:
    return [
        importlib.import_module(f"{package.__name__}.{info.name}")
        for info in pkgutil.iter_modules(package.__path__)
        if info.ispkg
    ]


MODULES = _modules()
CORE = [m for m in MODULES if not m.__name__.startswith("streams.present")]
RECORDS = sorted(GENERATED, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


def _frozen_slotted(module: Any) -> list[type[Any]]:
    return [
        cls
        for cls in vars(module).values()
        if isinstance(cls, type)
        and cls.__module__ == module.__name__
        and dataclasses.is_dataclass(cls)
        and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
        and "__slots__" in cls.__dict__
    ]


def _structs(module: Any) -> list[type[Any]]:
    return [
        cls
        for cls in vars(module).values()
        if isinstance(cls, type)
        and cls.__module__ == module.__name__
        and issubclass(cls, msgspec.Struct)
    ]


def test_the_contract_and_core_records_are_frozen_structs_but_those_with_a_factory() -> None:
    structs = [cls for module in CORE for cls in _structs(module)]
    assert len(structs) > 100
    assert [c.__qualname__ for c in structs if not c.__struct_config__.frozen] == []
    dataclass_left = [
        cls.__qualname__
        for module in CORE
        for cls in _frozen_slotted(module)
        if all(f.default_factory is dataclasses.MISSING for f in dataclasses.fields(cls))
    ]
    assert dataclass_left == []


def test_every_frozen_row_of_the_presentation_has_the_fast_init() -> None:
    assert len(RECORDS) > 5
    missing = [
        cls.__qualname__
        for module in MODULES
        for cls in _frozen_slotted(module)
        if cls not in GENERATED
        and all(f.default_factory is dataclasses.MISSING for f in dataclasses.fields(cls))
    ]
    assert missing == []


def test_replace_copies_a_struct_as_msgspec_does() -> None:
    class Point(msgspec.Struct, frozen=True):
        x: int
        y: tuple[int, ...] = ()

    p = Point(1, (2,))
    assert replace(p, x=3) == msgspec.structs.replace(p, x=3) == Point(3, (2,))
    assert replace(p, x=3).y is p.y
    assert field_names(Point) == ("x", "y")
    with pytest.raises(TypeError):
        replace(p, z=1)


def _original(cls: type[Any], /, *args: Any, **kwargs: Any) -> Any:
    obj = object.__new__(cls)
    GENERATED[cls](obj, *args, **kwargs)
    return obj


def _fields(obj: Any) -> list[tuple[str, Any]]:
    return [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]


@pytest.mark.parametrize("cls", RECORDS, ids=lambda cls: cls.__qualname__)
def test_the_fast_init_builds_what_the_dataclass_init_builds(cls: type[Any]) -> None:
    assert inspect.signature(cls.__init__) == inspect.signature(GENERATED[cls])
    assert cls.__init__ is not GENERATED[cls]
    fields = dataclasses.fields(cls)
    # every field given, by position where it may be, by name otherwise
    values = {f.name: object() for f in fields}
    positional = [values[f.name] for f in fields if not f.kw_only]
    named = {f.name: values[f.name] for f in fields if f.kw_only}
    fast, slow = cls(*positional, **named), _original(cls, *positional, **named)
    assert [(n, id(v)) for n, v in _fields(fast)] == [(n, id(v)) for n, v in _fields(slow)]
    assert [id(v) for _, v in _fields(fast)] == [id(values[f.name]) for f in fields]
    # only the required fields: the defaults are the dataclass's own, the same objects
    required = {f.name: values[f.name] for f in fields if f.default is dataclasses.MISSING}
    fast, slow = cls(**required), _original(cls, **required)
    assert [(n, id(v)) for n, v in _fields(fast)] == [(n, id(v)) for n, v in _fields(slow)]
    assert fast == slow
    assert repr(fast) == repr(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(fast, fields[0].name, None)
    with pytest.raises(TypeError):
        cls(**required, not_a_field=1)


@pytest.mark.parametrize("cls", RECORDS, ids=lambda cls: cls.__qualname__)
def test_replace_copies_what_dataclasses_replace_copies(cls: type[Any]) -> None:
    fields = dataclasses.fields(cls)
    obj = cls(**{f.name: object() for f in fields})
    assert replace(obj) == dataclasses.replace(obj)
    assert replace(obj) is not obj
    for f in fields:
        new = object()
        ours, theirs = replace(obj, **{f.name: new}), dataclasses.replace(obj, **{f.name: new})
        assert type(ours) is cls
        assert [(n, id(v)) for n, v in _fields(ours)] == [(n, id(v)) for n, v in _fields(theirs)]
    with pytest.raises(TypeError, match="unexpected keyword argument 'not_a_field'") as ours_err:
        replace(obj, not_a_field=1)
    with pytest.raises(TypeError) as theirs_err:
        dataclasses.replace(obj, not_a_field=1)
    assert str(ours_err.value) == str(theirs_err.value)


def test_replace_leaves_any_other_dataclass_to_dataclasses_replace() -> None:
    @dataclasses.dataclass(frozen=True)
    class Plain:
        a: int
        b: list[int] = dataclasses.field(default_factory=list)

    assert replace(Plain(1), a=2) == Plain(2)


def test_it_refuses_what_its_init_does_not_reproduce() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        a: int

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        a: tuple[int, ...] = dataclasses.field(default_factory=tuple)

    @dataclasses.dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True, slots=True)
    class NotInInit:
        a: int
        b: int = dataclasses.field(default=0, init=False)

    @dataclasses.dataclass(frozen=True, slots=True)
    class WithInitVar:
        a: int
        b: dataclasses.InitVar[int] = 0

    @dataclasses.dataclass(frozen=True, slots=True)
    class SelfField:
        self: int

    for cls in (Mutable, NoSlots, Factory, PostInit, NotInInit, WithInitVar, SelfField):
        with pytest.raises(TypeError, match="fast_init"):
            fast_init(cls)
        assert cls not in GENERATED


def test_keyword_only_fields_stay_keyword_only() -> None:
    @fast_init
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Named:
        a: int
        b: int = 2

    assert Named(a=1) == Named(a=1, b=2)
    assert replace(Named(a=1), b=3) == Named(a=1, b=3)
    with pytest.raises(TypeError):
        Named(1)  # type: ignore[call-arg]
    del GENERATED[Named]
