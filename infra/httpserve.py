"""Start an aiohttp application on host:port (port 0: a free one) and report the bound port."""

from __future__ import annotations

from typing import Any

from aiohttp import web


async def start_site(
    app: web.Application, host: str, port: int, shutdown_timeout: float = 1.0
) -> tuple[web.AppRunner, web.TCPSite, int]:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server: Any = site._server  # aiohttp keeps the bound sockets here
    bound = server.sockets[0].getsockname()[1] if server is not None else port
    return runner, site, int(bound)
