"""Security properties: webhook signatures, secrets kept out of logs and records, Kafka TLS and
SASL/SCRAM settings reaching the clients, and an agent that needs no write access.

No Kafka broker here: TLS is proven with a real handshake against a local TLS server using
throwaway certificates (``openssl`` CLI into ``tmp_path``); SASL settings are checked where
they are handed to aiokafka and Faust.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shutil
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import faust
import orjson
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from pydantic import SecretStr

from agents.main import AgentSettings
from agents.publish import Publisher
from contract import codec
from contract.delivery import DeliveryFailure
from contract.outputs import Alert, AlertFigures, Holder
from infra.httpserve import start_site
from infra.kafka import client_options
from infra.settings import (
    DcgmSettings,
    InventorySettings,
    KafkaSettings,
    KubeletSettings,
    KubeSettings,
    SinkSettings,
)
from sinks import receiver
from sinks.delivery import DeliveryError, GaveUp, RateLimiter, RetryPolicy, deliver
from sinks.http import SlackDestination, WebhookDestination
from sinks.payloads import (
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    verify,
    webhook_request,
)
from sinks.runner import Sink, destinations
from streams.worker.app import broker_credentials
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "kustomize" / "base"
MICROK8S = ROOT / "deploy" / "kustomize" / "overlays" / "microk8s"

SECRET = b"whsec-Hk29Lm-signing-key"
SASL_PASSWORD = "sasl-pw-Zq8x7Yw-do-not-log"
WEBHOOK_SECRET = "whsec-Hk29Lm-do-not-log"
SLACK_TOKEN = "xoxSLACKTOKEN12345abc"
WEBHOOK_TOKEN = "hooktoken98765xyz"
SECRETS = (SASL_PASSWORD, WEBHOOK_SECRET, SLACK_TOKEN, WEBHOOK_TOKEN)


def make_alert(status: str = "firing") -> Alert:
    return Alert(
        id="idle-0123456789abcdef01234567",
        kind="idle",
        status=status,  # type: ignore[arg-type]
        node="gpu-node-1",
        device_uuid="GPU-8b2c4a51",
        gpu_uuid="GPU-8b2c4a51",
        model="NVIDIA A100",
        mig=None,
        sharing="mps",
        holders=(
            Holder("ml", "a", "main", "nvidia.com/gpu", ("GPU-8b2c4a51::0",), 1, 0.25, "uid-a"),
            Holder("ml", "b", "main", "nvidia.com/gpu", ("GPU-8b2c4a51::1",), 1, 0.25, "uid-b"),
        ),
        figures=AlertFigures(util_pct=1.0, util_threshold_pct=5.0),
        window_s=1800.0,
        started_ms=1_700_000_000_000,
        ts_ms=1_700_000_900_000,
        device_wide=True,
        summary="idle: 2 tenants sharing GPU-8b2c4a51 (device-wide figure)",
    )


# --- webhook signatures -----------------------------------------------------------------------


def test_signature_accepts_exactly_the_signed_bytes() -> None:
    alert = make_alert()
    body, headers = webhook_request(codec.encode(alert), alert, SECRET, 1_700_000_000)
    stamp, signature = int(headers[TIMESTAMP_HEADER]), headers[SIGNATURE_HEADER]
    assert signature.startswith("v1=")
    assert len(signature) == 3 + 64
    assert verify(SECRET, stamp, body, signature)
    assert headers[IDEMPOTENCY_HEADER] == f"{alert.id}:firing"
    assert SECRET.decode() not in orjson.dumps(headers).decode() + body.decode()

    tampered = body.replace(b'"firing"', b'"resolved"')
    assert tampered != body
    assert not verify(SECRET, stamp, tampered, signature)
    assert not verify(SECRET, stamp, body + b" ", signature)
    assert not verify(b"another-secret", stamp, body, signature)
    assert not verify(SECRET, stamp + 1, body, signature)  # the timestamp is signed too
    assert not verify(SECRET, stamp, body, signature.replace("v1=", "v0="))
    assert not verify(SECRET, stamp, body, signature[:-1] + ("0" if signature[-1] != "0" else "1"))
    assert not verify(SECRET, stamp, body, "")


def test_without_a_secret_nothing_is_signed() -> None:
    alert = make_alert()
    _, headers = webhook_request(codec.encode(alert), alert, None, 1)
    assert SIGNATURE_HEADER not in headers
    assert headers[IDEMPOTENCY_HEADER]


def test_firing_and_resolved_get_distinct_idempotency_keys() -> None:
    keys = {
        webhook_request(codec.encode(a), a, SECRET, 1)[1][IDEMPOTENCY_HEADER]
        for a in (make_alert("firing"), make_alert("resolved"), make_alert("firing"))
    }
    assert len(keys) == 2


@pytest.fixture
async def receiver_client() -> AsyncIterator[TestClient[Any, Any]]:
    client = TestClient(TestServer(receiver.app(SECRET)))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


async def post_signed(
    client: TestClient[Any, Any],
    *,
    secret: bytes = SECRET,
    skew_s: int = 0,
    sent_body: bytes | None = None,
    drop: str | None = None,
    headers: dict[str, str] | None = None,
) -> int:
    alert = make_alert()
    signed, hdrs = webhook_request(codec.encode(alert), alert, secret, int(time.time()) + skew_s)
    hdrs.update(headers or {})
    if drop:
        del hdrs[drop]
    resp = await client.post(
        "/alerts", data=sent_body if sent_body is not None else signed, headers=hdrs
    )
    return resp.status


@pytest.mark.parametrize("skew_s", [0, -receiver.MAX_SKEW_S + 30, receiver.MAX_SKEW_S - 30])
async def test_receiver_accepts_a_correctly_signed_fresh_request(
    receiver_client: TestClient[Any, Any], capsys: pytest.CaptureFixture[str], skew_s: int
) -> None:
    assert await post_signed(receiver_client, skew_s=skew_s) == 200
    assert "idle-0123456789abcdef01234567:firing" in capsys.readouterr().out


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param({"sent_body": b'{"schema":"alert","forged":true}'}, id="tampered-body"),
        pytest.param({"secret": b"not-the-secret"}, id="wrong-secret"),
        pytest.param({"skew_s": -receiver.MAX_SKEW_S - 60}, id="stale"),
        pytest.param({"skew_s": receiver.MAX_SKEW_S + 60}, id="future"),
        pytest.param({"drop": SIGNATURE_HEADER}, id="no-signature"),
        pytest.param({"drop": TIMESTAMP_HEADER}, id="no-timestamp"),
        pytest.param({"headers": {TIMESTAMP_HEADER: "soon"}}, id="timestamp-not-a-number"),
        pytest.param({"headers": {SIGNATURE_HEADER: "v1=" + "0" * 64}}, id="forged-signature"),
    ],
)
async def test_receiver_rejects_what_was_not_signed_now_with_the_secret(
    receiver_client: TestClient[Any, Any],
    capsys: pytest.CaptureFixture[str],
    tamper: dict[str, Any],
) -> None:
    assert await post_signed(receiver_client, **tamper) == 401
    out = capsys.readouterr().out
    assert "rejected" in out
    assert "idle-0123456789abcdef01234567" not in out


async def test_a_replayed_signature_with_a_new_timestamp_is_rejected(
    receiver_client: TestClient[Any, Any],
) -> None:
    old = int(time.time()) - receiver.MAX_SKEW_S - 60
    alert = make_alert()
    body, headers = webhook_request(codec.encode(alert), alert, SECRET, old)
    headers[TIMESTAMP_HEADER] = str(int(time.time()))  # fresh stamp, old signature
    resp = await receiver_client.post("/alerts", data=body, headers=headers)
    assert resp.status == 401


async def test_the_sink_signs_what_the_receiver_verifies() -> None:
    """WebhookDestination → receiver app over real HTTP, with the same secret."""
    runner, _, port = await start_site(receiver.app(SECRET), "127.0.0.1", 0, 0.1)
    try:
        async with aiohttp.ClientSession() as session:
            dest = WebhookDestination(
                "webhook",
                SecretStr(f"http://127.0.0.1:{port}/hook"),
                session,
                SecretStr(SECRET.decode()),
            )
            alert = make_alert()
            await dest.send(alert, codec.encode(alert))  # raises DeliveryError on a 401
            wrong = WebhookDestination(
                "webhook", SecretStr(f"http://127.0.0.1:{port}/hook"), session, SecretStr("nope")
            )
            with pytest.raises(DeliveryError, match="HTTP 401"):
                await wrong.send(alert, codec.encode(alert))
    finally:
        await runner.cleanup()


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


# --- Kafka TLS and SASL/SCRAM settings reach the clients -------------------------------------


@dataclass(frozen=True)
class Pki:
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _self_signed(directory: Path, name: str, cn: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            f"/CN={cn}",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    assert shutil.which("openssl"), "the openssl CLI makes the throwaway certificates"
    directory = tmp_path_factory.mktemp("pki")
    server = _self_signed(directory, "broker", "localhost")
    client = _self_signed(directory, "agent", "gpuattr-agent")
    return Pki(*server, *client)


def common_names(cert: Any) -> list[str]:
    """The CNs of a certificate as ``ssl`` decodes it (``subject`` is a tuple of RDNs)."""
    return [value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]


@contextlib.asynccontextmanager
async def tls_broker(pki: Pki, peers: list[str]) -> AsyncIterator[int]:
    """A TLS listener that demands a client certificate signed by the agent's (self-signed) CA."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.client_cert))
    ctx.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    ctx.verify_mode = ssl.CERT_REQUIRED

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.extend(common_names(writer.get_extra_info("peercert") or {}))
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def handshake(port: int, context: ssl.SSLContext) -> bytes:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="localhost"
    )
    try:
        return await asyncio.wait_for(reader.read(2), 5)
    finally:
        writer.close()
        with contextlib.suppress(ssl.SSLError, ConnectionError):
            await writer.wait_closed()


