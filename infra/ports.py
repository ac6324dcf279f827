"""A listening port for a local server we start (the embedded broker, etcd, kube-apiserver, a
kubelet, a test's HTTP server), chosen before the server binds it.

A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, the same range every
outgoing connection on the machine takes its source port from. Released and bound again seconds
later by a child process, it can meanwhile be the source port of some connection (etcd's clients,
the broker's own, a test's), and the server fails with "address already in use" (CI saw exactly
that for kube-apiserver). So the port is chosen *below* the ephemeral range, where only explicit
binds go, at random, free when it is chosen, and never handed out twice by one process.
"""

from __future__ import annotations

import functools
import random
import socket
import threading
from pathlib import Path

__all__ = ["HOST", "ephemeral_range", "free_port"]

HOST = "127.0.0.1"
_LOWEST = 10_000  # below it sit well-known and registered services' ports
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_RESERVED_FILE = Path("/proc/sys/net/ipv4/ip_local_reserved_ports")
_given: set[int] = set()
_lock = threading.Lock()


def ephemeral_range(text: str | None = None) -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        raw = _RANGE_FILE.read_text() if text is None else text
        low, high = (int(part) for part in raw.split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def _reserved(text: str | None = None) -> set[int]:
    """Ports the kernel keeps out of automatic assignment (``1000,2000-2010``)."""
    try:
        raw = _RESERVED_FILE.read_text() if text is None else text
    except OSError:
        return set()
    out: set[int] = set()
    for part in raw.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            out.update(range(int(low), int(high or low) + 1))
        except ValueError:
            continue
    return out


def _bindable(port: int, host: str) -> bool:
    with socket.socket() as s:  # no SO_REUSEADDR: a port in TIME_WAIT counts as taken too
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def candidates(ephemeral: tuple[int, int], reserved: set[int]) -> list[int]:
    """The ports to choose from, less reserved ports: those from 10,000 up to the ephemeral
    range; where none lie below it, those above it; where none lie above either, any port from
    1,024."""
    low, high = ephemeral
    below = [p for p in range(_LOWEST, low) if p not in reserved]
    if below:
        return below
    above = [p for p in range(high + 1, 65536) if p not in reserved]
    return above or [p for p in range(1024, 65536) if p not in reserved]


@functools.cache
def _pool() -> tuple[int, ...]:
    """This machine's candidates, read from the kernel once per process."""
    return tuple(candidates(ephemeral_range(), _reserved()))


def free_port(host: str = HOST) -> int:
    """A TCP port on ``host``, free now and outside the ephemeral range, which this process has
    not handed out before. :class:`OSError` when none of the candidates is free."""
    pool = _pool()
    rng = random.SystemRandom()
    with _lock:
        for _ in range(200):
            port = rng.choice(pool)
            if port not in _given and _bindable(port, host):
                _given.add(port)
                return port
    raise OSError(f"no free TCP port on {host} among {len(pool)} below the ephemeral range")
