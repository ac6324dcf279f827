"""The query API, served by every worker on Faust's web server (JSON, read-only).

Tables are partitioned by node across workers. A node's request is answered by the worker that
owns the node's partition: Faust's router finds it from the group assignment and the request is
forwarded there if it landed elsewhere. Cluster-wide listings gather ``/api/v1/local/devices``
from every worker in the assignment and merge; a worker that does not answer is named in
``unavailable`` rather than silently missing.

Only verified peers are called (:mod:`streams.worker.peers`): a URL from the group's metadata
that is not one is named in ``unverified`` (its devices are missing from the listing, and a node
it owns answers 503), and no request goes to it. Faust's own views are off unless
``GPUATTR_WORKER_FAUST_VIEWS`` asks for them.

Every page but /metrics, /healthz and /readyz answers only a caller with a bearer token
:mod:`streams.worker.apiauth` lets in (401 or 403 otherwise, counted in
``gpuattr_worker_api_refused_total``); this worker's own calls to its peers carry its token.

    GET /api/v1/devices[?node=&namespace=&workload=&sharing=&idle=1&alerts=1&sort=]
    GET /api/v1/nodes/{node}                        its devices, labels and GPU stack
    GET /api/v1/nodes/{node}/status                 its GPU stack (node-status) and open alert
    GET /api/v1/namespaces/{namespace}
    GET /api/v1/workloads/{namespace}/{name}        (name, or Kind/name as kind and name)
    GET /api/v1/alerts                              devices with an open alert
    GET /api/v1/demand                              every pool's waiting pods and idle GPUs
    GET /api/v1/local/devices                       this worker's partitions only (and nodes,
                                                    and the pools of its demand partitions)
    GET /metrics, /healthz, /readyz
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import faust
import orjson
from faust.exceptions import ConsumerNotStarted
from faust.types import TP

from contract.records import replace
from infra.endpoints import endpoint
from infra.observe import metrics_body
from streams.core.flow.processor import Tables
from streams.present.noderows import NODE_ROWS, NodeRow, merge_nodes, node_row, ordered
from streams.present.poolrows import POOL_ROWS, PoolRow, merge_pools, pool_row
from streams.present.views import ROWS, DeviceRow, Filter, merge, select
from streams.worker.apiauth import OPEN_PATHS, ApiGuard
from streams.worker.live import LiveDevices
from streams.worker.livedemand import LiveDemand
from streams.worker.peers import PeerPolicy
from streams.worker.promexport import exposition
from streams.worker.selfmetrics import API_REFUSED

log = logging.getLogger(__name__)
PEER_TIMEOUT = aiohttp.ClientTimeout(total=5)
#: set on a request one worker forwards to another: the receiver answers it, never forwards again
FORWARDED_HEADER = "X-Gpuattr-Forwarded"


def rows_json(rows: list[DeviceRow] | list[NodeRow] | list[PoolRow]) -> Any:
    return orjson.loads(orjson.dumps(rows))


@dataclass(frozen=True, slots=True)
class Gathered:
    """Every verified worker's rows, merged, and who answered: the workers that did, the verified
    ones that did not, and the advertised ones that are not verified (never called)."""

    rows: list[DeviceRow]
    nodes: list[NodeRow]
    pools: list[PoolRow]
    answered: list[str]
    unavailable: list[str]
    unverified: list[str]

    def workers(self) -> dict[str, list[str]]:
        return {
            "workers": self.answered,
            "unavailable": self.unavailable,
            "unverified": self.unverified,
        }


def assignment(app: faust.App) -> set[TP]:
    """The partitions assigned to this worker now: none while its consumer is still starting
    (Faust raises then; /metrics and /readyz must answer all the same)."""
    try:
        return set(app.consumer.assignment())
    except ConsumerNotStarted:
        return set()


class QueryApi:
    def __init__(
        self,
        app: faust.App,
        tables: Tables,
        live: LiveDevices,
        input_topic: str,
        ready: Callable[[], bool],
        peers: PeerPolicy,
        demand: LiveDemand,
        demand_topic: str,
        guard: ApiGuard,
        credentials: Callable[[], Mapping[str, str]],
    ) -> None:
        self.app = app
        self.tables = tables
        self.live = live
        self.input_topic = input_topic
        self.ready = ready
        self.policy = peers
        self.demand = demand
        self.demand_topic = demand_topic
        self.guard = guard
        #: the Authorization header this worker sends its peers (read at each call: rotated)
        self.credentials = credentials

    @property
    def me(self) -> str:
        return str(self.app.conf.canonical_url).rstrip("/")

    def owned(self, topic: str | None = None) -> list[int]:
        """The partitions of the input topic (or ``topic``) this worker owns now."""
        topic = topic or self.input_topic
        return sorted(tp.partition for tp in assignment(self.app) if tp.topic == topic)

    def local_pools(self) -> list[PoolRow]:
        """The demand of each pool on demand-events partitions this worker owns now."""
        return [pool_row(r) for r in self.demand.records(set(self.owned(self.demand_topic)))]

    def local_rows(self) -> list[DeviceRow]:
        return self.live.rows(set(self.owned()), self.tables.alert_state)

    def local_nodes(self) -> list[NodeRow]:
        """The GPU stack of each node on partitions this worker owns now."""
        owned = set(self.owned())
        rows = []
        for node, stack in list(self.tables.node_stack.items()):
            state = self.tables.node_state.get(node)
            if state is None or state.partition not in owned:
                continue
            if (row := node_row(stack)) is not None:
                rows.append(row)
        return ordered(rows)

    def advertised(self) -> list[str]:
        """The other workers' URLs as the group's metadata has them (unverified)."""
        hosts = {str(h).rstrip("/") for h in self.app.router.tables_metadata()}
        return sorted(hosts - {self.me})

    async def _peer_rows(self, host: str) -> tuple[list[DeviceRow], list[NodeRow], list[PoolRow]]:
        async with self.app.http_client.get(
            f"{host}/api/v1/local/devices",
            timeout=PEER_TIMEOUT,
            allow_redirects=False,
            headers=dict(self.credentials()),
        ) as resp:
            resp.raise_for_status()
            body = orjson.loads(await resp.read())
        # a worker of an older release lists no nodes, or no pools
        return (
            ROWS.validate_python(body["devices"]),
            NODE_ROWS.validate_python(body.get("nodes", [])),
            POOL_ROWS.validate_python(body.get("pools", [])),
        )

    async def gather(self) -> Gathered:
        """All verified workers' device, node and pool rows, and who answered."""
        peers, unverified = await self.policy.split(self.advertised())
        for host in unverified:
            log.warning("worker %s (group metadata) is not a verified peer: not called", host)
        results = await asyncio.gather(*(self._peer_rows(h) for h in peers), return_exceptions=True)
        parts, nodes, pools, answered, unavailable = (
            [self.local_rows()],
            [self.local_nodes()],
            [self.local_pools()],
            [self.me],
            [],
        )
        for host, result in zip(peers, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("worker %s did not answer the query: %r", host, result)
                unavailable.append(host)
            else:
                parts.append(result[0])
                nodes.append(result[1])
                pools.append(result[2])
                answered.append(host)
        return Gathered(
            merge(parts), merge_nodes(nodes), merge_pools(pools), answered, unavailable, unverified
        )

    async def listing(self, f: Filter, sort: str) -> dict[str, Any]:
        got = await self.gather()
        chosen = select(got.rows, f, sort)
        return {
            **got.workers(),
            "count": len(chosen),
            "devices": rows_json(chosen),
            "nodes": rows_json(ordered(got.nodes, f.node)),  # each node's GPU stack, broken first
        }

    async def demand_listing(self) -> dict[str, Any]:
        """Every pool's demand, oldest wait first (from every verified worker)."""
        got = await self.gather()
        return {**got.workers(), "count": len(got.pools), "pools": rows_json(got.pools)}

    def owner(self, node: str) -> str | None:
        """The URL of the worker owning ``node``'s partition (None: no assignment yet)."""
        try:
            return str(self.app.router.key_store("nodes", node)).rstrip("/")
        except KeyError:
            return None

    async def forward(self, owner: str, path: str) -> tuple[int, bytes, str]:
        """A GET of ``path`` (with its query) at a verified ``owner``: status, body, type."""
        async with self.app.http_client.get(
            f"{owner}{path}",
            timeout=PEER_TIMEOUT,
            allow_redirects=False,
            headers={**self.credentials(), FORWARDED_HEADER: self.me},
        ) as resp:
            return resp.status, await resp.read(), resp.content_type

    def node(self, node: str) -> dict[str, Any]:
        record = self.tables.nodes.get(node)
        rows = select(self.local_rows(), Filter(node=node))
        return {
            "node": node,
            "worker": self.me,
            "labels": dict(record.labels) if record else None,
            "known": record is not None or bool(rows),
            "devices": rows_json(rows),
            "stack": rows_json(ordered(self.local_nodes(), node)),
        }

    def node_status(self, node: str) -> dict[str, Any]:
        """The node's last node-status as published, and its open stack-broken alert."""
        stack = self.tables.node_stack.get(node)
        status = stack.last if stack is not None else None
        episode = stack.broken if stack is not None else None
        fired = episode.fired if episode is not None else None  # None while within its grace
        return {
            "node": node,
            "worker": self.me,
            "status": orjson.loads(orjson.dumps(status)) if status is not None else None,
            "alert": orjson.loads(orjson.dumps(fired)) if fired is not None else None,
        }

    def register(self) -> None:
        app, api = self.app, self

        def json(view: Any, body: Any, status: int = 200) -> Any:
            return view.bytes(orjson.dumps(body), content_type="application/json", status=status)

        def query(request: Any) -> Mapping[str, str]:
            return dict(request.query)

        async def devices(view: Any, request: Any) -> Any:
            q = query(request)
            try:
                return json(view, await api.listing(Filter.from_query(q), q.get("sort", "node")))
            except ValueError as exc:
                return json(view, {"error": str(exc)}, 400)

        async def node(view: Any, request: Any, node: str) -> Any:
            return await owned_by(view, request, node, api.node)

        async def node_status(view: Any, request: Any, node: str) -> Any:
            return await owned_by(view, request, node, api.node_status)

        async def owned_by(
            view: Any, request: Any, node: str, answer: Callable[[str], dict[str, Any]]
        ) -> Any:
            owner = api.owner(node)
            if owner is None:
                return json(view, {"error": "no worker owns partitions yet"}, 503)
            if _same(owner, api.me) or FORWARDED_HEADER in request.headers:
                return json(view, answer(node))
            if not await api.policy.verified(owner):
                log.warning("node %s: its owner %s is not a verified peer: not called", node, owner)
                body = {"error": "the owner of this node is not a verified worker", "node": node}
                return json(view, {**body, "unverified": [owner]}, 503)
            try:
                status, payload, content_type = await api.forward(owner, str(request.rel_url))
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:  # OSError: our token file
                log.warning("worker %s did not answer for node %s: %r", owner, node, exc)
                return json(view, {"error": "owner unavailable", "unavailable": [owner]}, 503)
            return view.bytes(payload, content_type=content_type, status=status)

        async def namespace(view: Any, request: Any, namespace: str) -> Any:
            q = query(request)
            f = replace(Filter.from_query(q), namespace=namespace)
            return json(view, await api.listing(f, q.get("sort", "node")))

        async def workload(view: Any, request: Any, namespace: str, name: str) -> Any:
            q = query(request)
            f = replace(Filter.from_query(q), namespace=namespace, workload=name)
            return json(view, await api.listing(f, q.get("sort", "node")))

        async def workload_kind(
            view: Any, request: Any, namespace: str, kind: str, name: str
        ) -> Any:
            return await workload(view, request, namespace, f"{kind}/{name}")

        async def alerts(view: Any, request: Any) -> Any:
            return json(view, await api.listing(Filter(alerts=True), "idle"))

        async def demand(view: Any, request: Any) -> Any:
            return json(view, await api.demand_listing())

        async def local(view: Any, request: Any) -> Any:
            body = {"worker": api.me, "partitions": api.owned(), "devices": [], "nodes": []}
            body["devices"] = rows_json(api.local_rows())
            body["nodes"] = rows_json(api.local_nodes())
            body["pools"] = rows_json(api.local_pools())
            return json(view, body)

        async def metrics(view: Any, request: Any) -> Any:
            body, content_type = metrics_body()
            # the devices, nodes and pools this worker owns now
            body += exposition(api.local_rows(), api.local_nodes(), api.local_pools())
            return view.bytes(body, content_type=content_type.split(";")[0])

        async def healthz(view: Any, request: Any) -> Any:
            return json(view, {"status": "ok"})

        async def readyz(view: Any, request: Any) -> Any:
            ok = api.ready()
            body = {"ready": ok, "checks": {"assigned": ok}, "partitions": api.owned()}
            return json(view, body, 200 if ok else 503)

        def guarded(page: Callable[..., Any]) -> Callable[..., Any]:
            async def handler(view: Any, request: Any, **match: str) -> Any:
                verdict = await api.guard.check(request.headers.get("Authorization"), request.path)
                if not verdict.allowed:
                    API_REFUSED.labels(str(verdict.status)).inc()
                    log.warning(
                        "query API: %s %s refused (%d: %s)",
                        request.method,
                        request.path,
                        verdict.status,
                        verdict.reason,
                    )
                    body = orjson.dumps({"error": verdict.reason})
                    headers = {"WWW-Authenticate": "Bearer"} if verdict.status == 401 else {}
                    return view.bytes(
                        body,
                        content_type="application/json",
                        status=verdict.status,
                        headers=headers,
                    )
                return await page(view, request, **match)

            return handler

        pages: dict[str, Callable[..., Any]] = {
            "/api/v1/devices": devices,
            "/api/v1/nodes/{node}": node,
            "/api/v1/nodes/{node}/status": node_status,
            "/api/v1/namespaces/{namespace}": namespace,
            "/api/v1/workloads/{namespace}/{name}": workload,
            "/api/v1/workloads/{namespace}/{kind}/{name}": workload_kind,
            "/api/v1/alerts": alerts,
            "/api/v1/demand": demand,
            "/api/v1/local/devices": local,
            "/metrics": metrics,
            "/healthz": healthz,
            "/readyz": readyz,
        }
        for path, page in pages.items():
            handler = page if path in OPEN_PATHS else guarded(page)
            handler.__name__ = "gpuattr_" + path.strip("/").replace("/", "_").replace("{", "")
            handler.__name__ = handler.__name__.replace("}", "")
            app.page(path)(handler)


def _same(a: str, b: str) -> bool:
    return endpoint(a) == endpoint(b) and endpoint(a) is not None