def tls_settings(
    pki: Pki, protocol: str, *, client_cert: bool, ca: Path | None = None
) -> KafkaSettings:
    return KafkaSettings(
        bootstrap="broker:9093",
        security_protocol=protocol,
        sasl_mechanism="SCRAM-SHA-512" if protocol.startswith("SASL") else None,
        sasl_username="gpuattr" if protocol.startswith("SASL") else None,
        sasl_password=SecretStr(SASL_PASSWORD) if protocol.startswith("SASL") else None,
        ssl_cafile=ca or pki.server_cert,
        ssl_certfile=pki.client_cert if client_cert else None,
        ssl_keyfile=pki.client_key if client_cert else None,
    )


def contexts(kafka: KafkaSettings) -> dict[str, ssl.SSLContext]:
    """The TLS context each client family gets: aiokafka (agent, sink, admin) and Faust (worker)."""
    aiokafka_ctx = client_options(kafka)["ssl_context"]
    faust_ctx = credentials_to_aiokafka_auth(broker_credentials(kafka))["ssl_context"]
    return {"aiokafka": aiokafka_ctx, "faust": faust_ctx}


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
async def test_tls_with_client_certificate_completes_a_mutual_handshake(
    pki: Pki, protocol: str
) -> None:
    kafka = tls_settings(pki, protocol, client_cert=True)
    for family, ctx in contexts(kafka).items():
        assert ctx.verify_mode == ssl.CERT_REQUIRED, family
        assert ctx.check_hostname, family
        peers: list[str] = []
        async with tls_broker(pki, peers) as port:
            assert await handshake(port, ctx) == b"ok", family
        assert peers == ["gpuattr-agent"], family  # the broker saw our client certificate


