"""Who may read the query API: each request's bearer token, checked as kube-rbac-proxy does.

A token equal to the configured one (``GPUATTR_API_TOKEN``) is let in. With
``GPUATTR_API_KUBE_AUTH`` any other token goes to the API server: a TokenReview says whose it is
and a SubjectAccessReview whether that user may ``get`` the resource ``queryapi`` of the API
group ``gpuattr.io`` (:data:`QUERY_API`: the ``gpuattr-reader`` ClusterRole grants it). A
resource, not the request's path as a non-resource URL: Kubernetes' own ``system:discovery``
role lets every authenticated user get ``/api/*``, which would take in every path of ours. Each
answer is kept for a short while (``GPUATTR_API_DECISION_TTL_S``), keyed by a digest of the token
and the path, so a listing refreshed every second costs the API server two reviews per TTL, not
per request.

/metrics, /healthz and /readyz (:data:`OPEN_PATHS`) answer without a token: the kubelet's probes
and the PodMonitor's scrapes carry none. Peers gathering or forwarding send their own token like
any caller.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from pydantic import SecretStr

from infra.settings import ApiSettings, KubeSettings

log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/metrics", "/healthz", "/readyz"})
#: what a caller must be allowed to ``get`` (RBAC: apiGroups ["gpuattr.io"], resources ["queryapi"])
QUERY_API = {"group": "gpuattr.io", "resource": "queryapi", "verb": "get"}
#: the most decisions kept; past it the expired ones go, then the oldest
MAX_DECISIONS = 4096


@dataclass(frozen=True, slots=True)
class Verdict:
    """200: let in; 401: no or unknown credentials; 403: a known user not allowed this path;
    503: the API server did not answer the review."""

    status: int
    reason: str

    @property
    def allowed(self) -> bool:
        return self.status == 200


ALLOWED = Verdict(200, "allowed")
NO_TOKEN = Verdict(401, "no bearer token")
WRONG_TOKEN = Verdict(401, "the bearer token is not valid here")

#: (token, path) → the API server's verdict
Review = Callable[[str, str], Awaitable[Verdict]]


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (the scheme in any case)."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token and " " not in token else None


class ApiGuard:
    """Decides whether a request's ``Authorization`` header may read ``path`` (module doc)."""

    def __init__(
        self,
        token: SecretStr | None,
        review: Review | None,
        ttl_s: float,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._token = token.get_secret_value().encode() if token is not None else None
        self._review = review
        self._ttl_s = ttl_s
        self._now = now
        self._decisions: dict[tuple[bytes, str], tuple[float, Verdict]] = {}

    @property
    def configured(self) -> bool:
        """Whether any caller can get in at all."""
        return self._token is not None or self._review is not None

    async def check(self, authorization: str | None, path: str) -> Verdict:
        if path in OPEN_PATHS:
            return ALLOWED
        token = bearer(authorization)
        if token is None:
            return NO_TOKEN
        if self._token is not None and hmac.compare_digest(token.encode(), self._token):
            return ALLOWED
        if self._review is None:
            return WRONG_TOKEN
        key = (hashlib.sha256(token.encode()).digest(), path)
        now = self._now()
        cached = self._decisions.get(key)
        if cached is not None and now < cached[0]:
            return cached[1]
        verdict = await self._review(token, path)
        if verdict.status != 503 and self._ttl_s > 0:  # an outage is asked again next time
            self._remember(key, now + self._ttl_s, verdict)
        return verdict

    def _remember(self, key: tuple[bytes, str], until: float, verdict: Verdict) -> None:
        if len(self._decisions) >= MAX_DECISIONS:
            now = self._now()
            self._decisions = {k: v for k, v in self._decisions.items() if v[0] > now}
            while len(self._decisions) >= MAX_DECISIONS:
                del self._decisions[next(iter(self._decisions))]
        self._decisions[key] = (until, verdict)


def user_of(token_review: Any) -> dict[str, Any] | None:
    """The SubjectAccessReview's subject fields for a TokenReview's answer (None: the token is
    not authenticated)."""
    status = getattr(token_review, "status", None)
    user = getattr(status, "user", None)
    if status is None or not status.authenticated or user is None or not user.username:
        return None
    return {
        "user": user.username,
        "uid": user.uid,
        "groups": list(user.groups or []),
        "extra": {k: list(v) for k, v in (user.extra or {}).items()},
    }


class KubeReview:
    """TokenReview, then SubjectAccessReview of :data:`QUERY_API`, at the API server; the
    client is made at the first review (``connect``), inside the worker's event loop."""

    def __init__(self, connect: Callable[[], Awaitable[Any]]) -> None:
        # the Kubernetes client is ~40 MiB of a worker's RSS: loaded only where reviews are on
        from kubernetes_asyncio import client
        from kubernetes_asyncio.config import ConfigException

        self._client = client
        #: what a failed review raises (no in-cluster account, no kubeconfig: tried again next time)
        self._failures: tuple[type[BaseException], ...] = (
            client.ApiException,
            ConfigException,
            aiohttp.ClientError,
            OSError,
            TimeoutError,
        )
        self._connect = connect
        self._lock = asyncio.Lock()
        self._apis: tuple[Any, Any] | None = None

    async def _clients(self) -> tuple[Any, Any]:
        async with self._lock:
            if self._apis is None:
                api = await self._connect()
                client = self._client
                self._apis = (client.AuthenticationV1Api(api), client.AuthorizationV1Api(api))
            return self._apis

    async def __call__(self, token: str, path: str) -> Verdict:
        try:
            authn, authz = await self._clients()
            review = await authn.create_token_review({"spec": {"token": token}})
            subject = user_of(review)
            if subject is None:
                return WRONG_TOKEN
            spec = {**subject, "resourceAttributes": QUERY_API}
            access = await authz.create_subject_access_review({"spec": spec})
        except self._failures as exc:
            log.error("the API server did not review a query-API token: %r", exc)
            return Verdict(503, "the API server could not review the token")
        if access.status is not None and access.status.allowed:
            return ALLOWED
        return Verdict(403, f"{subject['user']} may not get {path} (gpuattr.io queryapi)")


def guard_for(api: ApiSettings, kube: KubeSettings) -> ApiGuard:
    """The query API's guard from its settings (the API server's reviews with ``kube_auth``)."""
    review = None
    if api.kube_auth:
        from infra.kube import make_api_client

        review = KubeReview(lambda: make_api_client(kube))
    guard = ApiGuard(api.token, review, api.decision_ttl_s)
    if not guard.configured:
        log.warning(
            "the query API has no credentials configured (GPUATTR_API_TOKEN, "
            "GPUATTR_API_KUBE_AUTH): every /api/v1 request is refused"
        )
    return guard
