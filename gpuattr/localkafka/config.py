"""The local broker's settings and its rendered ``server.properties``."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from string import Template

from gpuattr.localkafka.jars import default_cache_dir
from gpuattr.localkafka.security import LocalKafkaSecurity


@dataclass(frozen=True)
class LocalKafkaConfig:
    """Where the broker keeps its data and which ports it listens on (0 = a free port)."""

    data_dir: Path
    port: int = 0
    controller_port: int = 0
    cache_dir: Path = field(default_factory=default_cache_dir)
    heap_mb: int = 512
    log_file: Path | None = None
    ready_timeout_s: float = 90.0
    #: TLS + SASL/SCRAM + the KRaft authorizer (no ACL: denied); None: plaintext, no auth
    security: LocalKafkaSecurity | None = None


def render_properties(
    data_dir: Path, port: int, controller_port: int, overrides: Mapping[str, str] | None = None
) -> str:
    """The packaged ``broker.properties`` with ports and the log directory filled in; each of
    ``overrides`` replaces its key's line, or is appended when the template has no such key."""
    template = (resources.files("gpuattr.localkafka") / "broker.properties").read_text()
    text = Template(template).substitute(
        data_dir=str(data_dir), port=port, controller_port=controller_port
    )
    rest = dict(overrides or {})
    lines = []
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip() if "=" in line and not line.startswith("#") else None
        lines.append(f"{key}={rest.pop(key)}" if key in rest else line)
    lines += [f"{key}={value}" for key, value in rest.items()]
    return "\n".join(lines) + "\n"


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding (as ``random-uuid``).

    Like Kafka's own ``Uuid.randomUuid``, never one starting with ``-``: the storage tool would
    read ``-t -Ab3...`` as a missing argument (one start in ~65 failed that way)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