async def test_without_a_client_certificate_the_broker_refuses(pki: Pki) -> None:
    kafka = tls_settings(pki, "SSL", client_cert=False)
    for family, ctx in contexts(kafka).items():
        peers: list[str] = []
        async with tls_broker(pki, peers) as port:
            with contextlib.suppress(ssl.SSLError, ConnectionError):
                assert await handshake(port, ctx) != b"ok", family
        assert peers == [], family


async def test_a_broker_outside_the_configured_ca_is_refused(pki: Pki) -> None:
    kafka = tls_settings(pki, "SASL_SSL", client_cert=True, ca=pki.client_cert)  # wrong CA
    for family, ctx in contexts(kafka).items():
        peers: list[str] = []
        async with tls_broker(pki, peers) as port:
            with pytest.raises(ssl.SSLCertVerificationError):
                await handshake(port, ctx)
        assert peers == [], family


def test_sasl_ssl_scram_sha_512_reaches_aiokafka_and_faust(pki: Pki) -> None:
    kafka = tls_settings(pki, "SASL_SSL", client_cert=False)
    opts = client_options(kafka)
    assert opts["security_protocol"] == "SASL_SSL"
    assert opts["sasl_mechanism"] == "SCRAM-SHA-512"
    assert opts["sasl_plain_username"] == "gpuattr"
    assert opts["sasl_plain_password"] == SASL_PASSWORD
    assert isinstance(opts["ssl_context"], ssl.SSLContext)
    credentials = broker_credentials(kafka)
    assert isinstance(credentials, faust.SASLCredentials)
    worker = credentials_to_aiokafka_auth(credentials)
    assert {k: worker[k] for k in opts if k != "ssl_context"} == {
        k: v for k, v in opts.items() if k != "ssl_context"
    }
    assert isinstance(worker["ssl_context"], ssl.SSLContext)
    subjects = {cn for cert in worker["ssl_context"].get_ca_certs() for cn in common_names(cert)}
    assert "localhost" in subjects  # the configured CA, not only the system store


