"""Alert delivery on the real local Kafka to real HTTP receivers that fail, stall and refuse."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web
from aiokafka import AIOKafkaProducer
from pydantic import SecretStr

from contract import codec
from contract.delivery import DeliveryFailure
from contract.outputs import Alert, AlertFigures
from infra.admin import create_topics
from infra.httpserve import start_site
from infra.settings import KafkaSettings, SinkSettings
from infra.topics import topic_specs
from sinks.http import SlackDestination, WebhookDestination
from sinks.payloads import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from sinks.runner import run_sink
from tests.contract import assert_valid
from tests.helpers import wait_for
from tests.integration.pipeline import collect

pytestmark = pytest.mark.integration
SECRET = "hmac-key-for-tests"


@dataclass
class Receiver:
    """A webhook endpoint: fails the first ``fail_first`` requests, stalls every ``stall_every``."""

    fail_first: int = 0
    stall_every: int = 0
    always_fail: bool = False
    requests: int = 0
    keys: list[str] = field(default_factory=list)
    bad_signatures: int = 0
    bodies: list[bytes] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        body = await request.read()
        if self.always_fail or self.requests <= self.fail_first:
            return web.Response(status=500, text="down")
        if self.stall_every and self.requests % self.stall_every == 0:
            # held past the sink's timeout: a timed-out attempt (released at teardown)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.release.wait(), 2)
        sig = request.headers.get(SIGNATURE_HEADER)
        if sig is not None and not verify(
            SECRET.encode(),
            int(request.headers[TIMESTAMP_HEADER]),
            request.headers[IDEMPOTENCY_HEADER],
            body,
            sig,
        ):
            self.bad_signatures += 1
            return web.Response(status=401)
        self.keys.append(request.headers.get(IDEMPOTENCY_HEADER, "slack"))
        self.bodies.append(body)
        return web.Response(text="ok")


@contextlib.asynccontextmanager
async def serve(*receivers: Receiver) -> AsyncIterator[list[str]]:
    app = web.Application()
    for i, r in enumerate(receivers):
        app.router.add_post(f"/hook/{i}", r.handle)
    runner, _, port = await start_site(app, "127.0.0.1", 0, shutdown_timeout=0.1)
    try:
        yield [f"http://127.0.0.1:{port}/hook/{i}" for i in range(len(receivers))]
    finally:
        for r in receivers:
            r.release.set()
        await runner.cleanup()


async def queued(
    bootstrap: str, alerts: list[Alert], partitions: int, poison: bool = False
) -> KafkaSettings:
    """Fresh topics with ``alerts`` (and a poison record, if asked) waiting on the alerts topic."""
    kafka = KafkaSettings(
        bootstrap=bootstrap, topic_prefix=f"s{uuid.uuid4().hex[:8]}.", partitions=partitions
    )
    await create_topics(bootstrap, topic_specs(kafka))
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
    await producer.start()
    try:
        sends = [
            await producer.send(kafka.topic("alerts"), codec.encode(a), key=a.id.encode())
            for a in alerts
        ]
        if poison:
            sends.append(await producer.send(kafka.topic("alerts"), b"\x00poison", key=b"x"))
        await asyncio.gather(*sends)
    finally:
        await producer.stop()
    return kafka


def make_alert(n: int) -> Alert:
    return Alert(
        id=f"idle-{n:04d}",
        kind="idle",
        status="firing",
        node="n1",
        device_uuid=f"GPU-{n}",
        gpu_uuid=f"GPU-{n}",
        model="A100",
        mig=None,
        sharing="none",
        holders=(),
        figures=AlertFigures(util_pct=0.0, util_threshold_pct=5.0),
        window_s=60,
        started_ms=n,
        ts_ms=n,
        device_wide=False,
        summary=f"idle alert {n}",
    )


async def test_every_alert_arrives_signed_and_failures_are_dead_lettered(
    kafka_bootstrap: str,
) -> None:
    alerts = [make_alert(n) for n in range(12)]
    kafka = await queued(kafka_bootstrap, alerts, partitions=3, poison=True)

    flaky, slack, down = (
        Receiver(fail_first=5, stall_every=7),
        Receiver(),
        Receiver(always_fail=True),
    )
    settings = SinkSettings(
        group_id=f"sink-{uuid.uuid4().hex[:6]}",
        timeout_s=0.5,
        max_attempts=6,
        base_delay_s=0.01,
        max_delay_s=0.05,
        rate_per_s=200,
        burst=20,
    )
    stop = asyncio.Event()
    async with (
        serve(flaky, slack, down) as urls,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=settings.timeout_s)) as session,
        collect(kafka, "deadletter") as dead,
    ):
        dests = [
            WebhookDestination("webhook", SecretStr(urls[0]), session, SecretStr(SECRET)),
            SlackDestination("slack", SecretStr(urls[1]), session),
            WebhookDestination("down", SecretStr(urls[2]), session, SecretStr(SECRET)),
        ]
        task = asyncio.create_task(run_sink(kafka, settings, dests, stop))
        try:
            await wait_for(
                lambda: (
                    len(set(flaky.keys)) == 12 and len(slack.keys) >= 12 and len(dead.records) >= 13
                ),
                timeout_s=60,
                what="deliveries",
            )
        finally:
            stop.set()
            await task
    assert sorted(set(flaky.keys)) == sorted(f"{a.id}:firing" for a in alerts)
    assert flaky.bad_signatures == 0
    # duplicates only ever repeat an idempotency key (a stalled attempt may have landed)
    assert len(flaky.keys) >= 12
    assert b'"blocks"' in slack.bodies[0]
    failures = [r for r in dead.records if isinstance(r, DeliveryFailure)]
    assert sorted(f.alert_id for f in failures if f.destination == "down") == sorted(
        a.id for a in alerts
    )
    assert all(
        f.attempts == 6 and "HTTP 500" in f.last_error for f in failures if f.destination == "down"
    )
    assert [f.destination for f in failures if f.destination == "decode"] == ["decode"]
    assert not any(f.destination in ("webhook", "slack") for f in failures)
    for f in failures:  # secrets never leave the sink; the contract holds
        assert_valid(codec.to_dict(f))
        assert SECRET not in f.last_error
        assert "127.0.0.1" not in f.last_error


async def test_a_backlog_slower_than_the_poll_interval_is_delivered_once_per_key(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """2,000 queued alerts against a destination the rate limit holds to 100/s: 20 s of
    delivery, batches of 500 (5 s each) against a 3 s max poll interval — the proportions of a
    real backlog at 1/s against the default 300 s. The sink keeps polling while it delivers:
    no eviction, no refused commit, every alert delivered exactly once."""
    alerts = [make_alert(n) for n in range(2000)]
    kafka = await queued(kafka_bootstrap, alerts, partitions=2)
    hook = Receiver()
    settings = SinkSettings(
        group_id=f"sink-{uuid.uuid4().hex[:6]}",
        rate_per_s=100,
        burst=1,
        batch_max=500,
        max_poll_interval_s=3,
    )
    stop = asyncio.Event()
    async with (
        serve(hook) as urls,
        aiohttp.ClientSession() as session,
    ):
        dests = [WebhookDestination("webhook", SecretStr(urls[0]), session, SecretStr(SECRET))]
        with caplog.at_level(logging.INFO):
            task = asyncio.create_task(run_sink(kafka, settings, dests, stop))
            try:
                await wait_for(
                    lambda: len(hook.keys) >= len(alerts) or task.done(),
                    timeout_s=120,
                    what=lambda: f"{len(hook.keys)} of {len(alerts)} delivered",
                )
                assert not task.done(), task  # no crash
                said = [r.getMessage() for r in caplog.records]  # before the sink's own leave
            finally:
                stop.set()
                await task
    assert sorted(hook.keys) == sorted(f"{a.id}:firing" for a in alerts)  # each key once
    evicted = [m for m in said if "LeaveGroup" in m or "session expired" in m or "commit" in m]
    assert evicted == []  # never left the group while delivering, never had a commit refused
