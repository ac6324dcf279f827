"""``LocalKafka``: a single-node Apache Kafka (KRaft) run as a local JVM process.

Storage is formatted on first start only; data lives in a directory the caller chooses; ready
means the broker answers the Kafka protocol; stop is SIGTERM (clean shutdown), then SIGKILL.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from gpuattr.localkafka.jars import LocalKafkaError, default_cache_dir, resolve_jars

log = logging.getLogger("gpuattr.localkafka")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class LocalKafkaConfig:
    data_dir: Path
    port: int = 0
    controller_port: int = 0
    cache_dir: Path = field(default_factory=default_cache_dir)
    heap_mb: int = 512
    log_file: Path | None = None
    ready_timeout_s: float = 90.0


def render_properties(data_dir: Path, port: int, controller_port: int) -> str:
    template = (resources.files("gpuattr.localkafka") / "broker.properties").read_text()
    return Template(template).substitute(
        data_dir=str(data_dir), port=port, controller_port=controller_port
    )


class LocalKafka:
    """Start with ``await start()`` or ``async with``; ``bootstrap`` is ``127.0.0.1:PORT``."""

    def __init__(self, config: LocalKafkaConfig) -> None:
        self.config = config
        self.port = config.port or free_port()
        self.controller_port = config.controller_port or free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.config.log_file or self.config.data_dir / "broker.log"

    def _java(self, libs: Path, *args: str) -> list[str]:
        return [
            "java",
            f"-Xmx{self.config.heap_mb}m",
            "-Xss1m",
            "-XX:+UseG1GC",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            f"{libs}/*",
            *args,
        ]

    def _prepare(self) -> list[str]:
        libs = resolve_jars(self.config.cache_dir)
        data = self.config.data_dir.resolve()
        logs = data / "kraft-logs"
        logs.mkdir(parents=True, exist_ok=True)
        props = data / "server.properties"
        props.write_text(render_properties(logs, self.port, self.controller_port))
        if not (logs / "meta.properties").exists():
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            fmt = self._java(
                libs, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)
            )
            done = subprocess.run(fmt, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise LocalKafkaError(f"formatting storage failed: {done.stdout}{done.stderr}")
            log.info("formatted Kafka storage in %s", logs)
        return self._java(libs, "kafka.Kafka", str(props))

    async def start(self) -> None:
        cmd = await asyncio.to_thread(self._prepare)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(  # noqa: ASYNC220  (returns at once; stop_sync needs Popen)
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in a terminal reaches us; we stop the broker
        )
        log.info(
            "starting Kafka on %s (pid %d, log %s)", self.bootstrap, self._proc.pid, self.log_path
        )
        try:
            await self._wait_ready()
        except BaseException:
            self.stop_sync()
            raise

    def _tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.config.ready_timeout_s
        delay = 0.2
        while True:
            if self._proc is None or self._proc.poll() is not None:
                raise LocalKafkaError(f"Kafka exited during start-up:\n{self._tail()}")
            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, request_timeout_ms=3000)
            try:
                await producer.start()
                return
            except KafkaError:
                if time.monotonic() > deadline:
                    raise LocalKafkaError(
                        f"Kafka not ready after {self.config.ready_timeout_s:.0f}s:\n{self._tail()}"
                    ) from None
            finally:
                await producer.stop()
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 1.0)

    def stop_sync(self, timeout_s: float = 30.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("Kafka did not stop in %.0fs; killing it", timeout_s)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    async def stop(self) -> None:
        await asyncio.to_thread(self.stop_sync)

    async def __aenter__(self) -> LocalKafka:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def run_forever(config: LocalKafkaConfig) -> int:
    """``gpuattr kafka``: run until SIGTERM or SIGINT, then stop cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with LocalKafka(config) as broker:
        print(f"kafka ready at {broker.bootstrap} (data: {config.data_dir})", flush=True)
        await stop.wait()
        print("stopping kafka", flush=True)
    return 0
