"""``gpuattr receiver``: a webhook endpoint that verifies signatures and prints what it gets.

For laptops and compose files: the other end of ``gpuattr sink``'s generic webhook.
"""

from __future__ import annotations

import time

from aiohttp import web

from sinks.payloads import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, verify

MAX_SKEW_S = 300


def app(secret: bytes | None) -> web.Application:
    seen: set[str] = set()

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        if secret is not None:
            try:
                stamp = int(request.headers[TIMESTAMP_HEADER])
                key = request.headers[IDEMPOTENCY_HEADER]
                good = verify(secret, stamp, key, body, request.headers[SIGNATURE_HEADER])
            except (KeyError, ValueError):
                good = False
            if not good or abs(time.time() - stamp) > MAX_SKEW_S:
                print("rejected: bad or stale signature", flush=True)
                return web.Response(status=401)
        key = request.headers.get(IDEMPOTENCY_HEADER, "")
        duplicate = key in seen
        seen.add(key)
        print(
            f"{'duplicate ' if duplicate else ''}{key}: {body.decode(errors='replace')}", flush=True
        )
        return web.Response(text="ok")

    application = web.Application()
    application.router.add_post("/{tail:.*}", hook)
    return application


def run(host: str, port: int, secret: str | None) -> int:
    web.run_app(
        app(secret.encode() if secret else None), host=host, port=port, print=lambda *_: None
    )
    return 0
