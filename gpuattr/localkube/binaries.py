"""Build the local cluster's binaries from the Go module proxy into a cache directory, once.

The one place versions are pinned: :data:`KUBERNETES_VERSION`,
:data:`DRA_EXAMPLE_DRIVER_VERSION` and :data:`HELM_VERSION`. Five builds, each cached in a
directory of its own, each made in a private staging directory and renamed into place
(concurrent callers never see a half-built directory):

* ``kubernetes-<v>/bin``: kube-apiserver and kubectl (:func:`resolve_binaries`);
* ``kubernetes-<v>/node/bin``: kubelet, kube-scheduler, kube-controller-manager, with the
  version stamped in (else a node reports ``v0.0.0-master``) (:func:`resolve_node_binaries`);
* ``gpuattr-go-<hash>/bin``: our own small Go mains in ``gpuattr/localkube/go/`` — ``fakecri``
  (the fake CRI runtime that ships with Kubernetes, served on a unix socket) and
  ``deviceplugin`` — keyed by a hash of their sources, so an edit builds them again
  (:func:`resolve_own_binaries`);
* ``dra-example-driver-<v>/bin``: the upstream DRA example driver's kubelet plugin, built
  through a wrapper module that requires it (``go install ...@<v>`` needs the proxy's version
  list, which is not served here) (:func:`resolve_dra_driver`);
* ``helm-<v>/bin``: ``helm``, built the same way, for the chart in ``deploy/helm/gpuattr``
  (:func:`resolve_helm`).

``k8s.io/kubernetes``
is not meant to be used as a module: its go.mod replaces every ``k8s.io/*`` staging module with a
directory of its own tree (``=> ./staging/src/k8s.io/...``). We build it from a small module of
our own that requires it and replaces each of those modules with its published twin
(``k8s.io/<name> v0.<minor>.<patch>``), which is the same source released from the same commit.
The list of staging modules is read from the go.mod of the pinned release, so it is never
copied by hand.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

log = logging.getLogger("gpuattr.localkube")

KUBERNETES_VERSION = "1.35.4"
DRA_EXAMPLE_DRIVER_VERSION = "0.4.0"
HELM_VERSION = "4.3.2"
MODULE = "k8s.io/kubernetes"
COMMANDS = ("kube-apiserver", "kubectl")
NODE_COMMANDS = ("kubelet", "kube-scheduler", "kube-controller-manager")
OWN_MAINS = ("fakecri", "deviceplugin")
DRA_MODULE = "sigs.k8s.io/dra-example-driver"
DRA_COMMAND = "dra-example-kubeletplugin"
HELM_MODULE = "helm.sh/helm/v4"
GO_SOURCES = Path(__file__).parent / "go"
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


def version_ldflags(version: str = KUBERNETES_VERSION) -> str:
    """``-X`` flags that stamp the release into component-base (what a node reports)."""
    major, minor, _ = version.split(".")
    pkg = "k8s.io/component-base/version"
    fields = {"gitVersion": f"v{version}", "gitMajor": major, "gitMinor": minor}
    fields["gitTreeState"] = "clean"
    return " ".join(f"-X {pkg}.{k}={v}" for k, v in fields.items())


def render_own_gomod(version: str = KUBERNETES_VERSION) -> str:
    """Our own mains' module: the published kubelet and CRI modules of the pinned release (their
    go.mod pins grpc and the rest, so nothing needs the proxy's version list)."""
    published = published_version(version)
    requires = "".join(f"\tk8s.io/{m} {published}\n" for m in ("cri-api", "cri-client", "kubelet"))
    return f"module gpuattr.local/gomains\n\ngo 1.25.0\n\nrequire (\n{requires})\n"


def render_dra_gomod(version: str = DRA_EXAMPLE_DRIVER_VERSION) -> str:
    return f"module gpuattr.local/drabuild\n\ngo 1.26.0\n\nrequire {DRA_MODULE} v{version}\n"


def render_helm_gomod(version: str = HELM_VERSION) -> str:
    return f"module gpuattr.local/helmbuild\n\ngo 1.25.0\n\nrequire {HELM_MODULE} v{version}\n"


def helm_ldflags(version: str = HELM_VERSION) -> str:
    """Stamp the release in: ``helm version`` and the chart's ``kubeVersion`` checks read it."""
    return f"-X {HELM_MODULE}/internal/version.version=v{version}"


