"""Build kube-apiserver and kubectl from the Go module proxy into a cache directory, once.

The one place the Kubernetes version is pinned (:data:`KUBERNETES_VERSION`). ``k8s.io/kubernetes``
is not meant to be used as a module: its go.mod replaces every ``k8s.io/*`` staging module with a
directory of its own tree (``=> ./staging/src/k8s.io/...``). We build it from a small module of
our own that requires it and replaces each of those modules with its published twin
(``k8s.io/<name> v0.<minor>.<patch>``), which is the same source released from the same commit.
The list of staging modules is read from the go.mod of the pinned release, so it is never
copied by hand.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger("gpuattr.localkube")

KUBERNETES_VERSION = "1.35.4"
MODULE = "k8s.io/kubernetes"
COMMANDS = ("kube-apiserver", "kubectl")
_MARKER = ".built"


class LocalKubeError(RuntimeError):
    """The local API server could not be built or started."""


def require_tool(tool: str, why: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise LocalKubeError(f"`{tool}` is not on PATH: {why}")
    return path


def published_version(version: str = KUBERNETES_VERSION) -> str:
    """``1.35.4`` → ``v0.35.4``: the tag of the staging modules released with it."""
    major, minor, patch = version.split(".")
    if major != "1":
        raise LocalKubeError(f"unexpected Kubernetes version {version!r}")
    return f"v0.{minor}.{patch}"


def staging_modules(gomod: str) -> list[str]:
    """The modules a k8s.io/kubernetes go.mod replaces with directories of its own tree."""
    out = []
    for line in gomod.splitlines():
        left, arrow, right = line.strip().partition("=>")
        if arrow and right.strip().startswith("./staging/"):
            out.append(left.split()[0])
    return sorted(out)


def render_gomod(modules: list[str], version: str = KUBERNETES_VERSION) -> str:
    published = published_version(version)
    replaces = "".join(f"\t{m} => {m} {published}\n" for m in modules)
    return (
        "module gpuattr.local/kubebuild\n\n"
        "go 1.25.0\n\n"
        "godebug default=go1.25\n\n"
        f"require {MODULE} v{version}\n\n"
        f"replace (\n{replaces})\n"
    )


_TOOLS_GO = """//go:build tools

package kubebuild

import (
{imports})
"""


def _go(go: str, cwd: Path, *args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [go, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise LocalKubeError(
            f"go {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}"
        )
    return done.stdout


def _build(go: str, staging: Path, version: str) -> Path:
    env = {**os.environ, "GOFLAGS": "-modcacherw -buildvcs=false", "CGO_ENABLED": "0"}
    # the release's own go.mod, fetched by Go through its proxy settings
    fetched = json.loads(
        _go(go, staging, "mod", "download", "-json", f"{MODULE}@v{version}", env=env)
    )
    modules = staging_modules(Path(fetched["GoMod"]).read_text())
    if not modules:
        raise LocalKubeError(f"{MODULE} v{version}: no staging modules found in its go.mod")
    (staging / "go.mod").write_text(render_gomod(modules, version))
    imports = "".join(f'\t_ "{MODULE}/cmd/{c}"\n' for c in COMMANDS)
    (staging / "tools.go").write_text(_TOOLS_GO.format(imports=imports))
    _go(go, staging, "mod", "tidy", env=env)
    out = staging / "bin"
    targets = [f"{MODULE}/cmd/{c}" for c in COMMANDS]
    _go(go, staging, "build", "-trimpath", "-ldflags=-s -w", "-o", f"{out}/", *targets, env=env)
    (out / _MARKER).write_text(version)
    return out


def resolve_binaries(cache_dir: Path, version: str = KUBERNETES_VERSION) -> Path:
    """The directory holding ``kube-apiserver`` and ``kubectl``; built with Go on first use.

    Builds in a private staging directory, then renames its ``bin`` into place, so concurrent
    callers never see a half-built directory: one rename wins, the others use its result.
    """
    root = cache_dir / f"kubernetes-{version}"
    bin_dir = root / "bin"
    if (bin_dir / _MARKER).exists():
        return bin_dir
    go = require_tool("go", "the local API server is built from the Go module proxy")
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="staging-", dir=root))
    log.info("building kube-apiserver and kubectl %s from the Go module proxy", version)
    try:
        built = _build(go, staging, version)
        if bin_dir.exists() and not (bin_dir / _MARKER).exists():
            shutil.rmtree(bin_dir, ignore_errors=True)  # left by an interrupted build
        try:
            built.rename(bin_dir)
        except OSError:
            if not (bin_dir / _MARKER).exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return bin_dir
