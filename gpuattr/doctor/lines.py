"""A check's verdict and how it is printed. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

Status = Literal["ok", "warn", "fail", "skip"]

#: how each status starts its line (and its colour on a terminal)
MARKS: Mapping[Status, str] = {"ok": "✓", "warn": "!", "fail": "✗", "skip": "-"}
_COLOURS: Mapping[Status, str] = {"ok": "32", "warn": "33", "fail": "31", "skip": "2"}


@dataclass(frozen=True, slots=True)
class Line:
    """One check: what it found and, unless it is fine, what to do about it.

    ``facts`` are the figures behind the sentence (for ``--json``); they never hold a secret."""

    check: str
    status: Status
    said: str
    fix: str = ""
    facts: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status in ("fail", "warn") and not self.fix:
            raise ValueError(f"{self.check}: a {self.status} line must say how to fix it")


def ok(check: str, said: str, **facts: Any) -> Line:
    return Line(check, "ok", said, facts=facts)


def fail(check: str, said: str, fix: str, **facts: Any) -> Line:
    return Line(check, "fail", said, fix, facts)


def warn(check: str, said: str, fix: str, **facts: Any) -> Line:
    return Line(check, "warn", said, fix, facts)


def skipped(check: str, because: str) -> Line:
    return Line(check, "skip", f"not checked: {because}")


def exit_status(lines: Sequence[Line]) -> int:
    """1 when any check failed, else 0 (a warning alone does not fail the install)."""
    return 1 if any(line.status == "fail" for line in lines) else 0


def render_text(lines: Sequence[Line], *, colour: bool = False) -> str:
    width = max((len(line.check) for line in lines), default=0)
    out = []
    for line in lines:
        mark = MARKS[line.status]
        if colour:
            mark = f"\x1b[{_COLOURS[line.status]}m{mark}\x1b[0m"
        text = f"{mark} {line.check:<{width}}  {line.said}"
        if line.fix:
            text += f" → fix: {line.fix}"
        out.append(text)
    failed = sum(line.status == "fail" for line in lines)
    warned = sum(line.status == "warn" for line in lines)
    out.append(f"{len(lines)} checks: {failed} failed, {warned} warnings")
    return "\n".join(out)


def render_json(role: str, lines: Sequence[Line]) -> bytes:
    return orjson.dumps(
        {
            "role": role,
            "ok": exit_status(lines) == 0,
            "checks": [
                {
                    "check": line.check,
                    "status": line.status,
                    "said": line.said,
                    "fix": line.fix or None,
                    "facts": dict(line.facts),
                }
                for line in lines
            ],
        },
        option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS,
    )
