"""The local servers' ports are chosen where no outgoing connection's source port can land."""

from __future__ import annotations

import socket

import pytest

from infra import ports


def test_a_port_is_below_the_ephemeral_range_distinct_and_bindable() -> None:
    low, high = ports.ephemeral_range()
    given = [ports.free_port() for _ in range(50)]
    assert len(set(given)) == 50, "one process never hands out a port twice"
    for port in given:
        assert not low <= port <= high, f"{port} lies in the ephemeral range {low}-{high}"
        with socket.socket() as s:
            s.bind((ports.HOST, port))  # free when handed out


def test_a_client_connection_never_takes_a_handed_out_port() -> None:
    """The CI failure: the port of bind(0) was a client's source port by the time the server
    bound it. A client's source port comes from the ephemeral range, which free_port avoids."""
    with socket.socket() as server:
        server.bind((ports.HOST, 0))
        server.listen(64)
        target = server.getsockname()[1]
        clients = [socket.create_connection((ports.HOST, target)) for _ in range(32)]
        try:
            sources = {c.getsockname()[1] for c in clients}
            given = {ports.free_port() for _ in range(32)}
            assert not sources & given
            low, high = ports.ephemeral_range()
            assert all(low <= p <= high for p in sources)
        finally:
            for c in clients:
                c.close()


def test_the_ranges_are_read_as_the_kernel_writes_them() -> None:
    assert ports.ephemeral_range("32768\t60999\n") == (32768, 60999)
    assert ports.ephemeral_range("garbage") == (32768, 60999)
    assert ports._reserved("10000,12000-12002\n") == {10000, 12000, 12001, 12002}
    assert ports._reserved("\n") == set()


def test_candidates_leave_out_reserved_ports_and_the_ephemeral_range() -> None:
    pool = ports.candidates((20000, 60999), {10000, 10001})
    assert min(pool) == 10002
    assert max(pool) == 19999
    # an ephemeral range starting low: the ports above it
    assert ports.candidates((1024, 60000), set()) == list(range(60001, 65536))
    # no port outside it at all: any port from 1,024
    assert ports.candidates((1024, 65535), {2000}) == [p for p in range(1024, 65536) if p != 2000]


def test_a_taken_port_is_not_bindable() -> None:
    with socket.socket() as held:
        held.bind((ports.HOST, 0))
        held.listen(1)
        assert not ports._bindable(held.getsockname()[1], ports.HOST)


def test_no_free_port_is_an_error_not_a_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_bindable", lambda port, host: False)
    with pytest.raises(OSError, match="no free TCP port"):
        ports.free_port()