def own_sources_hash() -> str:
    """A hash of our Go mains and the module they are built in: the cache key of their build."""
    digest = hashlib.sha256(render_own_gomod().encode())
    for path in sorted(GO_SOURCES.rglob("*.go")):
        digest.update(str(path.relative_to(GO_SOURCES)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


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


def _env() -> dict[str, str]:
    return {**os.environ, "GOFLAGS": "-modcacherw -buildvcs=false", "CGO_ENABLED": "0"}


def _kubernetes_module(go: str, staging: Path, version: str, commands: tuple[str, ...]) -> None:
    """A module in ``staging`` that requires k8s.io/kubernetes and imports ``commands``."""
    env = _env()
    # the release's own go.mod, fetched by Go through its proxy settings
    fetched = json.loads(
        _go(go, staging, "mod", "download", "-json", f"{MODULE}@v{version}", env=env)
    )
    modules = staging_modules(Path(fetched["GoMod"]).read_text())
    if not modules:
        raise LocalKubeError(f"{MODULE} v{version}: no staging modules found in its go.mod")
    (staging / "go.mod").write_text(render_gomod(modules, version))
    imports = "".join(f'\t_ "{MODULE}/cmd/{c}"\n' for c in commands)
    (staging / "tools.go").write_text(_TOOLS_GO.format(imports=imports))
    _go(go, staging, "mod", "tidy", env=env)


def _build(go: str, staging: Path, version: str) -> Path:
    _kubernetes_module(go, staging, version, COMMANDS)
    out = staging / "bin"
    targets = [f"{MODULE}/cmd/{c}" for c in COMMANDS]
    _go(go, staging, "build", "-trimpath", "-ldflags=-s -w", "-o", f"{out}/", *targets, env=_env())
    (out / _MARKER).write_text(version)
    return out


def _build_node(go: str, staging: Path, version: str) -> Path:
    _kubernetes_module(go, staging, version, NODE_COMMANDS)
    out = staging / "bin"
    targets = [f"{MODULE}/cmd/{c}" for c in NODE_COMMANDS]
    ldflags = f"-ldflags=-s -w {version_ldflags(version)}"
    _go(go, staging, "build", "-trimpath", ldflags, "-o", f"{out}/", *targets, env=_env())
    (out / _MARKER).write_text(version)
    return out


def _build_own(go: str, staging: Path, version: str) -> Path:
    env = _env()
    (staging / "go.mod").write_text(render_own_gomod(version))
    for name in OWN_MAINS:
        shutil.copytree(GO_SOURCES / name, staging / name)
    _go(go, staging, "mod", "tidy", env=env)
    out = staging / "bin"
    targets = [f"./{name}" for name in OWN_MAINS]
    _go(go, staging, "build", "-trimpath", "-ldflags=-s -w", "-o", f"{out}/", *targets, env=env)
    (out / _MARKER).write_text(version)
    return out


def _build_dra(go: str, staging: Path, version: str) -> Path:
    env = _env()
    (staging / "go.mod").write_text(render_dra_gomod(version))
    target = f"{DRA_MODULE}/cmd/{DRA_COMMAND}"
    (staging / "tools.go").write_text(_TOOLS_GO.format(imports=f'\t_ "{target}"\n'))
    _go(go, staging, "mod", "tidy", env=env)
    out = staging / "bin"
    _go(go, staging, "build", "-trimpath", "-ldflags=-s -w", "-o", f"{out}/", target, env=env)
    (out / _MARKER).write_text(version)
    return out


def _build_helm(go: str, staging: Path, version: str) -> Path:
    env = _env()
    (staging / "go.mod").write_text(render_helm_gomod(version))
    target = f"{HELM_MODULE}/cmd/helm"
    (staging / "tools.go").write_text(_TOOLS_GO.format(imports=f'\t_ "{target}"\n'))
    _go(go, staging, "mod", "tidy", env=env)
    out = staging / "bin"
    ldflags = f"-ldflags=-s -w {helm_ldflags(version)}"
    _go(go, staging, "build", "-trimpath", ldflags, "-o", f"{out}/", target, env=env)
    (out / _MARKER).write_text(version)
    return out


Builder = Callable[[str, Path, str], Path]


def _resolve(root: Path, version: str, build: Builder, what: str) -> Path:
    """``root/bin`` once built; else build it in a private staging directory under ``root``
    and rename its ``bin`` into place: one rename wins, the others use its result."""
    bin_dir = root / "bin"
    if (bin_dir / _MARKER).exists():
        return bin_dir
    go = require_tool("go", f"{what} is built from the Go module proxy")
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="staging-", dir=root))
    log.info("building %s from the Go module proxy", what)
    try:
        built = build(go, staging, version)
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


def resolve_binaries(cache_dir: Path, version: str = KUBERNETES_VERSION) -> Path:
    """The directory holding ``kube-apiserver`` and ``kubectl``; built with Go on first use."""
    root = cache_dir / f"kubernetes-{version}"
    return _resolve(root, version, _build, f"kube-apiserver and kubectl {version}")


def resolve_node_binaries(cache_dir: Path, version: str = KUBERNETES_VERSION) -> Path:
    """The directory holding ``kubelet``, ``kube-scheduler`` and ``kube-controller-manager``."""
    root = cache_dir / f"kubernetes-{version}" / "node"
    what = f"kubelet, kube-scheduler and kube-controller-manager {version}"
    return _resolve(root, version, _build_node, what)


def resolve_own_binaries(cache_dir: Path, version: str = KUBERNETES_VERSION) -> Path:
    """The directory holding our ``fakecri`` and ``deviceplugin``."""
    root = cache_dir / f"gpuattr-go-{own_sources_hash()}"
    return _resolve(root, version, _build_own, "the fake CRI runtime and device plugin")


def resolve_dra_driver(cache_dir: Path, version: str = DRA_EXAMPLE_DRIVER_VERSION) -> Path:
    """The directory holding the DRA example driver's ``dra-example-kubeletplugin``."""
    root = cache_dir / f"dra-example-driver-{version}"
    return _resolve(root, version, _build_dra, f"the DRA example driver {version}")


def resolve_helm(cache_dir: Path, version: str = HELM_VERSION) -> Path:
    """The directory holding ``helm``."""
    root = cache_dir / f"helm-{version}"
    return _resolve(root, version, _build_helm, f"helm {version}")


class NodeBinaries(NamedTuple):
    """Every binary a local node and the real-API-server tests need, once built."""

    control_plane: Path  # kube-apiserver, kubectl
    node: Path  # kubelet, kube-scheduler, kube-controller-manager
    own: Path  # fakecri, deviceplugin
    dra: Path  # dra-example-kubeletplugin
    helm: Path  # helm (the chart's install and render)


def resolve_all(cache_dir: Path) -> NodeBinaries:
    """Build (or find) everything ``gpuattr kube --node`` and the real-node tests run."""
    return NodeBinaries(
        resolve_binaries(cache_dir),
        resolve_node_binaries(cache_dir),
        resolve_own_binaries(cache_dir),
        resolve_dra_driver(cache_dir),
        resolve_helm(cache_dir),
    )
