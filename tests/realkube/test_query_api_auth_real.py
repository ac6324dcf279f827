"""The query API's Kubernetes credentials against the real API server: the worker's shipped
RBAC (its ServiceAccount may create TokenReviews and SubjectAccessReviews), its own token making
the reviews, and callers' real ServiceAccount tokens — one bound to the shipped ``gpuattr-reader``
ClusterRole is let in, the worker's own (its peers) too, one of another role is known but not
allowed (403), and a token the API server does not know is refused (401)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from gpuattr.localkube import LocalKube
from infra.kube import make_api_client
from infra.settings import KubeSettings
from streams.worker.apiauth import ALLOWED, WRONG_TOKEN, ApiGuard, KubeReview
from tests.kube_fixture import KubeError, Rest
from tests.realkube.deploy import NAMESPACE, apply_rbac

READER = "gpuattr-top"


async def reader_token(rest: Rest) -> str:
    """A ServiceAccount bound to the shipped reader ClusterRole, as an operator binds one."""
    with contextlib.suppress(KubeError):  # the session's server may have it from an earlier test
        await rest.create(
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {"metadata": {"name": READER}}
        )
        await rest.create(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "metadata": {"name": READER},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "gpuattr-reader",
                },
                "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": NAMESPACE}],
            },
        )
    return await rest.token_for(NAMESPACE, READER)


async def test_the_worker_reviews_callers_tokens_with_the_api_server(
    real_kube: LocalKube, tmp_path: Path
) -> None:
    rest = Rest.admin(real_kube)
    apply_rbac(real_kube)
    worker_token = await rest.token_for(NAMESPACE, "gpuattr-worker")
    sink_token = await rest.token_for(NAMESPACE, "gpuattr-sink")
    reader = await reader_token(rest)
    config = real_kube.write_kubeconfig(
        tmp_path / "worker.kubeconfig", token=worker_token, user="gpuattr-worker"
    )
    clients: list[Any] = []

    async def connect() -> Any:
        clients.append(await make_api_client(KubeSettings(kubeconfig=config)))
        return clients[-1]

    guard = ApiGuard(None, KubeReview(connect), ttl_s=10)
    try:
        for path in ("/api/v1/devices", "/api/v1/local/devices", "/api/v1/nodes/gpu-1"):
            assert await guard.check(f"Bearer {reader}", path) == ALLOWED, path
            assert await guard.check(f"Bearer {worker_token}", path) == ALLOWED, path  # peers
            refused = await guard.check(f"Bearer {sink_token}", path)
            assert refused.status == 403, (path, refused)
            assert "gpuattr-sink" in refused.reason
        assert await guard.check("Bearer not-a-kubernetes-token", "/api/v1/devices") == WRONG_TOKEN
        assert len(clients) == 1  # one client for every review
    finally:
        for api in clients:
            await api.close()
