"""Wait until a starting broker answers the Kafka protocol (bounded, fails fast on exit)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from gpuattr.localkafka.jars import LocalKafkaError


async def _port_open(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    await writer.wait_closed()
    return True


async def _answers_metadata(host: str, port: int, options: Mapping[str, Any]) -> bool:
    admin = AIOKafkaAdminClient(
        bootstrap_servers=f"{host}:{port}", request_timeout_ms=3000, **options
    )
    try:
        await admin.start()
        cluster = await admin.describe_cluster()
    except KafkaError:
        return False
    finally:
        await admin.close()
    return any(b["port"] == port for b in cluster["brokers"])


async def wait_until_ready(
    host: str,
    port: int,
    *,
    exited: Callable[[], bool],
    tail: Callable[[], str],
    timeout_s: float,
    client_options: Mapping[str, Any] | None = None,
) -> None:
    """Poll (TCP first, so aiokafka does not log refused connections) until metadata lists us."""
    deadline = time.monotonic() + timeout_s
    delay = 0.1
    while True:
        if exited():
            raise LocalKafkaError(f"Kafka exited during start-up:\n{tail()}")
        if await _port_open(host, port) and await _answers_metadata(
            host, port, client_options or {}
        ):
            return
        if time.monotonic() > deadline:
            raise LocalKafkaError(f"Kafka not ready after {timeout_s:.0f}s:\n{tail()}")
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.5)
