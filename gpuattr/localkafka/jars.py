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


def require_tool(tool: str) -> str:
    """The tool's path on PATH, or a clear error naming what the local Kafka needs."""
    path = shutil.which(tool)
    if path is None:
        raise LocalKafkaError(f"`{tool}` is not on PATH: the local Kafka needs Java 17 and Maven")
    return path


def _copy_dependencies(mvn: str, staging: Path) -> Path:
    pom_path = staging / "pom.xml"
    pom_path.write_text((resources.files("gpuattr.localkafka") / "pom.xml").read_text())
    out = staging / "libs"
    cmd = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(pom_path),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={out}",
        "-DincludeScope=runtime",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LocalKafkaError(
            f"mvn failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    (out / _MARKER).write_text(KAFKA_VERSION)
    return out


def resolve_jars(cache_dir: Path | None = None) -> Path:
    """The directory holding the broker's classpath; resolved with ``mvn`` on first use.

    Resolves into a private staging directory, then renames it into place, so concurrent
    callers never see a half-filled ``libs``: one rename wins, the others use its result.
    """
    root = (cache_dir or default_cache_dir()) / f"kafka-{KAFKA_VERSION}"
    libs = root / "libs"
    if (libs / _MARKER).exists():
        return libs
    mvn = require_tool("mvn")
    require_tool("java")
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="staging-", dir=root))
    log.info("resolving Apache Kafka %s from Maven Central into %s", KAFKA_VERSION, libs)
    try:
        resolved = _copy_dependencies(mvn, staging)
        if libs.exists() and not (libs / _MARKER).exists():
            shutil.rmtree(libs, ignore_errors=True)  # left by an interrupted older layout
        try:
            resolved.rename(libs)
        except OSError:
            if not (libs / _MARKER).exists():  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return libs
