"""``GET /api/v1/demand`` gathers every worker's pools the way the device listing does: this
worker's pools of the demand-events partitions it owns, and each verified peer's
``/api/v1/local/devices`` (real HTTP servers here) — one row per pool, the latest; a peer of an
older release lists no pools; a peer that does not answer is named, and an unverified one is
never called."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from faust.types import TP

from contract.outputs import PoolDemand
from streams.present.poolrows import pool_row
from streams.worker.api import QueryApi
from streams.worker.apiauth import ApiGuard
from streams.worker.livedemand import LiveDemand
from streams.worker.peers import PeerPolicy

DEMAND_TOPIC = "gpuattr.demand-events"


def demand(pool: str, ts_ms: int, pending: int) -> PoolDemand:
    return PoolDemand(ts_ms, pool, pool, "", "", pending, pending, 1_000, (), 2, ())


@dataclass
class Peer:
    """A worker's local listing on a real HTTP server; counts the calls it gets."""

    body: dict[str, Any]
    calls: int = 0
    runner: web.AppRunner | None = field(default=None)

    async def start(self) -> str:
        async def local(request: web.Request) -> web.Response:
            self.calls += 1
            return web.Response(body=orjson.dumps(self.body), content_type="application/json")

        app = web.Application()
        app.router.add_get("/api/v1/local/devices", local)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        return f"http://{host}:{port}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def fake_app(session: aiohttp.ClientSession, advertised: list[str]) -> Any:
    """What QueryApi reads of a Faust app: its URL, assignment, the group's URLs, a client."""
    return SimpleNamespace(
        conf=SimpleNamespace(canonical_url="http://127.0.0.1:1"),
        consumer=SimpleNamespace(
            assignment=lambda: {TP("gpuattr.node-events", 0), TP(DEMAND_TOPIC, 0)}
        ),
        router=SimpleNamespace(tables_metadata=lambda: {u: {} for u in advertised}),
        http_client=session,
    )


def local_body(*pools: PoolDemand, with_pools: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"worker": "peer", "partitions": [1], "devices": [], "nodes": []}
    if with_pools:
        body["pools"] = orjson.loads(orjson.dumps([pool_row(p) for p in pools]))
    return body


async def test_demand_is_gathered_from_every_verified_worker(
    session: aiohttp.ClientSession,
) -> None:
    live = LiveDemand()
    live.put(0, demand("nvidia.com/gpu", 5_000, 3))  # ours: demand-events partition 0
    live.put(1, demand("nvidia.com/gpu.shared", 5_000, 1))  # partition 1 moved away: dropped
    peer = Peer(local_body(demand("nvidia.com/gpu", 4_000, 9), demand("dra:gpu.nvidia.com", 1, 2)))
    older = Peer(local_body(with_pools=False))  # an older release: no pools in its listing
    stranger = Peer(local_body(demand("evil", 9_999, 1)))
    urls = [await p.start() for p in (peer, older, stranger)]
    down = "http://127.0.0.1:9"  # verified, not answering
    try:
        tables = SimpleNamespace(alert_state={}, node_stack={}, node_state={}, nodes={})
        api = QueryApi(
            fake_app(session, [*urls, down]),
            tables,  # type: ignore[arg-type]
            SimpleNamespace(rows=lambda owned, alerts: []),  # type: ignore[arg-type]
            "gpuattr.node-events",
            lambda: True,
            PeerPolicy([urls[0], urls[1], down], None, 1),
            live,
            DEMAND_TOPIC,
            ApiGuard(None, None, 0),
            dict,
        )
        body = await api.demand_listing()
    finally:
        for p in (peer, older, stranger):
            await p.stop()
    assert body["workers"][0] == "http://127.0.0.1:1"  # this worker, then its peers
    assert sorted(body["workers"][1:]) == sorted(urls[:2])
    assert body["unavailable"] == [down]
    assert body["unverified"] == [urls[2]]
    assert stranger.calls == 0
    assert body["count"] == 2
    got = {p["pool"]: p for p in body["pools"]}
    assert set(got) == {"nvidia.com/gpu", "dra:gpu.nvidia.com"}
    assert got["nvidia.com/gpu"]["pending_pods"] == 3  # ours is newer than the peer's copy
    assert [p["pool"] for p in body["pools"]] == ["dra:gpu.nvidia.com", "nvidia.com/gpu"]
    assert api.local_pools() == [pool_row(demand("nvidia.com/gpu", 5_000, 3))]
