"""Which worker URLs the query API may call: configured peers, or the addresses of the
workers' DNS name at this worker's port — never a URL only the group's metadata vouches for."""

from __future__ import annotations

import re

import pytest

from infra.endpoints import Endpoint, endpoint
from infra.settings import WorkerSettings
from streams.worker.peers import PeerPolicy


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://10.0.0.7:6066", Endpoint("10.0.0.7", 6066)),
        ("http://10.0.0.7:6066/", Endpoint("10.0.0.7", 6066)),
        ("http://Worker-0.Example:6066", Endpoint("worker-0.example", 6066)),
        ("http://[::1]:6066", Endpoint("::1", 6066)),
        ("http://[0:0::1]:6066", Endpoint("::1", 6066)),  # canonical IPv6
        ("https://10.0.0.7:6066", None),  # only what the workers serve
        ("http://10.0.0.7", None),  # no port: not a worker's advertised URL
        ("http://user:pw@10.0.0.7:6066", None),
        ("http://10.0.0.7:6066/api", None),
        ("http://10.0.0.7:6066?x=1", None),
        ("http://10.0.0.7:99999", None),
        ("gopher://10.0.0.7:6066", None),
        ("", None),
    ],
)
def test_endpoint(url: str, expected: Endpoint | None) -> None:
    assert endpoint(url) == expected


class FakeDns:
    def __init__(self, answers: dict[str, frozenset[str]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def __call__(self, name: str) -> frozenset[str]:
        self.asked.append(name)
        return self.answers.get(name, frozenset())


async def test_a_listed_peer_is_verified_and_nothing_else() -> None:
    policy = PeerPolicy(["http://127.0.0.1:7001", "http://127.0.0.1:7002/"], None, 7001)
    verified, unverified = await policy.split(
        ["http://127.0.0.1:7002", "http://127.0.0.1:7003", "http://localhost:7002"]
    )
    assert verified == ["http://127.0.0.1:7002"]
    assert unverified == ["http://127.0.0.1:7003", "http://localhost:7002"]  # exactly as listed


async def test_the_peer_service_verifies_its_addresses_at_our_port_only() -> None:
    dns = FakeDns({"gpuattr-worker-peers.gpuattr.svc": frozenset({"10.1.2.3", "10.1.2.4"})})
    now = [0.0]
    policy = PeerPolicy([], "gpuattr-worker-peers.gpuattr.svc", 6066, dns, lambda: now[0])
    assert await policy.verified("http://10.1.2.3:6066")
    assert await policy.verified("http://10.1.2.4:6066/")
    assert not await policy.verified("http://10.1.2.3:6067")  # another port on a worker's IP
    assert not await policy.verified("http://10.1.2.5:6066")  # not a worker
    assert not await policy.verified("http://169.254.169.254:6066")
    assert not await policy.verified("http://gpuattr-worker-0:6066")  # names are not resolved
    assert dns.asked == ["gpuattr-worker-peers.gpuattr.svc"]  # one lookup, then its TTL
    dns.answers["gpuattr-worker-peers.gpuattr.svc"] = frozenset({"10.1.2.5"})
    now[0] = 10.0  # past the TTL: pods came and went
    assert await policy.verified("http://10.1.2.5:6066")
    assert not await policy.verified("http://10.1.2.3:6066")


async def test_without_peers_configured_no_one_is_called() -> None:
    policy = PeerPolicy([], None, 6066)
    assert await policy.split(["http://127.0.0.1:6066", "http://10.0.0.1:6066"]) == (
        [],
        ["http://10.0.0.1:6066", "http://127.0.0.1:6066"],
    )


async def test_the_real_resolver_reads_a_name() -> None:
    policy = PeerPolicy([], "localhost", 6066)
    assert await policy.verified("http://127.0.0.1:6066")
    assert not await policy.verified("http://127.0.0.1:6067")


def test_a_malformed_peer_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="GPUATTR_WORKER_PEERS"):
        PeerPolicy(["127.0.0.1:7001"], None, 7001)


def test_the_settings_refuse_a_peer_that_is_not_a_url() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=re.escape("not http://host:port: 10.0.0.1:6066")):
        WorkerSettings(peers="http://10.0.0.2:6066,10.0.0.1:6066")
    assert WorkerSettings(peers="http://10.0.0.2:6066/, ").peers == ("http://10.0.0.2:6066",)
