"""The one codec: every record on every topic is orjson with its ``schema`` name and version ``v``.

Payload shape::

    {"schema": "dcgm.sample", "v": 1, "node": "...", "ts_ms": 1700000000000, ...}

``schema`` and ``v`` are reserved: no record may have a field of that name (checked at import).

Records are frozen dataclasses; decoding validates with pydantic so a poison message becomes a
:class:`DecodeError` naming what is wrong, never a half-built record. Unknown extra fields are
ignored (additive changes keep ``v``); a change that breaks readers bumps ``v``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import pydantic

from agents import events as agent_events
from sinks import events as sink_events
from streams import events as stream_events
from streams import state as stream_state


class DecodeError(ValueError):
    """A payload that is not a record we know: bad JSON, unknown kind or version, wrong fields."""


@dataclass(frozen=True, slots=True)
class RecordType:
    kind: str
    version: int
    cls: type[Any]


ENVELOPE = ("schema", "v")


def _registry(*modules: Any) -> dict[str, RecordType]:
    reg: dict[str, RecordType] = {}
    for module in modules:
        for kind, (cls, version) in module.KINDS.items():
            if kind in reg:
                raise RuntimeError(f"record kind {kind!r} registered twice")
            clash = set(ENVELOPE) & {f.name for f in dataclasses.fields(cls)}
            if clash:
                raise RuntimeError(f"{cls.__name__} has reserved field(s) {sorted(clash)}")
            reg[kind] = RecordType(kind, version, cls)
    return reg


REGISTRY: Mapping[str, RecordType] = _registry(
    agent_events, stream_events, stream_state, sink_events
)
_BY_CLASS: Mapping[type[Any], RecordType] = {rt.cls: rt for rt in REGISTRY.values()}
_ADAPTERS: dict[type[Any], pydantic.TypeAdapter[Any]] = {}


def kind_of(record: object) -> RecordType:
    try:
        return _BY_CLASS[type(record)]
    except KeyError:
        raise TypeError(f"{type(record).__name__} is not a registered record") from None


def encode(record: object) -> bytes:
    """Serialize a registered record to its versioned JSON payload."""
    rt = kind_of(record)
    body = orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS)
    head = b'{"schema":' + orjson.dumps(rt.kind) + b',"v":' + str(rt.version).encode()
    # orjson renders a dataclass as one JSON object: splice the envelope into it.
    return head + (b"}" if body == b"{}" else b"," + body[1:])


def to_dict(record: object) -> dict[str, Any]:
    """The payload as a dict (what :func:`encode` writes), for sinks and views."""
    out: dict[str, Any] = orjson.loads(encode(record))
    return out


def decode(payload: bytes | bytearray | memoryview | str) -> Any:
    """Parse a payload into its record; raise :class:`DecodeError` with the reason otherwise."""
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DecodeError(f"payload is a JSON {type(data).__name__}, not an object")
    kind = data.pop("schema", None)
    version = data.pop("v", None)
    rt = REGISTRY.get(kind) if isinstance(kind, str) else None
    if rt is None:
        raise DecodeError(f"unknown record kind {kind!r}")
    if type(version) is not int or version != rt.version:  # not True, not 1.0
        raise DecodeError(f"{kind} v{version!r} is not supported (this build reads v{rt.version})")
    adapter = _ADAPTERS.get(rt.cls)
    if adapter is None:
        adapter = _ADAPTERS[rt.cls] = pydantic.TypeAdapter(rt.cls)
    try:
        return adapter.validate_python(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<record>"
        raise DecodeError(f"{kind} v{version}: {where}: {first['msg']}") from None
