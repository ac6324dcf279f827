"""Self-observability: a small HTTP server with ``/metrics`` (Prometheus), ``/healthz``
(liveness: the event loop answers) and ``/readyz`` (readiness: named checks, 200 or 503)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from infra.httpserve import start_site

Checks = Mapping[str, Callable[[], bool]]


def metrics_body() -> tuple[bytes, str]:
    return generate_latest(), CONTENT_TYPE_LATEST


class ObservabilityServer:
    def __init__(self, host: str, port: int, checks: Checks) -> None:
        self.host = host
        self.port = port
        self.checks = checks
        self._runner: web.AppRunner | None = None

    async def _metrics(self, request: web.Request) -> web.Response:
        body, content_type = metrics_body()
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        results = {name: bool(check()) for name, check in self.checks.items()}
        return web.json_response(
            {"ready": all(results.values()), "checks": results},
            status=200 if all(results.values()) else 503,
        )

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner, _, self.port = await start_site(app, self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
