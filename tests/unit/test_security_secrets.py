"""Security properties: secrets kept out of logs, reprs and records — settings, refused or
unreachable webhook deliveries and their dead letters, error pages echoing the URL, and the
agent retrying an unreachable SASL broker (aiokafka's logs included).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import SimpleNamespace

import aiohttp
import pytest
from aiohttp import web
from pydantic import SecretStr

from agents.main import AgentSettings
from agents.publish import Publisher
from contract import codec
from contract.delivery import DeliveryFailure
from infra.httpserve import start_site
from infra.settings import (
    DcgmSettings,
    InventorySettings,
    KafkaSettings,
    KubeletSettings,
    KubeSettings,
    SinkSettings,
)
from sinks.delivery import GaveUp, RateLimiter, RetryPolicy, deliver
from sinks.http import SlackDestination
from sinks.payloads import SIGNATURE_HEADER
from sinks.runner import Sink, destinations
from streams.worker.app import broker_credentials
from tests.helpers import wait_for
from tests.security_helpers import (
    SASL_PASSWORD,
    SECRETS,
    SLACK_TOKEN,
    WEBHOOK_SECRET,
    WEBHOOK_TOKEN,
    make_alert,
)

# --- secrets never in logs, reprs or records --------------------------------------------------


def assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"secret {secret[:6]}... leaked into {where}"


def secret_settings(port: int = 9) -> tuple[KafkaSettings, SinkSettings]:
    kafka = KafkaSettings(
        bootstrap=f"127.0.0.1:{port}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="gpuattr",
        sasl_password=SecretStr(SASL_PASSWORD),
    )
    sink = SinkSettings(
        slack_webhook_url=SecretStr(f"http://127.0.0.1:{port}/services/T000/B000/{SLACK_TOKEN}"),
        webhook_url=SecretStr(f"http://127.0.0.1:{port}/hook/{WEBHOOK_TOKEN}"),
        webhook_secret=SecretStr(WEBHOOK_SECRET),
        max_attempts=2,
        base_delay_s=0.001,
        max_delay_s=0.002,
        rate_per_s=1000,
        burst=100,
        timeout_s=2,
    )
    return kafka, sink


def test_settings_never_render_their_secrets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    kafka, sink = secret_settings()
    agent = AgentSettings(
        node="n1",
        kafka=kafka,
        kubelet=KubeletSettings(),
        dcgm=DcgmSettings(),
        kube=KubeSettings(),
        inventory=InventorySettings(),
    )
    log = logging.getLogger("tests.security")
    for obj in (kafka, sink, agent):
        log.debug("settings %s %r", obj, obj)
        assert_no_secret(f"{obj} {obj!r} {obj.__dict__}", type(obj).__name__)
    for model in (kafka, sink):
        assert_no_secret(model.model_dump_json(), "model_dump_json")
        assert_no_secret(str(model.model_dump()), "model_dump")
    credentials = broker_credentials(kafka)
    log.debug("credentials %r", credentials)
    assert_no_secret(repr(credentials), "faust credentials")
    assert_no_secret(caplog.text, "logs")
    assert kafka.sasl_password is not None
    assert kafka.sasl_password.get_secret_value() == SASL_PASSWORD  # still usable


@dataclass
class Refuser:
    """An HTTP endpoint that refuses every alert; remembers what it was sent."""

    status: int = 503
    text: str = "upstream unavailable"
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, dict(request.headers), await request.read()))
        return web.Response(status=self.status, text=self.text)


@dataclass
class FakeProducer:
    sent: list[tuple[str, bytes, bytes]] = field(default_factory=list)

    async def send_and_wait(self, topic: str, value: bytes, key: bytes) -> None:
        self.sent.append((topic, value, key))


@contextlib.asynccontextmanager
async def refusing(handler: Refuser) -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_post("/{tail:.*}", handler.handle)
    runner, _, port = await start_site(app, "127.0.0.1", 0, 0.1)
    try:
        yield port
    finally:
        await runner.cleanup()


async def run_sink_once(port: int, handler: Refuser) -> tuple[list[DeliveryFailure], FakeProducer]:
    kafka, sink_settings = secret_settings(port)
    producer = FakeProducer()
    alert = make_alert()
    msg = SimpleNamespace(value=codec.encode(alert), partition=2, offset=41, key=b"k")
    async with aiohttp.ClientSession() as session:
        sink = Sink(kafka, sink_settings, destinations(sink_settings, session), producer)
        await sink.handle(msg)
    failures = [codec.decode(value) for _, value, _ in producer.sent]
    assert all(isinstance(f, DeliveryFailure) for f in failures)
    return failures, producer


async def test_refused_deliveries_log_and_dead_letter_no_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    handler = Refuser()
    async with refusing(handler) as port:
        failures, producer = await run_sink_once(port, handler)
    assert sorted(f.destination for f in failures) == ["slack", "webhook"]
    assert all(f.attempts == 2 and f.last_error.startswith("HTTP 503") for f in failures)
    assert len(handler.requests) == 4  # two attempts per destination: the secrets were used
    hook = [r for r in handler.requests if r[0].startswith("/hook/")]
    assert hook
    assert all(SIGNATURE_HEADER in headers for _, headers, _ in hook)
    assert_no_secret(caplog.text, "logs")
    for _, value, key in producer.sent:
        assert_no_secret(value.decode() + key.decode(), "dead-letter record")
    assert "giving up" in caplog.text
    assert "slack" in caplog.text


async def test_unreachable_or_malformed_destinations_log_no_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with refusing(Refuser()) as port:
        pass  # the port is closed again: nothing listens there now
    failures, producer = await run_sink_once(port, Refuser())
    assert {f.destination for f in failures} == {"slack", "webhook"}
    assert all(f.last_error.startswith("Client") for f in failures), failures
    async with aiohttp.ClientSession() as session:
        for bad in (f"127.0.0.1/services/{SLACK_TOKEN}", f"http://[::1/{WEBHOOK_TOKEN}"):
            dest = SlackDestination("slack", SecretStr(bad), session)
            verdict = await deliver(
                make_alert(),
                b"{}",
                dest,
                RateLimiter(1000, 10),
                RetryPolicy(max_attempts=1),
                random.Random(0),
            )
            assert isinstance(verdict, GaveUp), verdict  # refused, not raised
            assert verdict.last_error == "InvalidUrlClientError"
            assert_no_secret(repr(verdict), "delivery verdict")
    assert_no_secret(caplog.text, "logs")
    for _, value, _ in producer.sent:
        assert_no_secret(value.decode(), "dead-letter record")


async def test_an_error_page_echoing_the_url_leaks_no_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    handler = Refuser(status=404)

    async def echo(request: web.Request) -> web.Response:
        handler.requests.append((request.path, dict(request.headers), await request.read()))
        return web.Response(status=404, text=f"Cannot POST {request.path}")

    handler.handle = echo  # type: ignore[method-assign]
    async with refusing(handler) as port:
        failures, producer = await run_sink_once(port, handler)
    assert len(failures) == 2
    assert_no_secret(caplog.text, "logs")
    for _, value, _ in producer.sent:
        assert_no_secret(value.decode(), "dead-letter record")


async def test_agent_kafka_failures_log_no_password(caplog: pytest.LogCaptureFixture) -> None:
    """The agent's publisher retrying an unreachable SASL broker, aiokafka's logs included."""
    caplog.set_level(logging.DEBUG)
    async with refusing(Refuser()) as port:
        pass  # a closed port
    kafka, _ = secret_settings(port)
    publisher = Publisher(kafka, max_backoff_s=0.2)
    task = asyncio.create_task(publisher.start())
    try:
        await wait_for(
            lambda: "Kafka not reachable" in caplog.text, timeout_s=10, what="a retry warning"
        )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await publisher.stop()
    assert f"127.0.0.1:{port}" in caplog.text  # the log says where, with context
    assert_no_secret(caplog.text, "logs")
