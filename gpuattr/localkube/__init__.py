"""A real kube-apiserver (built from the Go module proxy) on Debian's etcd, for tests and dev."""

from gpuattr.localkube.binaries import KUBERNETES_VERSION, LocalKubeError, resolve_binaries
from gpuattr.localkube.server import LocalKube, run_forever

__all__ = ["KUBERNETES_VERSION", "LocalKube", "LocalKubeError", "resolve_binaries", "run_forever"]
