"""Child processes of ``gpuattr`` itself (worker, agents) for the demo and the tests."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from infra.settings import KafkaSettings

log = logging.getLogger(__name__)


class Child:
    """A ``gpuattr`` subcommand run as its own process, its output in a log file."""

    def __init__(
        self,
        name: str,
        args: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        #: where it runs (``python -m`` imports from there first); None: this process's folder
        self.cwd = cwd
        self.args = list(args)
        self.env = {**os.environ, **env}
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None
        self._log: IO[bytes] | None = None

    async def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gpuattr.cli",
            *self.args,
            env=self.env,
            cwd=self.cwd,
            stdout=self._log,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
        )
        log.info("started %s (pid %d): gpuattr %s", self.name, self.proc.pid, " ".join(self.args))

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def kill(self) -> None:
        """SIGKILL: the crash a rollout or the OOM killer inflicts."""
        if self.running and self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)

    async def stop(self, timeout_s: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout_s)
            except TimeoutError:
                log.warning("%s did not stop in %.0fs; killing", self.name, timeout_s)
                self.proc.kill()
                await self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


def settings_env(**values: object) -> dict[str, str]:
    """``GPUATTR_*`` environment for a child, from keyword pairs like ``KAFKA_BOOTSTRAP=...``."""
    return {f"GPUATTR_{k.upper()}": str(v) for k, v in values.items() if v is not None}


def kafka_env(kafka: KafkaSettings) -> dict[str, str]:
    """``GPUATTR_KAFKA_*`` for a child that connects as ``kafka`` does (its credentials too)."""
    password = kafka.sasl_password.get_secret_value() if kafka.sasl_password else None
    return settings_env(
        KAFKA_BOOTSTRAP=kafka.bootstrap,
        KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
        KAFKA_PARTITIONS=kafka.partitions,
        KAFKA_SECURITY_PROTOCOL=kafka.security_protocol,
        KAFKA_SASL_MECHANISM=kafka.sasl_mechanism,
        KAFKA_SASL_USERNAME=kafka.sasl_username,
        KAFKA_SASL_PASSWORD=password,
        KAFKA_SSL_CAFILE=kafka.ssl_cafile,
        KAFKA_SSL_CERTFILE=kafka.ssl_certfile,
        KAFKA_SSL_KEYFILE=kafka.ssl_keyfile,
    )
