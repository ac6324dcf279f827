"""JSON Schemas of every output payload: the contract downstream consumers read against.

``docs/schemas/<schema>.v<version>.json`` are generated from the record types; a test fails when
a committed file is stale. A change that breaks readers (a removed or retyped field) must bump
the record's version in its ``KINDS`` table; additive fields keep it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pydantic

from contract.codec import REGISTRY

#: output schemas and the topic each one flows on
OUTPUTS: dict[str, str] = {
    "attribution": "attribution",
    "alert": "alerts",
    "exporter.misattribution": "flags",
    "telemetry.refused": "flags",
    "node-status": "node-status",
    "demand": "demand",
    "deadletter": "deadletter",
    "output.refused": "deadletter",
    "delivery.failure": "deadletter",
}


def json_schema(kind: str) -> dict[str, Any]:
    rt = REGISTRY[kind]
    schema: dict[str, Any] = pydantic.TypeAdapter(rt.cls).json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://gpu-attribution.dev/schemas/{kind}.v{rt.version}.json"
    schema["properties"] = {
        "schema": {"const": kind},
        "v": {"const": rt.version},
        **schema["properties"],
    }
    schema["required"] = ["schema", "v", *schema.get("required", [])]
    return schema


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
