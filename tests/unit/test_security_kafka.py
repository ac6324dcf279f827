"""Security properties: Kafka TLS and SASL/SCRAM settings reaching the clients.

No Kafka broker here: TLS is proven with a real handshake against a local TLS server using
throwaway certificates (``openssl`` CLI into ``tmp_path``); SASL settings are checked where
they are handed to aiokafka and Faust, and SASL without credentials is refused without echoing
the password.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from pydantic import SecretStr

from infra.kafka import client_options
from infra.settings import KafkaSettings
from streams.worker.app import broker_credentials
from tests.security_helpers import SASL_PASSWORD

# --- Kafka TLS and SASL/SCRAM settings reach the clients -------------------------------------


@dataclass(frozen=True)
class Pki:
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _self_signed(directory: Path, name: str, cn: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            f"/CN={cn}",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    assert shutil.which("openssl"), "the openssl CLI makes the throwaway certificates"
    directory = tmp_path_factory.mktemp("pki")
    server = _self_signed(directory, "broker", "localhost")
    client = _self_signed(directory, "agent", "gpuattr-agent")
    return Pki(*server, *client)


def common_names(cert: Any) -> list[str]:
    """The CNs of a certificate as ``ssl`` decodes it (``subject`` is a tuple of RDNs)."""
    return [value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]


@contextlib.asynccontextmanager
async def tls_broker(pki: Pki, peers: list[str]) -> AsyncIterator[int]:
    """A TLS listener that demands a client certificate signed by the agent's (self-signed) CA."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.client_cert))
    ctx.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    ctx.verify_mode = ssl.CERT_REQUIRED

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.extend(common_names(writer.get_extra_info("peercert") or {}))
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def handshake(port: int, context: ssl.SSLContext) -> bytes:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="localhost"
    )
    try:
        return await asyncio.wait_for(reader.read(2), 5)
    finally:
        writer.close()
        with contextlib.suppress(ssl.SSLError, ConnectionError):
            await writer.wait_closed()


def tls_settings(
    pki: Pki, protocol: str, *, client_cert: bool, ca: Path | None = None
) -> KafkaSettings:
    return KafkaSettings(
        bootstrap="broker:9093",
        security_protocol=protocol,
        sasl_mechanism="SCRAM-SHA-512" if protocol.startswith("SASL") else None,
        sasl_username="gpuattr" if protocol.startswith("SASL") else None,
        sasl_password=SecretStr(SASL_PASSWORD) if protocol.startswith("SASL") else None,
        ssl_cafile=ca or pki.server_cert,
        ssl_certfile=pki.client_cert if client_cert else None,
        ssl_keyfile=pki.client_key if client_cert else None,
    )


def contexts(kafka: KafkaSettings) -> dict[str, ssl.SSLContext]:
    """The TLS context each client family gets: aiokafka (agent, sink, admin) and Faust (worker)."""
    aiokafka_ctx = client_options(kafka)["ssl_context"]
    faust_ctx = credentials_to_aiokafka_auth(broker_credentials(kafka))["ssl_context"]
    return {"aiokafka": aiokafka_ctx, "faust": faust_ctx}


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
async def test_tls_with_client_certificate_completes_a_mutual_handshake(
    pki: Pki, protocol: str
) -> None:
    kafka = tls_settings(pki, protocol, client_cert=True)
    for family, ctx in contexts(kafka).items():
        assert ctx.verify_mode == ssl.CERT_REQUIRED, family
        assert ctx.check_hostname, family
        peers: list[str] = []
        async with tls_broker(pki, peers) as port:
            assert await handshake(port, ctx) == b"ok", family
        assert peers == ["gpuattr-agent"], family  # the broker saw our client certificate


async def test_without_a_client_certificate_the_broker_refuses(pki: Pki) -> None:
    kafka = tls_settings(pki, "SSL", client_cert=False)
    for family, ctx in contexts(kafka).items():
        peers: list[str] = []
        async with tls_broker(pki, peers) as port:
            with contextlib.suppress(ssl.SSLError, ConnectionError):
                assert await handshake(port, ctx) != b"ok", family
        assert peers == [], family


