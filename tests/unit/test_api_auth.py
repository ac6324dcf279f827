"""The query API answers only callers with credentials: the bearer token read from the request,
the configured token, the API server's reviews kept a short while (fake clock), and two workers
on real HTTP servers — no token or a wrong one is refused, the right one gets the rows, peers
gather with their own token, and the probes and /metrics need none."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from faust.types import TP
from kubernetes_asyncio.config import ConfigException
from pydantic import SecretStr, ValidationError

from gpuattr.localkafka.broker import free_port
from infra.apicreds import auth_headers
from infra.settings import ApiSettings
from streams.worker.api import QueryApi
from streams.worker.apiauth import (
    ALLOWED,
    NO_TOKEN,
    WRONG_TOKEN,
    ApiGuard,
    KubeReview,
    Verdict,
    bearer,
)
from streams.worker.livedemand import LiveDemand
from streams.worker.peers import PeerPolicy

TOKEN = "a3f1c9e07b2d4e6f8a1b3c5d7e9f0a2b"
INPUT = "gpuattr.node-events"
DEMAND = "gpuattr.demand-events"


@pytest.mark.parametrize(
    ("header", "token"),
    [
        pytest.param(None, None, id="no-header"),
        pytest.param("", None, id="empty"),
        pytest.param(f"Bearer {TOKEN}", TOKEN, id="bearer"),
        pytest.param(f"bearer  {TOKEN} ", TOKEN, id="scheme-in-any-case-spaces-around"),
        pytest.param(f"Basic {TOKEN}", None, id="another-scheme"),
        pytest.param("Bearer", None, id="no-token"),
        pytest.param("Bearer a b", None, id="two-words"),
    ],
)
def test_the_bearer_token_of_a_header(header: str | None, token: str | None) -> None:
    assert bearer(header) == token


@pytest.mark.parametrize(
    ("header", "path", "verdict"),
    [
        pytest.param(None, "/api/v1/devices", NO_TOKEN, id="no-token"),
        pytest.param("Bearer not-it", "/api/v1/devices", WRONG_TOKEN, id="wrong-token"),
        pytest.param(f"Bearer {TOKEN}x", "/api/v1/devices", WRONG_TOKEN, id="longer-token"),
        pytest.param(f"Bearer {TOKEN}", "/api/v1/devices", ALLOWED, id="right-token"),
        pytest.param(f"Bearer {TOKEN}", "/api/v1/local/devices", ALLOWED, id="peers-listing"),
        pytest.param(None, "/healthz", ALLOWED, id="liveness-probe"),
        pytest.param(None, "/readyz", ALLOWED, id="readiness-probe"),
        pytest.param(None, "/metrics", ALLOWED, id="prometheus-scrape"),
    ],
)
async def test_the_configured_token(header: str | None, path: str, verdict: Verdict) -> None:
    assert await ApiGuard(SecretStr(TOKEN), None, 10).check(header, path) == verdict


async def test_nothing_configured_lets_nobody_in() -> None:
    guard = ApiGuard(None, None, 10)
    assert not guard.configured
    assert await guard.check(f"Bearer {TOKEN}", "/api/v1/devices") == WRONG_TOKEN


async def test_the_api_servers_decisions_are_kept_for_their_ttl_only() -> None:
    now = [0.0]
    asked: list[tuple[str, str]] = []
    answers = {"reader-token": ALLOWED, "stranger-token": Verdict(403, "x may not get")}

    async def review(token: str, path: str) -> Verdict:
        asked.append((token, path))
        return answers.get(token, Verdict(503, "down")) if token != "gone" else WRONG_TOKEN

    guard = ApiGuard(SecretStr(TOKEN), review, 10, now=lambda: now[0])
    assert await guard.check(f"Bearer {TOKEN}", "/api/v1/devices") == ALLOWED  # not reviewed
    for _ in range(3):
        assert await guard.check("Bearer reader-token", "/api/v1/devices") == ALLOWED
        assert (await guard.check("Bearer stranger-token", "/api/v1/devices")).status == 403
    assert asked == [("reader-token", "/api/v1/devices"), ("stranger-token", "/api/v1/devices")]
    await guard.check("Bearer reader-token", "/api/v1/alerts")  # another path: its own review
    now[0] = 10.5
    await guard.check("Bearer reader-token", "/api/v1/devices")  # expired: asked again
    assert asked[2:] == [("reader-token", "/api/v1/alerts"), ("reader-token", "/api/v1/devices")]
    for _ in range(2):  # the API server not answering is asked again every time
        assert (await guard.check("Bearer outage-token", "/api/v1/devices")).status == 503
    assert asked[4:] == [("outage-token", "/api/v1/devices")] * 2


async def test_an_api_server_out_of_reach_is_a_503_and_asked_again() -> None:
    attempts = 0

    async def connect() -> Any:
        nonlocal attempts
        attempts += 1
        raise ConfigException("no in-cluster account and no kubeconfig")

    guard = ApiGuard(None, KubeReview(connect), 10)
    for _ in range(2):
        verdict = await guard.check("Bearer some-kubernetes-token", "/api/v1/devices")
        assert verdict.status == 503
    assert attempts == 2


@pytest.mark.parametrize(
    "token", ["change-me", "<api-token>", "short-token", "SECRET"], ids=lambda t: t
)
def test_a_placeholder_or_short_token_is_refused(token: str) -> None:
    with pytest.raises(ValidationError, match="GPUATTR_API_TOKEN") as err:
        ApiSettings(token=SecretStr(token))
    assert token not in str(err.value)


def test_an_empty_token_is_none_and_clients_read_the_token_file(tmp_path: Any) -> None:
    assert ApiSettings(token=SecretStr("")).token is None
    path = tmp_path / "token"
    path.write_text(f"{TOKEN}\n")
    api = ApiSettings(token_file=path)
    assert auth_headers(api) == {"Authorization": f"Bearer {TOKEN}"}
    path.write_text("rotated-token-0123456789")  # read at each call: a projected token rotates
    assert auth_headers(api) == {"Authorization": "Bearer rotated-token-0123456789"}
    assert auth_headers(ApiSettings()) == {}


# -- two workers' query APIs on real HTTP servers --------------------------------------------------


class View:
    """What the API's handlers use of a Faust view."""

    def bytes(
        self,
        value: bytes,
        *,
        content_type: str | None = None,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> web.Response:
        return web.Response(body=value, content_type=content_type, status=status, headers=headers)


@asynccontextmanager
async def worker(
    me: str,
    port: int,
    peers: list[str],
    credentials: Callable[[], Mapping[str, str]],
    node_owner: str,
) -> AsyncIterator[None]:
    """A worker's QueryApi (owning partition 0 and nothing on it, every node owned by
    ``node_owner``) served at ``port``."""
    routes = web.Application()

    def page(path: str) -> Callable[[Any], None]:
        def mount(handler: Any) -> None:
            async def serve(request: web.Request) -> Any:
                return await handler(View(), request, **request.match_info)

            routes.router.add_get(path, serve)

        return mount

    async with aiohttp.ClientSession() as session:
        app = SimpleNamespace(
            conf=SimpleNamespace(canonical_url=me),
            consumer=SimpleNamespace(assignment=lambda: {TP(INPUT, 0), TP(DEMAND, 0)}),
            router=SimpleNamespace(
                tables_metadata=lambda: {u: {} for u in [me, *peers]},
                key_store=lambda table, key: node_owner,
            ),
            http_client=session,
            page=page,
        )
        QueryApi(
            app,  # type: ignore[arg-type]
            SimpleNamespace(alert_state={}, node_stack={}, node_state={}, nodes={}),  # type: ignore[arg-type]
            SimpleNamespace(rows=lambda owned, alerts: []),  # type: ignore[arg-type]
            INPUT,
            lambda: True,
            PeerPolicy(peers, None, port),
            LiveDemand(),
            DEMAND,
            ApiGuard(SecretStr(TOKEN), None, 10),
            credentials,
        ).register()
        runner = web.AppRunner(routes)
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", port).start()
            yield
        finally:
            await runner.cleanup()


async def get(url: str, token: str | None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers) as resp:
        return resp.status, orjson.loads(await resp.read())


async def test_the_query_api_answers_only_callers_with_the_token() -> None:
    ports = [free_port(), free_port()]
    a, b = (f"http://127.0.0.1:{p}" for p in ports)
    with_token = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        worker(a, ports[0], [b], lambda: with_token, node_owner=b),
        worker(b, ports[1], [a], dict, node_owner=a),  # sends no token: its peer refuses it
    ):
        for path in ("/api/v1/devices", "/api/v1/local/devices", "/api/v1/demand"):
            for token in (None, "not-the-token-0123456789"):
                status, body = await get(f"{a}{path}", token)
                assert (status, body["error"]) == (
                    401,
                    NO_TOKEN.reason if token is None else WRONG_TOKEN.reason,
                )
        status, listing = await get(f"{a}/api/v1/devices", TOKEN)
        assert status == 200
        assert (listing["workers"], listing["unavailable"], listing["count"]) == ([a, b], [], 0)
        status, listing = await get(f"{b}/api/v1/devices", TOKEN)  # b's own call is refused
        assert (status, listing["workers"], listing["unavailable"]) == (200, [b], [a])
        status, node = await get(f"{a}/api/v1/nodes/gpu-1", TOKEN)  # forwarded to its owner
        assert (status, node["worker"], node["node"]) == (200, b, "gpu-1")
        assert (await get(f"{a}/api/v1/nodes/gpu-1", None))[0] == 401  # refused before forwarding
        status, refused = await get(f"{b}/api/v1/nodes/gpu-1", TOKEN)  # b forwards without one
        assert (status, refused["error"]) == (401, NO_TOKEN.reason)
        for path in ("/healthz", "/readyz", "/metrics"):  # the probes and the PodMonitor
            async with aiohttp.ClientSession() as s, s.get(f"{a}{path}") as resp:
                assert resp.status == 200, path
