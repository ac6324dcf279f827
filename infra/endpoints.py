"""Plain ``http://host:port`` URLs as endpoints (host canonical, port required). Pure."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str  # lower case; an IP address in its canonical form
    port: int


def endpoint(url: str) -> Endpoint | None:
    """``http://host:port`` → its endpoint; None for anything else (other schemes, user info,
    a path, query or fragment, no port). Pure."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme != "http" or parts.username is not None or parts.password is not None:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    if not parts.hostname or port is None:
        return None
    return Endpoint(canonical_host(parts.hostname), port)


def canonical_host(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host.lower()


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
