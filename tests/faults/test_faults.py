"""The fault suite: the whole pipeline under what clusters do daily, compared with no faults.

Each case runs the ``mixed`` scenario (three nodes, every sharing mode) frozen at one instant,
so holders do not change and the final state is known. Faults are injected while the agents
publish; then the agents stop, the workers drain, and the run is compared with its reference —
the same input through one calm worker (see harness.py). The figures of every case are printed
at the end of the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from pydantic import SecretStr

from bench.kafka_io import count
from contract.delivery import DeliveryFailure
from gpuattr.localkafka import LocalKafka, LocalKafkaConfig
from gpuattr.localkafka.broker import free_port
from infra.httpserve import start_site
from infra.settings import SinkSettings
from sim.cluster import Cluster
from sim.scenario import load
from sinks.http import WebhookDestination
from sinks.payloads import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from sinks.runner import run_sink
from tests.faults.harness import (
    RESULTS,
    Outcome,
    compare,
    end_input_and_drain,
    final_view,
    more_records,
    read_topic,
    reference,
)
from tests.helpers import wait_for, wait_for_async
from tests.integration.pipeline import Pipeline, collect, pipeline

pytestmark = [pytest.mark.integration, pytest.mark.faults]

SCENARIO = load("mixed")
T = 20.0  # scenario seconds: every pod of the scenario is running
ALERTS = {  # short windows, so idle and orphaned-memory alerts fire within a run
    "GPUATTR_ALERTS_IDLE_WINDOW_S": "4",
    "GPUATTR_ALERTS_COOLDOWN_S": "600",
    "GPUATTR_ALERTS_ORPHAN_WINDOW_S": "4",
}
DEVICES = sum(
    len(list(Cluster(SCENARIO, lambda: T).exporter_rows(n.name, 0))) for n in SCENARIO.nodes
)
Inject = Callable[[Pipeline], Awaitable[None]]
NO_FAULT: dict[str, dict[str, tuple[object, ...]]] = {}


async def more_events(p: Pipeline, n: int, timeout_s: float = 90) -> None:
    """Wait until the workers have written ``n`` more attribution events."""
    topic = p.kafka.topic("attribution")
    await more_records(p.kafka.bootstrap or "", topic, n, timeout_s, "events")


async def warmed_up(p: Pipeline) -> None:
    async def complete() -> bool:
        raw = [
            v for _, _, v in await read_topic(p.kafka.bootstrap or "", p.kafka.topic("attribution"))
        ]
        view = final_view(raw)
        return len(view) == DEVICES and all(
            s[0] != "unknown" and s[1] != "unknown" for s in view.values()
        )

    await wait_for_async(complete, timeout_s=120, every_s=0.5, what="every device attributed")


async def fault_run(
    name: str, bootstrap: str, workdir: Path, inject: Inject, workers: int = 2
) -> tuple[Outcome, Outcome]:
    async with pipeline(bootstrap, SCENARIO, workdir, workers=workers, worker_env=ALERTS) as p:
        p.clock.offset_s = T
        await warmed_up(p)
        await inject(p)
        await more_events(p, 2 * DEVICES)  # the pipeline works after the faults
        run = await end_input_and_drain(p)
    ref = await reference(p.kafka, workdir, ALERTS)
    compare(name, ref, run)
    return run, ref


def same_final_state(name: str, run: Outcome) -> None:
    """With the scenario frozen, the final view of every device is the no-fault run's."""
    assert NO_FAULT, "the no-fault case runs first"
    assert final_view(run.attribution) == NO_FAULT["view"], f"{name}: final state differs"


async def test_no_fault(kafka_bootstrap: str, tmp_path: Path) -> None:
    async def nothing(p: Pipeline) -> None:  # run until the idle GPU's alert has fired
        async def alerted() -> bool:
            return await count(p.kafka.bootstrap or "", p.kafka.topic("alerts")) > 0

        await wait_for_async(alerted, timeout_s=60, every_s=0.5, what="an idle alert")

    run, _ = await fault_run("no-fault", kafka_bootstrap, tmp_path, nothing)
    NO_FAULT["view"] = final_view(run.attribution)
    assert len(NO_FAULT["view"]) == DEVICES
    assert run.alerts, "the scenario's idle GPU raises an alert within the run"


