"""Every component serves /metrics, /healthz and /readyz; counters move during a real run."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import aiohttp
import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from contract import codec
from contract.outputs import Alert, AlertFigures
from gpuattr.localkafka.broker import free_port
from infra.settings import ObserveSettings, SinkSettings
from sim.scenario import load
from sinks.runner import run_sink
from tests.helpers import wait_for_async
from tests.integration.pipeline import pipeline

pytestmark = pytest.mark.integration


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """Sum of every sample per metric family name, or {} while the endpoint is not up."""
    try:
        async with session.get(url) as resp:
            text = await resp.text()
    except aiohttp.ClientError:
        return {}
    return {f.name: sum(s.value for s in f.samples) for f in text_string_to_metric_families(text)}


async def test_metrics_and_health_endpoints(kafka_bootstrap: str, tmp_path: Path) -> None:
    agent_port, worker_port, sink_port = free_port(), free_port(), free_port()
    worker_env = {"GPUATTR_WORKER_WEB_ENABLED": "true", "GPUATTR_WORKER_WEB_PORT": str(worker_port)}
    agent_env = {"GPUATTR_OBSERVE_AGENT_PORT": str(agent_port), "GPUATTR_OBSERVE_HOST": "127.0.0.1"}
    async with (
        pipeline(
            kafka_bootstrap, load("mps-lab"), tmp_path, worker_env=worker_env, agent_env=agent_env
        ) as p,
        aiohttp.ClientSession() as session,
    ):
        stop = asyncio.Event()
        sink = asyncio.create_task(
            run_sink(
                p.kafka,
                SinkSettings(group_id=f"obs-{uuid.uuid4().hex[:6]}"),
                [],
                stop,
                ObserveSettings(host="127.0.0.1", sink_port=sink_port),
            )
        )
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        alert = Alert(
            id="idle-x",
            kind="idle",
            status="firing",
            node="gnana097",
            device_uuid="GPU-x",
            gpu_uuid="GPU-x",
            model="m",
            mig=None,
            sharing="mps",
            holders=(),
            figures=AlertFigures(),
            window_s=1,
            started_ms=1,
            ts_ms=2,
            device_wide=False,
            summary="s",
        )
        await producer.send_and_wait(p.kafka.topic("alerts"), codec.encode(alert))
        await producer.stop()
        try:
            endpoints = {
                "agent": (f"http://127.0.0.1:{agent_port}", ["gpuattr_agent_records_published"]),
                "worker": (
                    f"http://127.0.0.1:{worker_port}",
                    [
                        "gpuattr_worker_events_in",
                        "gpuattr_worker_events_out",
                        "gpuattr_worker_table_keys",
                        "gpuattr_device_info",  # the attribution series of its devices
                        "gpuattr_device_holder_info",
                    ],
                ),
                "sink": (f"http://127.0.0.1:{sink_port}", ["gpuattr_sink_alerts_read"]),
            }
            for name, (base, counters) in endpoints.items():

                async def moving(base: str = base, counters: list[str] = counters) -> bool:
                    got = await scrape(session, f"{base}/metrics")
                    return all(got.get(c, 0) > 0 for c in counters)

                await wait_for_async(moving, timeout_s=90, what=f"{name} counters > 0")
                async with session.get(f"{base}/healthz") as resp:
                    assert resp.status == 200, name

                async def ready(base: str = base) -> bool:
                    async with session.get(f"{base}/readyz") as resp:
                        return resp.status == 200

                await wait_for_async(ready, timeout_s=60, what=f"{name} ready")
        finally:
            stop.set()
            await sink
