"""The session's real kube-apiserver (:class:`gpuattr.localkube.LocalKube`) and a small REST client.

The client speaks plain JSON over HTTPS with a bearer token, as kubectl does: tests create the
objects a controller manager or kubelet would (pods with ``spec.nodeName``, their status through
the status subresource, ReplicaSets with ownerReferences) and ask what a token may do.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from gpuattr.localkafka import default_cache_dir
from gpuattr.localkube import LocalKube


@pytest.fixture(scope="session")
def real_kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    kube = LocalKube(tmp_path_factory.mktemp("kube"), default_cache_dir())
    asyncio.run(kube.start())  # etcd and the API server are child processes
    try:
        yield kube
    finally:
        kube.stop_sync()


class KubeError(RuntimeError):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


@dataclass
class Rest:
    """JSON over HTTPS to the API server, as one token (the admin's or a ServiceAccount's)."""

    url: str
    token: str
    ssl_context: ssl.SSLContext

    @classmethod
    def admin(cls, kube: LocalKube) -> Rest:
        return cls(kube.url, kube.admin_token, kube.ssl_context())

    def as_token(self, token: str) -> Rest:
        return Rest(self.url, token, self.ssl_context)

    async def call(
        self, method: str, path: str, body: Any = None, *, content_type: str | None = None
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                method, self.url + path, json=body, headers=headers, ssl=self.ssl_context
            ) as resp,
        ):
            text = await resp.text()
            try:
                return resp.status, json.loads(text) if text else None
            except ValueError:  # e.g. "404 page not found": a path no API group serves
                return resp.status, text

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, data = await self.call(method, path, body, **kw)
        if status >= 300:
            raise KubeError(status, data)
        return data

    async def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = await self.ok("POST", path, obj)
        return out

    async def get(self, path: str) -> dict[str, Any]:
        out: dict[str, Any] = await self.ok("GET", path)
        return out

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = await self.ok(
            "PATCH", path, patch, content_type="application/merge-patch+json"
        )
        return out

    async def delete(self, path: str, grace_s: int | None = None) -> dict[str, Any]:
        body = None if grace_s is None else {"gracePeriodSeconds": grace_s}
        out: dict[str, Any] = await self.ok("DELETE", path, body)
        return out

    async def namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        """A namespace and its ``default`` ServiceAccount (no controller manager makes it here)."""
        await self.create(
            "/api/v1/namespaces", {"metadata": {"name": name, "labels": labels or {}}}
        )
        await self.create(
            f"/api/v1/namespaces/{name}/serviceaccounts", {"metadata": {"name": "default"}}
        )

    async def allowed(
        self, verb: str, resource: str, *, group: str = "", ns: str = "", name: str = ""
    ) -> bool:
        """SelfSubjectAccessReview: may this token do ``verb`` on ``resource`` (``name``: one
        object of it)?"""
        review = await self.create(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {
                    "resourceAttributes": {
                        "verb": verb,
                        "resource": resource,
                        "group": group,
                        "namespace": ns,
                        "name": name,
                    }
                },
            },
        )
        return bool(review["status"].get("allowed"))

    async def token_for(self, namespace: str, service_account: str, seconds: int = 3600) -> str:
        """A real ServiceAccount token from the TokenRequest API."""
        out = await self.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds},
            },
        )
        return str(out["status"]["token"])