@pytest.mark.timeout(600)  # each restart waits out the group's session timeout: ~3-5 min here
async def test_worker_sigkill_three_times_with_two_workers(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    rng = random.Random(7)

    async def kill_workers(p: Pipeline) -> None:
        for _ in range(3):
            await more_events(p, rng.randint(DEVICES, 4 * DEVICES))
            victim = rng.choice(p.workers)
            victim.kill()  # SIGKILL: no commit, no flush, no goodbye
            await victim.proc.wait() if victim.proc else None
            await victim.start()  # what the Deployment does

    run, _ = await fault_run("worker-sigkill x3", kafka_bootstrap, tmp_path, kill_workers)
    same_final_state("worker-sigkill", run)


async def test_broker_stop_and_restart(tmp_path: Path) -> None:
    broker = LocalKafka(LocalKafkaConfig(data_dir=tmp_path / "kafka", port=free_port()))
    await broker.start()
    try:

        async def restart_broker(p: Pipeline) -> None:
            await more_events(p, 2 * DEVICES)
            await broker.stop()
            # the outage lasts while every agent polls its kubelet 20 more times (~4 s): the
            # agents run on, and what they publish must wait for the broker, not be lost
            polled = {n: k.list_calls for n, k in p.sim.kubelets.items()}
            await wait_for(
                lambda: all(k.list_calls >= polled[n] + 20 for n, k in p.sim.kubelets.items()),
                timeout_s=60,
                what="agents polling through the outage",
            )
            await broker.start()

        run, _ = await fault_run("broker-restart", broker.bootstrap, tmp_path, restart_broker)
        same_final_state("broker-restart", run)
    finally:
        await broker.stop()


async def test_agent_sigkill_and_restart(kafka_bootstrap: str, tmp_path: Path) -> None:
    async def kill_agent(p: Pipeline) -> None:
        for agent in p.agents:
            await more_events(p, DEVICES)
            agent.kill()
            await agent.proc.wait() if agent.proc else None
            await agent.start()  # its snapshot on start rebuilds the node's holders

    run, _ = await fault_run("agent-sigkill", kafka_bootstrap, tmp_path, kill_agent)
    same_final_state("agent-sigkill", run)


async def test_sources_fail_and_return(kafka_bootstrap: str, tmp_path: Path) -> None:
    async def break_sources(p: Pipeline) -> None:
        sim = p.sim
        assert sim.apiserver is not None
        await more_events(p, DEVICES)
        kubelet = sim.kubelets["gpu-b"]
        await kubelet.stop()  # the socket disappears (kubelet restart)
        for _ in range(3):  # 410 Gone storms and 5xx on relist
            sim.apiserver.expire_all()
            sim.apiserver.cut_streams()
            sim.apiserver.fail_next(3, 500)
        for exporter in sim.exporters.values():
            exporter.garbage_lines(3)
            exporter.truncate_next(2)
            exporter.fail_next(2, 503)
            exporter.delay_next(2, 6.0)  # longer than the agent's scrape timeout
        await more_events(p, 2 * DEVICES)
        await kubelet.start()  # and comes back

    run, _ = await fault_run("sources", kafka_bootstrap, tmp_path, break_sources)
    same_final_state("sources", run)


@dataclass
class Hook:
    """A webhook receiver that verifies signatures and dedupes effects by idempotency key."""

    secret: str
    effects: dict[str, int] = field(default_factory=dict)
    requests: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        body = await request.read()
        ts, sig = int(request.headers[TIMESTAMP_HEADER]), request.headers[SIGNATURE_HEADER]
        key = request.headers[IDEMPOTENCY_HEADER]
        if not verify(self.secret.encode(), ts, key, body, sig):
            return web.Response(status=401)
        self.effects[key] = self.effects.get(key, 0) + 1
        return web.Response(text="ok")


@contextlib.asynccontextmanager
async def hook_site(hook: Hook, port: int) -> AsyncIterator[None]:
    app = web.Application()
    app.router.add_post("/hook", hook.handle)
    runner, _, _ = await start_site(app, "127.0.0.1", port, shutdown_timeout=0.1)
    try:
        yield
    finally:
        await runner.cleanup()


async def test_webhook_down_for_a_long_stretch(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret, port = "whsec-fault-suite", free_port()
    hook = Hook(secret)
    settings = SinkSettings(
        group_id=f"sink-{uuid.uuid4().hex[:6]}",
        timeout_s=1,
        max_attempts=40,  # ~40 s of retries: longer than the outage below
        base_delay_s=0.2,
        max_delay_s=1.0,
        rate_per_s=50,
        burst=10,
    )
    async with (
        pipeline(kafka_bootstrap, SCENARIO, tmp_path, workers=1, worker_env=ALERTS) as p,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as session,
        collect(p.kafka, "alerts") as alerts,
        collect(p.kafka, "deadletter") as dead,
    ):
        p.clock.offset_s = T
        stop = asyncio.Event()
        dest = WebhookDestination(
            "webhook", SecretStr(f"http://127.0.0.1:{port}/hook"), session, SecretStr(secret)
        )
        sink = asyncio.create_task(run_sink(p.kafka, settings, [dest], stop))
        try:
            # the receiver is down (connection refused) until alerts have queued up
            await wait_for(lambda: len(alerts.records) >= 2, timeout_s=120, what="alerts")
            caplog.set_level(logging.WARNING, logger="sinks.delivery")

            def retried(n: int) -> bool:  # failed attempts the sink logged against the dead URL
                return sum("retrying in" in r.getMessage() for r in caplog.records) >= n

            # the outage goes on until the sink has failed 8 times (several seconds of backoff)
            await wait_for(lambda: retried(8), timeout_s=60, what="8 failed delivery attempts")
            assert not hook.effects
            async with hook_site(hook, port):
                keys = {f"{a.id}:{a.status}" for a in alerts.records}
                await wait_for(lambda: keys <= set(hook.effects), timeout_s=60, what="deliveries")
        finally:
            stop.set()
            await sink
    failures = [r for r in dead.records if isinstance(r, DeliveryFailure)]
    duplicates = sum(n - 1 for n in hook.effects.values())
    RESULTS.append(
        f"{'webhook-down':<22} alerts={len(keys)} "
        f"delivered_keys={len(set(hook.effects) & keys)} "
        f"duplicate_deliveries={duplicates} requests={hook.requests} deadlettered={len(failures)}"
    )
    assert keys <= set(hook.effects)  # every alert, once per idempotency key at the receiver
    assert not failures  # nothing dead-lettered that a retry could deliver
