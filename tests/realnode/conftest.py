"""The real-node tier: a real control plane and a real kubelet on the fake CRI runtime, with our
device plugin and the DRA example driver, in a private mount namespace (one per session)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from gpuattr.localkafka import default_cache_dir
from gpuattr.localkube.cluster import LocalCluster


@pytest.fixture(scope="session")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("realnode"), default_cache_dir())
    asyncio.run(cluster.start())  # every part is a child process
    try:
        yield cluster
    finally:
        cluster.stop_sync()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/realnode/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.realnode)
