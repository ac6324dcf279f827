"""``gpuattr doctor`` run as an operator runs it: a process with only a role's environment."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from infra.acls import Role


@dataclass
class Run:
    code: int
    lines: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    def statuses(self) -> dict[str, str]:
        return {name: line["status"] for name, line in self.lines.items()}

    def red(self) -> list[str]:
        return [name for name, line in self.lines.items() if line["status"] == "fail"]


async def run_doctor(role: Role, env: Mapping[str, str], *args: str) -> tuple[int, bytes]:
    """``gpuattr doctor --role <role>`` as a process with ``env`` (the role's, as its pod has
    it): exit status and standard output."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpuattr.cli",
        "doctor",
        "--role",
        role,
        "--timeout",
        "20",
        *args,
        env={"PATH": "/usr/bin:/bin", **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=240)
    assert proc.returncode is not None
    assert out, err.decode()[-3000:]
    return proc.returncode, out


async def doctor(role: Role, env: Mapping[str, str], *args: str) -> Run:
    """The same with ``--json``, read back."""
    code, out = await run_doctor(role, env, "--json", *args)
    doc = orjson.loads(out)
    assert (doc["role"], doc["ok"]) == (role, code == 0), doc
    return Run(code, {c["check"]: c for c in doc["checks"]})
