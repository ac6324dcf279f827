"""Closing the terminal of a running ``gpuattr demo`` leaves nothing behind.

The demo runs under a real pseudo-terminal (its controlling terminal, as in a shell). Closing the
terminal sends SIGHUP; the demo must stop its worker, agents and doubles, stop the embedded
Kafka broker (which runs in a session of its own, so the hangup does not reach it), and remove
its temporary data. Afterwards no process refers to the demo's working directory and the
directory is gone.
"""

from __future__ import annotations

import asyncio
import os
import re
import select
import subprocess
import sys
import time

import psutil
import pytest

from tests.helpers import wait_for

pytestmark = pytest.mark.integration


def read_until(
    fd: int, pattern: re.Pattern[bytes], timeout_s: float
) -> tuple[bytes, re.Match[bytes]]:
    """Read the terminal until ``pattern`` matches what was read (bounded)."""
    seen = b""
    deadline = time.monotonic() + timeout_s
    while (match := pattern.search(seen)) is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(
                f"no {pattern.pattern!r} on the demo's terminal:\n{seen[-3000:]!r}"
            )
        ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:  # the terminal is gone: the demo exited
                raise AssertionError(f"the demo's terminal closed:\n{seen[-3000:]!r}") from None
    return seen, match


def processes_under(root: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if root in cmdline:
            found.append(f"{proc.info['pid']}: {cmdline[:160]}")
    return found


async def test_closing_the_terminal_stops_everything_and_removes_temp_data() -> None:
    master, slave = os.openpty()
    env = {k: v for k, v in os.environ.items() if k != "GPUATTR_KAFKA_BOOTSTRAP"}
    proc = subprocess.Popen(  # noqa: ASYNC220 (returns at once; a pty needs setsid --ctty)
        [
            "setsid",
            "--ctty",
            sys.executable,
            "-m",
            "gpuattr.cli",
            "demo",
            "--scenario",
            "exclusive",
            "--json",
        ],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        close_fds=True,
    )
    os.close(slave)
    closed = False
    try:
        _, match = await asyncio.to_thread(
            read_until, master, re.compile(rb"demo: working in (\S+)"), 120
        )
        root = match.group(1).decode()
        # running for real: the embedded broker, the worker and an agent, events flowing
        await asyncio.to_thread(read_until, master, re.compile(rb'"schema":"attribution"'), 180)
        assert await asyncio.to_thread(os.path.isdir, root)
        assert processes_under(root), "the demo's broker and children run in its directory"
        os.close(master)  # the terminal goes away: SIGHUP
        closed = True
        code = await asyncio.to_thread(proc.wait, 90)
        assert code != 0  # ended by the hangup, not by finishing
        await wait_for(
            lambda: not processes_under(root),
            timeout_s=30,
            what=lambda: "\n".join(processes_under(root)),
        )
        assert not await asyncio.to_thread(os.path.exists, root)
    finally:
        if not closed:
            os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