@pytest.mark.parametrize(
    ("protocol", "mechanism", "tls"),
    [
        ("PLAINTEXT", None, False),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256", False),
        ("SASL_PLAINTEXT", None, False),  # no mechanism: PLAIN
        ("SSL", None, True),
        ("SASL_SSL", "SCRAM-SHA-512", True),
    ],
)
async def test_every_protocol_is_accepted_by_every_client(
    pki: Pki, protocol: str, mechanism: str | None, tls: bool
) -> None:
    sasl = protocol.startswith("SASL")
    kafka = KafkaSettings(
        bootstrap="127.0.0.1:9",
        security_protocol=protocol,
        sasl_mechanism=mechanism,
        sasl_username="gpuattr" if sasl else None,
        sasl_password=SecretStr(SASL_PASSWORD) if sasl else None,
        ssl_cafile=pki.server_cert if tls else None,
    )
    opts = client_options(kafka)
    assert opts["security_protocol"] == protocol
    assert ("ssl_context" in opts) is tls
    assert opts.get("sasl_mechanism") == ((mechanism or "PLAIN") if sasl else None)
    worker = credentials_to_aiokafka_auth(broker_credentials(kafka))
    assert worker["security_protocol"] == protocol
    assert worker.get("sasl_mechanism") == opts.get("sasl_mechanism")
    assert worker.get("sasl_plain_password") == opts.get("sasl_plain_password")
    assert (worker.get("ssl_context") is not None) is tls
    if protocol == "PLAINTEXT":
        assert broker_credentials(kafka) is None
    # the aiokafka clients the agent, sink and topic admin build take these options as they are
    clients: list[Any] = [
        AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, **opts),
        AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, **opts),
        AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap, **opts),
    ]
    for client in clients:
        await (client.close() if isinstance(client, AIOKafkaAdminClient) else client.stop())


# --- the agent needs no write access ----------------------------------------------------------


def _docs(directory: Path) -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for name in kustomization.get("resources", []):
        path = directory / name
        if path.is_dir():
            docs += _docs(path)
        else:
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _microk8s_docs() -> list[dict[str, Any]]:
    import json

    import jsonpatch

    overlay = yaml.safe_load((MICROK8S / "kustomization.yaml").read_text())
    docs = _docs(BASE)
    for patch in overlay.get("patches", []):
        ops = json.loads((MICROK8S / patch["path"]).read_text())
        target = patch["target"]
        docs = [
            jsonpatch.apply_patch(d, ops)
            if (d["kind"], d["metadata"]["name"]) == (target["kind"], target["name"])
            else d
            for d in docs
        ]
    return docs


