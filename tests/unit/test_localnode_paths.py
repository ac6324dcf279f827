"""The real node's work directory must leave room for its unix sockets (sun_path is 108 bytes
on Linux): a directory too long is refused with the reason, before anything starts — not a DRA
driver failing to bind and a node that never becomes ready."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from gpuattr.localkube.binaries import LocalKubeError, NodeBinaries
from gpuattr.localkube.node import DRA_DRIVER, UNIX_PATH_MAX, LocalNode

BINS = NodeBinaries(
    Path("/nonexistent"), Path("/nonexistent"), Path("/nonexistent"), Path("/x"), Path("/x")
)
SOCKET_TAIL = f"/kubelet/plugins_registry/{DRA_DRIVER}-reg.sock"


def node(workdir: Path) -> LocalNode:
    return LocalNode(cast(Any, None), workdir, BINS, name="n", layout=())


def test_a_work_directory_too_long_for_the_dra_socket_is_refused() -> None:
    longest_ok = "/" + "d" * (UNIX_PATH_MAX - 2 - len(SOCKET_TAIL))
    assert len(longest_ok + SOCKET_TAIL) == UNIX_PATH_MAX - 1
    assert node(Path(longest_ok)).workdir == Path(longest_ok)
    with pytest.raises(LocalKubeError, match="107-byte limit of a unix socket path"):
        node(Path(longest_ok + "d"))
