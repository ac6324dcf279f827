"""Which workers the query API may call: verified peers only.

The group's metadata says where each worker's web server is: every member writes its own URL
there when it joins, and any Kafka client allowed to join the group can write anything. A worker
that called those URLs as they are could be made to send requests to a host of an attacker's
choice. So an advertised URL is called only if it is a *verified* peer:

- listed in ``GPUATTR_WORKER_PEERS`` (``http://host:port``, exactly), or
- an IP address that ``GPUATTR_WORKER_PEER_SERVICE`` (a DNS name: in Kubernetes the workers'
  headless Service, whose addresses only pods of the worker Deployment get) resolves to, at this
  worker's own web port.

Anything else is named as ``unverified`` in the answer and never called. Only plain
``http://host:port`` URLs qualify (no user info, path, query or other scheme).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterable

from infra.endpoints import canonical_host, endpoint, is_ip

log = logging.getLogger(__name__)

Resolve = Callable[[str], Awaitable[frozenset[str]]]
#: how long one resolution of the peer service is trusted (pods come and go)
RESOLVE_TTL_S = 5.0


async def resolve_addresses(name: str) -> frozenset[str]:
    """Every address ``name`` resolves to now (empty if it does not resolve)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        log.warning("the peer service %s does not resolve (%s): no peer verified by it", name, exc)
        return frozenset()
    return frozenset(canonical_host(str(info[4][0])) for info in infos)


class PeerPolicy:
    """Decides which advertised worker URLs may be called (module doc)."""

    def __init__(
        self,
        peers: Iterable[str],
        service: str | None,
        web_port: int,
        resolve: Resolve = resolve_addresses,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        listed = {endpoint(p) for p in peers}
        if None in listed:
            raise ValueError("GPUATTR_WORKER_PEERS: every entry must be http://host:port")
        self.listed = frozenset(e for e in listed if e is not None)
        self.service = service
        self.web_port = web_port
        self._resolve = resolve
        self._now = now
        self._resolved: tuple[float, frozenset[str]] | None = None

    async def _service_addresses(self) -> frozenset[str]:
        if self.service is None:
            return frozenset()
        cached = self._resolved
        if cached is None or self._now() - cached[0] > RESOLVE_TTL_S:
            cached = (self._now(), await self._resolve(self.service))
            self._resolved = cached
        return cached[1]

    async def verified(self, url: str) -> bool:
        at = endpoint(url)
        if at is None:
            return False
        if at in self.listed:
            return True
        if self.service is None or at.port != self.web_port or not is_ip(at.host):
            return False
        return at.host in await self._service_addresses()

    async def split(self, urls: Iterable[str]) -> tuple[list[str], list[str]]:
        """(verified, unverified), each sorted."""
        verified: list[str] = []
        unverified: list[str] = []
        for url in sorted(set(urls)):
            (verified if await self.verified(url) else unverified).append(url)
        return verified, unverified
