"""Security properties of alert webhooks: signatures and idempotency keys on what the sink sends,
and a receiver that accepts only a request signed now with the secret (tampered bodies, wrong
secrets, stale, future or replayed timestamps and missing headers are refused).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from pydantic import SecretStr

from contract import codec
from infra.httpserve import start_site
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
