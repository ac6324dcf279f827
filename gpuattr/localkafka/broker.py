"""``LocalKafka``: a single-node Apache Kafka (KRaft) run as a local JVM process.

Storage is formatted on first start only; data lives in a directory the caller chooses; ready
means the broker answers the Kafka protocol; stop is SIGTERM (clean shutdown), then SIGKILL.
With ``LocalKafkaConfig.security`` it runs with TLS, SASL/SCRAM and the authorizer
(:mod:`gpuattr.localkafka.security`); :meth:`LocalKafka.client_settings` gives each user's
client settings.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

from pydantic import SecretStr

from gpuattr.localkafka.config import LocalKafkaConfig, new_cluster_id, render_properties
from gpuattr.localkafka.jars import LocalKafkaError, require_tool, resolve_jars
from gpuattr.localkafka.ready import wait_until_ready
from gpuattr.localkafka.security import MECHANISM, make_pki, overrides, scram_arguments
from infra.kafka import client_options
from infra.ports import HOST, free_port
from infra.settings import KafkaSettings

__all__ = ["LocalKafka", "free_port", "run_forever"]

log = logging.getLogger("gpuattr.localkafka")


def _check_port_free(port: int) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the JVM binds
        try:
            s.bind((HOST, port))
        except OSError as err:
            raise LocalKafkaError(f"{HOST}:{port} is already in use ({err.strerror})") from None


class LocalKafka:
    """Start with ``await start()`` or ``async with``; ``bootstrap`` is ``127.0.0.1:PORT``."""

    def __init__(self, config: LocalKafkaConfig) -> None:
        self.config = config
        self.port = config.port or free_port()
        self.controller_port = config.controller_port or free_port()
        self.returncode: int | None = None  # the JVM's exit status after stop
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.config.log_file or self.config.data_dir / "broker.log"

    @property
    def tls_dir(self) -> Path:
        return self.config.data_dir.resolve() / "tls"

    @property
    def ca_file(self) -> Path:
        """The CA certificate clients trust (with security on)."""
        return self.tls_dir / "ca.pem"

    def client_settings(
        self, user: str | None = None, base: KafkaSettings | None = None, **fields: Any
    ) -> KafkaSettings:
        """Settings to reach this broker (``base``'s other settings kept): plaintext, or, with
        security on, SASL_SSL as ``user`` (default: the super user). ``fields`` override."""
        update: dict[str, Any] = {"bootstrap": self.bootstrap}
        security = self.config.security
        if security is not None:
            name = user or security.super_user
            update |= {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": MECHANISM,
                "sasl_username": name,
                "sasl_password": SecretStr(security.users[name]),
                "ssl_cafile": self.ca_file,
            }
        return (base or KafkaSettings()).model_copy(update=update | fields)

    @property
    def storage_dir(self) -> Path:
        """Kafka's ``log.dirs`` (topic data and ``meta.properties``)."""
        return self.config.data_dir.resolve() / "kraft-logs"

    def _java(self, libs: Path, *args: str) -> list[str]:
        return [
            require_tool("java"),
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
        storage = self.storage_dir
        storage.mkdir(parents=True, exist_ok=True)
        props = storage.parent / "server.properties"
        security = self.config.security
        secured = {}
        if security is not None:
            make_pki(self.tls_dir)
            secured = overrides(security, self.tls_dir, self.port, self.controller_port)
        props.write_text(render_properties(storage, self.port, self.controller_port, secured))
        props.chmod(0o600)  # passwords inside when secured
        if not (storage / "meta.properties").exists():
            users = scram_arguments(security) if security is not None else []
            fmt = self._java(
                libs,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                new_cluster_id(),
                "-c",
                str(props),
                *users,
            )
            done = subprocess.run(fmt, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise LocalKafkaError(f"formatting storage failed: {done.stdout}{done.stderr}")
            log.info("formatted Kafka storage in %s", storage)
        return self._java(libs, "kafka.Kafka", str(props))

    async def start(self) -> None:
        """Format storage if new, launch the JVM, return once the broker answers."""
        if self._proc is not None:
            raise LocalKafkaError(f"Kafka already running on {self.bootstrap}")
        for port in (self.port, self.controller_port):
            _check_port_free(port)  # a clear message rather than a JVM stack trace
        cmd = await asyncio.to_thread(self._prepare)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.returncode = None
        # Popen, not an asyncio subprocess: stop_sync() must work from atexit, signal handlers
        # and after the loop that started the broker has closed (the pytest session fixture).
        self._proc = subprocess.Popen(  # noqa: ASYNC220  (returns at once)
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in a terminal reaches us; we stop the broker
        )
        atexit.register(self.stop_sync)
        log.info(
            "starting Kafka on %s (pid %d, log %s)", self.bootstrap, self._proc.pid, self.log_path
        )
        proc = self._proc
        try:
            await wait_until_ready(
                HOST,
                self.port,
                exited=lambda: proc.poll() is not None,
                tail=self._tail,
                timeout_s=self.config.ready_timeout_s,
                client_options=client_options(self.client_settings()),
            )
        except BaseException:
            self.stop_sync()
            raise
        log.info("Kafka ready on %s", self.bootstrap)

    def _tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return f"(no log at {self.log_path})"

    def stop_sync(self, timeout_s: float = 30.0) -> None:
        """SIGTERM, wait up to ``timeout_s`` for a clean exit, then SIGKILL. Idempotent."""
        proc, self._proc = self._proc, None
        atexit.unregister(self.stop_sync)
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    log.warning("Kafka did not stop in %.0fs; killing it", timeout_s)
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            self.returncode = proc.returncode
            log.info("Kafka on %s stopped (exit %s)", self.bootstrap, proc.returncode)
        if self._log is not None:
            self._log.close()
            self._log = None

    async def stop(self) -> None:
        """Stop the broker without blocking the event loop."""
        await asyncio.to_thread(self.stop_sync)

    async def __aenter__(self) -> LocalKafka:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def _start_unless_stopped(broker: LocalKafka, stop: asyncio.Event) -> bool:
    """Start ``broker``; False if ``stop`` was set first (a half-started broker is stopped)."""
    starting = asyncio.create_task(broker.start())
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not starting.done():
            starting.cancel()
        await asyncio.wait({starting, stopping})
    if starting.cancelled():
        return False
    starting.result()  # raises LocalKafkaError if start-up failed
    return True


async def run_forever(config: LocalKafkaConfig) -> int:
    """``gpuattr kafka``: run until SIGTERM or SIGINT, then stop cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    broker = LocalKafka(config)
    try:
        if not await _start_unless_stopped(broker, stop):
            return 0
        print(f"kafka ready at {broker.bootstrap} (data: {config.data_dir})", flush=True)
        await stop.wait()
        log.info("signalled: stopping Kafka")
        await broker.stop()
        return 0
    except LocalKafkaError as err:
        print(f"gpuattr kafka: {err}", file=sys.stderr)
        return 1
    finally:
        broker.stop_sync()  # no-op after a clean stop
        for sig in signals:
            loop.remove_signal_handler(sig)
