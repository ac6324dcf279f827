"""A real kube-apiserver on Debian's etcd, and a real node (kubelet on the fake CRI runtime, a
device plugin, the DRA example driver), all built from the Go module proxy, for tests and dev."""

from gpuattr.localkube.binaries import (
    DRA_EXAMPLE_DRIVER_VERSION,
    KUBERNETES_VERSION,
    LocalKubeError,
    resolve_all,
    resolve_binaries,
)
from gpuattr.localkube.server import LocalKube, run_forever

__all__ = [
    "DRA_EXAMPLE_DRIVER_VERSION",
    "KUBERNETES_VERSION",
    "LocalKube",
    "LocalKubeError",
    "resolve_all",
    "resolve_binaries",
    "run_forever",
]
