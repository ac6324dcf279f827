"""Resolve the Kafka broker's jars from Maven Central into a cache directory, once."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

log = logging.getLogger("gpuattr.localkafka")

KAFKA_VERSION = "4.1.1"
_MARKER = ".resolved"


class LocalKafkaError(RuntimeError):
    """The local broker could not be prepared or started."""


def default_cache_dir() -> Path:
    env = os.environ.get("GPUATTR_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "gpuattr"


def _require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise LocalKafkaError(f"`{tool}` is not on PATH: the local Kafka needs Java 17 and Maven")
    return path


def resolve_jars(cache_dir: Path | None = None) -> Path:
    """The directory holding the broker's classpath; resolved with ``mvn`` on first use."""
    root = (cache_dir or default_cache_dir()) / f"kafka-{KAFKA_VERSION}"
    libs = root / "libs"
    if (libs / _MARKER).exists():
        return libs
    mvn = _require("mvn")
    _require("java")
    root.mkdir(parents=True, exist_ok=True)
    pom = resources.files("gpuattr.localkafka") / "pom.xml"
    staging = Path(tempfile.mkdtemp(prefix="libs-", dir=root))
    pom_path = staging / "pom.xml"
    pom_path.write_text(pom.read_text())
    log.info("resolving Apache Kafka %s from Maven Central into %s", KAFKA_VERSION, libs)
    cmd = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(pom_path),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging / 'libs'}",
        "-DincludeScope=runtime",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise LocalKafkaError(
            f"mvn failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    (staging / "libs" / _MARKER).write_text(KAFKA_VERSION)
    try:
        (staging / "libs").rename(libs)  # atomic: a concurrent resolver either wins or loses
    except OSError:
        if not (libs / _MARKER).exists():
            raise
    shutil.rmtree(staging, ignore_errors=True)
    return libs