async def test_a_broker_outside_the_configured_ca_is_refused(pki: Pki) -> None:
    kafka = tls_settings(pki, "SASL_SSL", client_cert=True, ca=pki.client_cert)  # wrong CA
    for family, ctx in contexts(kafka).items():
        peers: list[str] = []
        async with tls_broker(pki, peers) as port:
            with pytest.raises(ssl.SSLCertVerificationError):
                await handshake(port, ctx)
        assert peers == [], family


def test_sasl_ssl_scram_sha_512_reaches_aiokafka_and_faust(pki: Pki) -> None:
    kafka = tls_settings(pki, "SASL_SSL", client_cert=False)
    opts = client_options(kafka)
    assert opts["security_protocol"] == "SASL_SSL"
    assert opts["sasl_mechanism"] == "SCRAM-SHA-512"
    assert opts["sasl_plain_username"] == "gpuattr"
    assert opts["sasl_plain_password"] == SASL_PASSWORD
    assert isinstance(opts["ssl_context"], ssl.SSLContext)
    credentials = broker_credentials(kafka)
    assert isinstance(credentials, faust.SASLCredentials)
    worker = credentials_to_aiokafka_auth(credentials)
    assert {k: worker[k] for k in opts if k != "ssl_context"} == {
        k: v for k, v in opts.items() if k != "ssl_context"
    }
    assert isinstance(worker["ssl_context"], ssl.SSLContext)
    subjects = {cn for cert in worker["ssl_context"].get_ca_certs() for cn in common_names(cert)}
    assert "localhost" in subjects  # the configured CA, not only the system store


@pytest.mark.parametrize(
    ("protocol", "mechanism", "tls"),
    [
        ("PLAINTEXT", None, False),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256", False),
        ("SASL_PLAINTEXT", None, False),  # no mechanism: PLAIN
        ("SSL", None, True),
        ("SASL_SSL", "SCRAM-SHA-512", True),
    ],
)
async def test_every_protocol_is_accepted_by_every_client(
    pki: Pki, protocol: str, mechanism: str | None, tls: bool
) -> None:
    sasl = protocol.startswith("SASL")
    kafka = KafkaSettings(
        bootstrap="127.0.0.1:9",
        security_protocol=protocol,
        sasl_mechanism=mechanism,
        sasl_username="gpuattr" if sasl else None,
        sasl_password=SecretStr(SASL_PASSWORD) if sasl else None,
        ssl_cafile=pki.server_cert if tls else None,
    )
    opts = client_options(kafka)
    assert opts["security_protocol"] == protocol
    assert ("ssl_context" in opts) is tls
    assert opts.get("sasl_mechanism") == ((mechanism or "PLAIN") if sasl else None)
    worker = credentials_to_aiokafka_auth(broker_credentials(kafka))
    assert worker["security_protocol"] == protocol
    assert worker.get("sasl_mechanism") == opts.get("sasl_mechanism")
    assert worker.get("sasl_plain_password") == opts.get("sasl_plain_password")
    assert (worker.get("ssl_context") is not None) is tls
    if protocol == "PLAINTEXT":
        assert broker_credentials(kafka) is None
    # the aiokafka clients the agent, sink and topic admin build take these options as they are
    clients: list[Any] = [
        AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, **opts),
        AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, **opts),
        AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap, **opts),
    ]
    for client in clients:
        await (client.close() if isinstance(client, AIOKafkaAdminClient) else client.stop())


def test_sasl_without_credentials_is_refused_naming_the_settings() -> None:
    from pydantic import ValidationError

    from infra.settings import KafkaSettings

    with pytest.raises(ValidationError, match="GPUATTR_KAFKA_SASL_PASSWORD") as info:
        KafkaSettings(bootstrap="k:9093", security_protocol="SASL_SSL", sasl_username="u")
    assert "k:9093" not in str(info.value)  # inputs are hidden from validation errors
    with pytest.raises(ValidationError) as info:  # a password next to a bad value stays hidden
        KafkaSettings(security_protocol="SASL_SSL", sasl_password=SASL_PASSWORD, partitions=0)
    assert SASL_PASSWORD not in str(info.value)
    ok = KafkaSettings(
        bootstrap="k:9093", security_protocol="SASL_SSL", sasl_username="u", sasl_password="p"
    )
    assert ok.sasl_password is not None
