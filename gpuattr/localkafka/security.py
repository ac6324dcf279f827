"""The embedded broker with its security on: TLS, SASL/SCRAM-SHA-512 and the KRaft authorizer.

- Clients connect over ``SASL_SSL`` only: TLS with a certificate for ``127.0.0.1`` and
  ``localhost`` signed by a throwaway CA made here with the ``openssl`` CLI (clients trust
  ``<data dir>/tls/ca.pem``), then SCRAM-SHA-512. The broker's own connections to that listener
  use the super user's SCRAM credentials.
- SCRAM users are written into the metadata log when the storage is formatted
  (``kafka-storage format --add-scram``, KIP-900): a broker restarted on the same data directory
  keeps the users it was formatted with.
- ``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found=false``: whatever no ACL allows
  is denied, except for the super user (the identity that creates topics and ACLs).
- The controller listener (loopback, the node's own broker-to-controller traffic) takes SASL
  PLAIN with the super user's password: no anonymous principal exists anywhere.
"""

from __future__ import annotations

import re
import secrets
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpuattr.localkafka.jars import LocalKafkaError, require_tool

MECHANISM = "SCRAM-SHA-512"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")  # nothing to quote in JAAS or --add-scram


@dataclass(frozen=True)
class LocalKafkaSecurity:
    """SCRAM users (name → password) and which of them is the super user."""

    users: Mapping[str, str] = field(repr=False)
    super_user: str = "admin"

    def __post_init__(self) -> None:
        if self.super_user not in self.users:
            raise ValueError(f"the super user {self.super_user!r} needs a password")
        for name, password in self.users.items():
            if not (_SAFE.match(name) and _SAFE.match(password)):
                raise ValueError(f"user {name!r}: names and passwords are [A-Za-z0-9._-]+")

    @classmethod
    def generate(cls, names: Iterable[str], super_user: str = "admin") -> LocalKafkaSecurity:
        """Every named user, and the super user, with a fresh random password."""
        users = {name: secrets.token_hex(16) for name in {*names, super_user}}
        return cls(users, super_user)


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(
        [require_tool("openssl"), *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise LocalKafkaError(f"openssl {args[0]} failed: {done.stderr[-2000:]}")


def make_pki(directory: Path) -> Path:
    """A CA and a broker certificate for 127.0.0.1 and localhost (once per data directory);
    returns the CA certificate clients trust. The broker reads ``broker.pem`` (its key, then
    its certificate chain) as a PEM keystore."""
    ca = directory / "ca.pem"
    keystore = directory / "broker.pem"
    if ca.exists() and keystore.exists():
        return ca
    directory.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", "-x509", *ec, "-days", "3650", "-subj", "/CN=gpuattr local Kafka CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout", "ca.key", "-out", "ca.pem.new",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "req", *ec, "-subj", "/CN=localhost", "-keyout", "broker.key", "-out", "broker.csr",
        cwd=directory,
    )  # fmt: skip
    (directory / "broker.ext").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyAgreement\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem.new", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "3650", "-extfile", "broker.ext", "-out", "broker.crt",
        cwd=directory,
    )  # fmt: skip
    keystore.write_text(
        (directory / "broker.key").read_text()
        + (directory / "broker.crt").read_text()
        + (directory / "ca.pem.new").read_text()
    )
    keystore.chmod(0o600)
    (directory / "ca.pem.new").rename(ca)
    return ca


def overrides(
    security: LocalKafkaSecurity, tls_dir: Path, port: int, controller_port: int
) -> dict[str, str]:
    """``server.properties`` lines that turn the plaintext broker into the secured one."""
    admin = security.super_user
    password = security.users[admin]
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    return {
        "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": MECHANISM,
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": (
            f'{scram} required username="{admin}" password="{password}";'
        ),
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": (
            f'{plain} required username="{admin}" password="{password}" user_{admin}="{password}";'
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls_dir / "broker.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls_dir / "ca.pem"),
        "ssl.client.auth": "none",
        "authorizer.class.name": AUTHORIZER,
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{admin}",
        "auto.create.topics.enable": "false",  # topics are created on purpose, by the admin
    }


def scram_arguments(security: LocalKafkaSecurity) -> list[str]:
    """``kafka-storage format`` arguments that add every user (KIP-900)."""
    return [
        arg
        for name, password in sorted(security.users.items())
        for arg in ("--add-scram", f"{MECHANISM}=[name={name},password={password}]")
    ]