RENDERS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "base": lambda: _docs(BASE),
    "microk8s": _microk8s_docs,
}
READ_VERBS = {"get", "list", "watch"}


@pytest.mark.parametrize("render", sorted(RENDERS))
def test_agent_daemonset_cannot_write_to_the_node(render: str) -> None:
    docs = RENDERS[render]()
    (agent,) = [d for d in docs if d["kind"] == "DaemonSet" and "agent" in d["metadata"]["name"]]
    pod = agent["spec"]["template"]["spec"]
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    host_volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert any(path.endswith("/pod-resources") for path in host_volumes.values())
    for ctr in [*pod["containers"], *pod.get("initContainers", [])]:
        sec = ctr["securityContext"]
        assert sec["readOnlyRootFilesystem"] is True
        assert sec["allowPrivilegeEscalation"] is False
        assert not sec.get("privileged", False)
        assert sec["capabilities"]["drop"] == ["ALL"]
        assert not sec["capabilities"].get("add")
        mounts = {m["name"]: m for m in ctr.get("volumeMounts", [])}
        for name, path in host_volumes.items():
            if name in mounts:
                assert mounts[name].get("readOnly") is True, f"{path} mounted writable"
        pod_resources = [
            m for n, m in mounts.items() if host_volumes.get(n, "").endswith("/pod-resources")
        ]
        assert pod_resources
        assert all(m["readOnly"] is True for m in pod_resources)


def test_agent_service_account_can_only_read_pods_and_nodes() -> None:
    docs = _docs(BASE)
    (agent,) = [d for d in docs if d["kind"] == "DaemonSet" and "agent" in d["metadata"]["name"]]
    account = agent["spec"]["template"]["spec"]["serviceAccountName"]
    namespace = agent["metadata"]["namespace"]
    roles = {
        (d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("Role", "ClusterRole")
    }
    bound = [
        (d["roleRef"]["kind"], d["roleRef"]["name"])
        for d in docs
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(
            s["kind"] == "ServiceAccount"
            and s["name"] == account
            and s.get("namespace", d["metadata"].get("namespace")) == namespace
            for s in d.get("subjects", [])
        )
    ]
    assert bound, "the agent's service account is bound to no role"
    for ref in bound:
        rules = roles[ref]["rules"]
        assert rules
        for rule in rules:
            assert set(rule["verbs"]) <= READ_VERBS, rule
            assert "*" not in rule.get("resources", [])
            assert "*" not in rule.get("apiGroups", [])
            assert set(rule["resources"]) <= {"pods", "nodes"}, rule
            assert "nonResourceURLs" not in rule
            assert "resourceNames" not in rule
    for doc in docs:  # no other role in the base may write anything either
        for rule in doc.get("rules", []) if doc["kind"] in ("Role", "ClusterRole") else []:
            assert set(rule["verbs"]) <= READ_VERBS, (doc["metadata"]["name"], rule)


def test_sasl_without_credentials_is_refused_naming_the_settings() -> None:
    from pydantic import ValidationError

    from infra.settings import KafkaSettings

    with pytest.raises(ValidationError, match="GPUATTR_KAFKA_SASL_PASSWORD") as info:
        KafkaSettings(bootstrap="k:9093", security_protocol="SASL_SSL", sasl_username="u")
    assert "k:9093" not in str(info.value)  # inputs are hidden from validation errors
    with pytest.raises(ValidationError) as info:  # a password next to a bad value stays hidden
        KafkaSettings(security_protocol="SASL_SSL", sasl_password=SASL_PASSWORD, partitions=0)
    assert SASL_PASSWORD not in str(info.value)
    ok = KafkaSettings(
        bootstrap="k:9093", security_protocol="SASL_SSL", sasl_username="u", sasl_password="p"
    )
    assert ok.sasl_password is not None
