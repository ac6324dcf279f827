"""Security properties of alert webhooks: signatures over the timestamp, the idempotency key and
the body of what the sink sends; a receiver that accepts only a request signed now with the
secret (tampered bodies or keys, wrong secrets, stale, future or replayed timestamps and missing
headers are refused); and no sink or receiver that starts with a placeholder, empty or short
signing key.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from pydantic import SecretStr, ValidationError

from contract import codec
from infra.httpserve import start_site
from infra.settings import KafkaSettings, SinkSettings
from sinks import receiver
from sinks.delivery import DeliveryError
from sinks.http import WebhookDestination
from sinks.payloads import (
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    verify,
    webhook_request,
)
from tests.security_helpers import SECRET, make_alert

# --- webhook signatures -----------------------------------------------------------------------


def test_signature_accepts_exactly_the_signed_bytes() -> None:
    alert = make_alert()
    body, headers = webhook_request(codec.encode(alert), alert, SECRET, 1_700_000_000)
    stamp, signature = int(headers[TIMESTAMP_HEADER]), headers[SIGNATURE_HEADER]
    key = headers[IDEMPOTENCY_HEADER]
    assert signature.startswith("v2=")
    assert len(signature) == 3 + 64
    assert verify(SECRET, stamp, key, body, signature)
    assert key == f"{alert.id}:firing"
    assert SECRET.decode() not in orjson.dumps(headers).decode() + body.decode()

    tampered = body.replace(b'"firing"', b'"resolved"')
    assert tampered != body
    assert not verify(SECRET, stamp, key, tampered, signature)
    assert not verify(SECRET, stamp, key, body + b" ", signature)
    assert not verify(b"another-secret", stamp, key, body, signature)
    assert not verify(SECRET, stamp + 1, key, body, signature)  # the timestamp is signed too
    assert not verify(SECRET, stamp, f"{alert.id}:resolved", body, signature)  # and the key
    assert not verify(SECRET, stamp, key + "-2", body, signature)
    assert not verify(SECRET, stamp, key, body, signature.replace("v2=", "v1="))
    wrong = signature[:-1] + ("0" if signature[-1] != "0" else "1")
    assert not verify(SECRET, stamp, key, body, wrong)
    assert not verify(SECRET, stamp, key, body, "")


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
        pytest.param({"headers": {SIGNATURE_HEADER: "v2=" + "0" * 64}}, id="forged-signature"),
        # the idempotency key is signed: a replay under a fresh key would pass a receiver's dedupe
        pytest.param(
            {"headers": {IDEMPOTENCY_HEADER: "idle-0123456789abcdef01234567:resolved"}},
            id="idempotency-key-changed",
        ),
        pytest.param({"drop": IDEMPOTENCY_HEADER}, id="no-idempotency-key"),
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


# --- no placeholder or missing signing key ----------------------------------------------------

HOOK = "https://hooks.example.com/gpuattr/T0123"


@pytest.mark.parametrize(
    "key",
    ["change-me", "CHANGE-ME", " changeme ", "<your-signing-key>", "secret", "short-key"],
)
def test_a_placeholder_or_short_signing_key_is_refused(key: str) -> None:
    for url in (HOOK, None):  # refused whether or not a webhook is configured yet
        with pytest.raises(ValidationError, match="GPUATTR_SINK_WEBHOOK_SECRET") as info:
            SinkSettings(webhook_url=url, webhook_secret=key)
        assert key.strip() not in str(info.value).replace("GPUATTR_SINK_WEBHOOK_SECRET", "")


@pytest.mark.parametrize("key", [None, ""])
def test_a_webhook_without_a_signing_key_is_refused(key: str | None) -> None:
    with pytest.raises(ValidationError, match="GPUATTR_SINK_WEBHOOK_URL needs"):
        SinkSettings(webhook_url=HOOK, webhook_secret=key)


def test_a_real_key_or_no_webhook_at_all_starts() -> None:
    assert SinkSettings(webhook_url=HOOK, webhook_secret=SECRET.decode()).webhook_secret
    assert SinkSettings(webhook_url="", webhook_secret="").webhook_url is not None  # the manifests
    assert SinkSettings(slack_webhook_url=HOOK).slack_webhook_url  # Slack signs nothing of ours


def test_a_placeholder_kafka_password_is_refused() -> None:
    with pytest.raises(ValidationError, match="GPUATTR_KAFKA_SASL_PASSWORD is a placeholder"):
        KafkaSettings(security_protocol="SASL_SSL", sasl_username="u", sasl_password="change-me")


@pytest.mark.parametrize("command", ["sink", "receiver"])
def test_the_sink_and_the_receiver_refuse_to_start_with_the_placeholder(command: str) -> None:
    env = {
        **os.environ,
        "GPUATTR_KAFKA_BOOTSTRAP": "127.0.0.1:9",
        "GPUATTR_SINK_WEBHOOK_URL": HOOK,
        "GPUATTR_SINK_WEBHOOK_SECRET": "change-me",
    }
    done = subprocess.run(
        [sys.executable, "-m", "gpuattr.cli", command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "GPUATTR_SINK_WEBHOOK_SECRET is a placeholder" in done.stderr
    assert "Traceback" not in done.stderr
    assert "change-me" not in done.stderr
