"""Child processes of the local cluster: started in a session of their own, logged to a file,
stopped with SIGTERM (SIGKILL after a timeout, to the whole process group), and waited on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gpuattr.localkube.binaries import LocalKubeError
from infra.ports import HOST, free_port

__all__ = ["HOST", "Proc", "free_port", "spawn", "wait_until"]

log = logging.getLogger("gpuattr.localkube")


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: IO[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
            return "\n".join(text)
        return f"(no log at {self.log_path})"

    def stop(self, timeout_s: float, *, kill: bool = False) -> int | None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %.0fs; killing it", self.name, timeout_s)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        self.log.close()
        return self.popen.returncode


def spawn(name: str, cmd: list[str], log_path: Path, env: dict[str, str] | None = None) -> Proc:
    """Start ``cmd`` in a new session, its output appended to ``log_path``."""
    out = log_path.open("ab")
    popen = subprocess.Popen(
        cmd,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    log.info("started %s (pid %d, log %s)", name, popen.pid, log_path)
    return Proc(name, popen, out, log_path)


async def wait_until(
    proc: Proc,
    ready: Callable[[], bool],
    timeout_s: float,
    what: str | None = None,
    *,
    also: tuple[Proc, ...] = (),
) -> None:
    """Poll ``ready`` (in a thread) until it holds; fail if ``proc`` (or any of ``also``) exits
    or time runs out."""
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        for watched in (proc, *also):
            if watched.popen.poll() is not None:
                raise LocalKubeError(f"{watched.name} exited during start-up:\n{watched.tail()}")
        if await asyncio.to_thread(ready):
            return
        if time.monotonic() > deadline:
            raise LocalKubeError(
                f"{what or proc.name} not ready after {timeout_s:.0f}s:\n{proc.tail()}"
            )
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.5)
