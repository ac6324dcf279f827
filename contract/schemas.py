"""JSON Schemas of every output payload: the contract downstream consumers read against.

``docs/schemas/<schema>.v<version>.json`` are generated from the record types; a test fails when
a committed file is stale. A change that breaks readers (a removed or retyped field) must bump
the record's version in its ``KINDS`` table; additive fields keep it.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pydantic

from contract.codec import REGISTRY

#: output schemas and the topic each one flows on
OUTPUTS: dict[str, str] = {
    "attribution": "attribution",
    "alert": "alerts",
    "exporter.misattribution": "flags",
    "usage.uncredited": "flags",
    "telemetry.refused": "flags",
    "node-status": "node-status",
    "demand": "demand",
    "deadletter": "deadletter",
    "output.refused": "deadletter",
    "delivery.failure": "deadletter",
}


def json_schema(kind: str) -> dict[str, Any]:
    rt = REGISTRY[kind]
    schema: dict[str, Any] = pydantic.TypeAdapter(_described(rt.cls)).json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://gpu-attribution.dev/schemas/{kind}.v{rt.version}.json"
    schema["properties"] = {
        "schema": {"const": kind},
        "v": {"const": rt.version},
        **schema["properties"],
    }
    schema["required"] = ["schema", "v", *schema.get("required", [])]
    return schema


def _described(hint: Any) -> Any:
    """``hint`` with every record type in it as pydantic describes a type: a record (a
    :class:`msgspec.Struct`) as the frozen dataclass of the same name, fields, defaults and
    docstring, so the schemas say what the records carry in pydantic's terms."""
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        return _dataclass_of(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if not args or origin is typing.Literal:
        return hint
    described = tuple(Ellipsis if a is Ellipsis else _described(a) for a in args)
    if origin is types.UnionType or origin is typing.Union:
        return functools.reduce(lambda a, b: a | b, described)
    return origin[described]


@functools.cache
def _dataclass_of(cls: type[msgspec.Struct]) -> type[Any]:
    fields: list[tuple[str, Any, Any]] = []
    for f in msgspec.structs.fields(cls):
        if f.default is not msgspec.NODEFAULT:
            default = dataclasses.field(default=_value_of(f.default))
        elif f.default_factory is not msgspec.NODEFAULT:
            default = dataclasses.field(default_factory=f.default_factory)
        else:
            default = dataclasses.field()
        fields.append((f.name, _described(f.type), default))
    made = dataclasses.make_dataclass(cls.__name__, fields, frozen=True)
    made.__doc__ = cls.__doc__
    made.__module__ = cls.__module__
    made.__qualname__ = cls.__qualname__
    return made


def _value_of(value: Any) -> Any:
    """A default as its described type holds it (a record as its dataclass)."""
    if isinstance(value, msgspec.Struct):
        made = _dataclass_of(type(value))
        return made(**{name: _value_of(getattr(value, name)) for name in value.__struct_fields__})
    if isinstance(value, tuple):
        return tuple(map(_value_of, value))
    return value


def file_name(kind: str) -> str:
    return f"{kind}.v{REGISTRY[kind].version}.json"


def write_all(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for kind in OUTPUTS:
        path = folder / file_name(kind)
        path.write_bytes(
            orjson.dumps(json_schema(kind), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
            + b"\n"
        )
        written.append(path)
    return written


if __name__ == "__main__":  # python -m contract.schemas: regenerate docs/schemas/
    for written in write_all(Path(__file__).resolve().parents[1] / "docs" / "schemas"):
        print(written)
