"""``gpuattr demo --json`` run as a user runs it, for the scenario tests: its stdout's records read
while it runs, waits on them (bounded), and a clean stop (SIGTERM, exit 0) however the test ends
(or, to see it stop by itself, a bounded wait for its own exit)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.helpers import wait_for

Records = list[dict[str, Any]]


def alerts_said(records: Records) -> str:
    return f"alerts: {[(a['kind'], a['status']) for a in records if a['schema'] == 'alert']}"


@dataclass
class Demo:
    """The running demo's records so far and its stderr (``said``: what of the records a failure
    message lists)."""

    proc: asyncio.subprocess.Process
    said: Callable[[Records], str] = alerts_said
    records: Records = field(default_factory=list)
    err: list[bytes] = field(default_factory=list)

    def told(self) -> str:
        logs = b"".join(self.err).decode(errors="replace")[-3000:]
        return f"{self.said(self.records)}\nstderr:\n{logs}"

    async def exited(self, timeout_s: float) -> None:
        """The demo has stopped by itself (its ``--duration`` is up) within ``timeout_s``."""
        await asyncio.wait_for(self.proc.wait(), timeout=timeout_s)

    async def until(self, check: Callable[[Records], Any], timeout_s: float) -> Any:
        """What ``check`` returns once it is truthy on the records so far."""
        return await wait_for(
            lambda: check(self.records),
            timeout_s,
            every_s=0.2,
            what=lambda: f"{getattr(check, '__name__', 'check')}; {self.told()}",
        )


@asynccontextmanager
async def demo(
    kafka_bootstrap: str,
    scenario: str,
    *,
    duration_s: float,
    speed: float | None = None,
    env: Mapping[str, str] | None = None,
    said: Callable[[Records], str] = alerts_said,
) -> AsyncIterator[Demo]:
    """The demo on the session's broker (``speed``: the doubles' clock only; ``env``: settings
    beside the process's own; ``said``: see :class:`Demo`); stopped with SIGTERM on leaving
    unless it has exited (it must exit 0: checked by the caller through ``proc.returncode``)."""
    fast = ["--speed", str(speed)] if speed is not None else []
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpuattr.cli",
        "--log-level",
        "WARNING",
        "--bootstrap",
        kafka_bootstrap,
        "demo",
        "--scenario",
        scenario,
        *fast,
        "--duration",
        str(duration_s),  # an upper bound: the test stops it once it has seen enough
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    run = Demo(proc, said)

    async def read_out() -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            if line.startswith(b"{"):
                run.records.append(orjson.loads(line))

    async def read_err() -> None:
        assert proc.stderr is not None
        async for line in proc.stderr:
            run.err.append(line)

    readers = [asyncio.create_task(read_out()), asyncio.create_task(read_err())]
    try:
        yield run
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)  # the demo stops cleanly, exit 0
        await asyncio.wait_for(proc.wait(), timeout=120)
        await asyncio.wait_for(asyncio.gather(*readers), timeout=30)
