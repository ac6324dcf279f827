"""The real-API-server tier: kube-apiserver (built once from the Go module proxy) on etcd."""

from __future__ import annotations

import pytest

from tests.kube_fixture import real_kube

__all__ = ["real_kube"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/realkube/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.realkube)
