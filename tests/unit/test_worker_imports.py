"""The worker loads the Kubernetes client only where the query API reviews tokens at the API
server: it is ~40 MiB of a worker's RSS, and the worker needs it for nothing else."""

from __future__ import annotations

import subprocess
import sys

import pytest

from infra.settings import ApiSettings, KubeSettings


def loaded_after(code: str) -> bool:
    """``kubernetes_asyncio`` is imported after running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint('kubernetes_asyncio' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return out.stdout.strip().splitlines()[-1] == "True"


def test_the_worker_app_does_not_load_the_kubernetes_client() -> None:
    assert not loaded_after("import streams.worker.app")


@pytest.mark.parametrize(("kube_auth", "loaded"), [(False, False), (True, True)])
def test_the_guard_loads_it_only_for_reviews(kube_auth: bool, loaded: bool) -> None:
    code = (
        "from infra.settings import ApiSettings, KubeSettings\n"
        "from streams.worker.apiauth import guard_for\n"
        f"guard_for(ApiSettings.model_construct(kube_auth={kube_auth}, token=None, "
        "decision_ttl_s=10.0), KubeSettings.model_construct())"
    )
    assert loaded_after(code) is loaded


def test_settings_construct_as_the_probe_builds_them() -> None:
    """The probe's settings are the real ones (a renamed field fails here, not silently)."""
    assert {"kube_auth", "token", "decision_ttl_s"} <= set(ApiSettings.model_fields)
    assert "api_url" in KubeSettings.model_fields
