"""A protocol-faithful dcgm-exporter double: real HTTP ``GET /metrics`` in the exporter's format."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from aiohttp import web

from gpuattr.httpserve import start_site
from sim.exporter_rows import ExporterRow, render

Rows = Callable[[], Sequence[ExporterRow]]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ExporterDouble:
    def __init__(self, rows: Rows, host: str = "127.0.0.1", port: int = 0) -> None:
        self.rows = rows
        self.host = host
        self.port = port
        self.requests = 0
        self._garbage = 0
        self._truncate = 0
        self._fail: list[int] = []
        self._delay: list[float] = []
        self._runner: web.AppRunner | None = None

    # fault switches
    def garbage_lines(self, n: int) -> None:
        self._garbage += n

    def truncate_next(self, n: int) -> None:
        self._truncate += n

    def fail_next(self, n: int, status: int = 500) -> None:
        self._fail += [status] * n

    def delay_next(self, n: int, seconds: float) -> None:
        self._delay += [seconds] * n

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        if self._delay:
            await asyncio.sleep(self._delay.pop(0))
        if self._fail:
            return web.Response(status=self._fail.pop(0), text="exporter error\n")
        text = render(self.rows())
        if self._garbage:
            self._garbage -= 1
            lines = text.splitlines()
            lines.insert(len(lines) // 2, 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x" 12 garbage')
            text = "\n".join(lines) + "\n"
        if self._truncate:
            self._truncate -= 1
            text = text[: len(text) // 2]
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner, _, self.port = await start_site(app, self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ExporterDouble:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
