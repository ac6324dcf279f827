"""Validate real output payloads against the committed JSON Schemas (docs/schemas)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import orjson

from contract.schemas import file_name

FOLDER = Path(__file__).resolve().parents[1] / "docs" / "schemas"


@cache
def _validator(kind: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(orjson.loads((FOLDER / file_name(kind)).read_bytes()))


def assert_valid(payload: dict[str, Any]) -> None:
    _validator(payload["schema"]).validate(payload)
