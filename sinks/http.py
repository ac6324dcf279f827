"""HTTP destinations: Slack incoming webhooks and generic signed webhooks (aiohttp).

URLs and signing keys are secrets: error messages name the destination, never its URL.
"""

from __future__ import annotations

import time

import aiohttp
from pydantic import SecretStr

from contract.outputs import Alert
from sinks.delivery import DeliveryError
from sinks.payloads import slack_body, webhook_request


def _verdict(status: int, text: str) -> None:
    if 200 <= status < 300:
        return
    retryable = status in (408, 425, 429) or status >= 500
    # The body is not quoted: an error page may echo the request path, which holds the secret
    # part of a webhook URL. Its size is enough to tell pages apart when debugging.
    raise DeliveryError(f"HTTP {status} ({len(text)} bytes of body)", retryable=retryable)


class _Http:
    def __init__(self, name: str, url: SecretStr, session: aiohttp.ClientSession) -> None:
        self.name = name
        self._url = url
        self._session = session

    async def _post(self, body: bytes, headers: dict[str, str]) -> None:
        try:
            async with self._session.post(
                self._url.get_secret_value(), data=body, headers=headers
            ) as resp:
                _verdict(resp.status, await resp.text())
        except TimeoutError:
            raise DeliveryError("timed out") from None
        except aiohttp.ClientError as exc:
            raise DeliveryError(f"{type(exc).__name__}") from None


class SlackDestination(_Http):
    """Slack incoming webhook: a Block Kit message."""

    async def send(self, alert: Alert, payload: bytes) -> None:
        await self._post(slack_body(alert), {"Content-Type": "application/json"})


class WebhookDestination(_Http):
    """Generic webhook: the alert JSON, HMAC-signed, with its idempotency key."""

    def __init__(
        self, name: str, url: SecretStr, session: aiohttp.ClientSession, secret: SecretStr | None
    ) -> None:
        super().__init__(name, url, session)
        self._secret = secret

    async def send(self, alert: Alert, payload: bytes) -> None:
        key = self._secret.get_secret_value().encode() if self._secret else None
        body, headers = webhook_request(payload, alert, key, int(time.time()))
        await self._post(body, headers)
