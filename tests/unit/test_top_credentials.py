"""``gpuattr top`` sends the query API's bearer token on every request (a real HTTP server
records what it gets), and says so plainly when the API refuses it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import orjson
import pytest
from aiohttp import web

from gpuattr.top import run

TOKEN = "top-token-0123456789abcdef"


@pytest.fixture
async def api() -> AsyncIterator[tuple[str, list[str | None]]]:
    """A query API that answers only ``TOKEN``; the Authorization header of every request."""
    seen: list[str | None] = []

    async def listing(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            body, status = {"error": "no bearer token"}, 401
        elif request.path.endswith("/demand"):
            body, status = {"pools": []}, 200
        else:
            body, status = {"devices": [], "nodes": [], "workers": ["w"], "count": 0}, 200
        return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/devices", listing)
    app.router.add_get("/api/v1/demand", listing)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}", seen
    finally:
        await runner.cleanup()


async def once(url: str, credentials: Mapping[str, str]) -> int:
    return await run(
        url, {}, "node", interval_s=1, once=True, as_json=True, credentials=lambda: credentials
    )


async def test_top_sends_the_token_on_every_request(
    api: tuple[str, list[str | None]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, seen = api
    assert await once(url, {"Authorization": f"Bearer {TOKEN}"}) == 0
    assert seen == [f"Bearer {TOKEN}"] * 2  # the devices and the demand
    assert orjson.loads(capsys.readouterr().out)["workers"] == ["w"]


async def test_a_refused_token_is_said_plainly(
    api: tuple[str, list[str | None]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, seen = api
    assert await once(url, {}) == 1
    assert seen == [None]
    assert "HTTP 401: no bearer token" in capsys.readouterr().err
