"""A protocol-faithful dcgm-exporter double: a real HTTP server answering ``GET /metrics``.

The rows come from a provider called on every request, rendered by :func:`sim.exporter_rows.render`
in the exporter's 4.x text format and served with the exporter's content type. Fault switches
change the next ``n`` responses: an extra malformed line, a body cut off mid-line, an HTTP error
status, a slow answer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence

from aiohttp import web

from infra.httpserve import start_site
from sim.exporter_rows import ExporterRow, render

Rows = Callable[[], Sequence[ExporterRow]]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: What ``garbage_lines`` inserts: a sample line whose label set is never closed.
GARBAGE_LINE = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-garbage" 12 garbage'


def insert_garbage(text: str) -> str:
    """``text`` with :data:`GARBAGE_LINE` between two lines in its middle."""
    lines = text.splitlines(keepends=True)
    lines.insert(len(lines) // 2, GARBAGE_LINE + "\n")
    return "".join(lines)


def cut_mid_line(text: str) -> str:
    """``text`` cut off in the middle of its middle sample line (no final line feed)."""
    lines = text.splitlines(keepends=True)
    samples = [i for i, line in enumerate(lines) if line.strip() and not line.startswith("#")]
    if not samples:
        return text[: len(text) // 2]
    i = samples[len(samples) // 2]
    return "".join(lines[:i]) + lines[i][: len(lines[i]) // 2]


class ExporterDouble:
    """dcgm-exporter on ``127.0.0.1`` (port 0: a free port); ``url`` is its ``/metrics``."""

    def __init__(self, rows: Rows, host: str = "127.0.0.1", port: int = 0) -> None:
        self.rows = rows
        self.host = host
        self.port = port
        self.requests = 0  # every GET /metrics received, faulty answers included
        self._garbage = 0
        self._truncate = 0
        self._fail: deque[int] = deque()
        self._delay: deque[float] = deque()
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    # -- fault switches: each applies to the next n responses -------------------------------

    def garbage_lines(self, n: int) -> None:
        self._garbage += n

    def truncate_next(self, n: int) -> None:
        self._truncate += n

    def fail_next(self, n: int, status: int = 500) -> None:
        self._fail.extend([status] * n)

    def delay_next(self, n: int, seconds: float) -> None:
        self._delay.extend([seconds] * n)

    @property
    def listening(self) -> bool:
        return self._site is not None

    async def down(self) -> None:
        """Stop listening (connections are refused), as a crash-looping exporter's port is."""
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def up(self) -> None:
        """Listen again, on the same port."""
        if self._site is None and self._runner is not None:
            self._site = web.TCPSite(self._runner, self.host, self.port)
            await self._site.start()

    # -- HTTP ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    async def _metrics(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self._site is None:  # down: a connection kept alive from before is dropped too
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=503)
        if self._delay:
            await asyncio.sleep(self._delay.popleft())
        if self._fail:
            return web.Response(status=self._fail.popleft(), text="exporter error\n")
        text = render(self.rows())
        if self._garbage:
            self._garbage -= 1
            text = insert_garbage(text)
        if self._truncate:
            self._truncate -= 1
            text = cut_mid_line(text)
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner, self._site, self.port = await start_site(app, self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._site = None

    async def __aenter__(self) -> ExporterDouble:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
