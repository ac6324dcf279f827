"""A protocol-faithful API-server double: list and watch for pods and nodes over real HTTP.

Field selectors (``a.b=v``, ``a.b==v``, ``a.b!=v``; a field not set reads ``""``, so
``spec.nodeName=`` selects the pods the scheduler has not bound, cluster-wide) and label
selectors (``k=v``, comma-separated) as the real server reads them; one pod by name
(``/api/v1/namespaces/{ns}/pods/{name}``); the GPU Operator's
``clusterpolicies.nvidia.com/v1`` when the scenario has the CRD
(:attr:`ApiServerDouble.serves_cluster_policies`), and ``gpuclusters``/``nvidiadrivers``
(``nvidia.com/v1alpha1``) when it has the DRA stack's (:attr:`ApiServerDouble.serves_dra_stack`),
and Kueue's kinds at ``kueue.x-k8s.io/v1beta2`` when it has Kueue
(:attr:`ApiServerDouble.serves_kueue`; without them, the real server's plain-text
``404 page not found`` for a path no API group serves); ``coordination.k8s.io/v1`` Leases (get,
create, replace with optimistic concurrency: a stale ``resourceVersion`` answers 409 Conflict)
for the cluster role's election.

Like the real one: every change gets a new ``resourceVersion``; ``?watch=1&resourceVersion=RV``
streams newline-delimited JSON events (``ADDED|MODIFIED|DELETED|BOOKMARK|ERROR``) with chunked
transfer encoding; a pod is marked for deletion (MODIFIED) before it is DELETED; bookmarks carry
only ``metadata.resourceVersion``; a filtered watch sees an object that comes into its
selection as ADDED and one that leaves it as DELETED (its previous content, the new
resourceVersion: a pod bound to a node leaves ``spec.nodeName=`` and appears on its node's
watch); a version older than the kept history answers with an
``ERROR`` event holding a ``Status`` of code 410 (Expired). Checked against the real API server
by ``tests/realkube/test_double_conformance.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from infra.httpserve import start_site

Objects = Callable[[], tuple[list[dict[str, Any]], list[dict[str, Any]]]]
PLURAL = {
    "Pod": "pods",
    "Node": "nodes",
    "ResourceSlice": "resourceslices",
    "ResourceClaim": "resourceclaims",
    "ClusterPolicy": "clusterpolicies",
    "GPUCluster": "gpuclusters",
    "NVIDIADriver": "nvidiadrivers",
    "Workload": "workloads",
    "LocalQueue": "localqueues",
    "ClusterQueue": "clusterqueues",
    "ResourceFlavor": "resourceflavors",
}
KIND = {plural: kind for kind, plural in PLURAL.items()}
GROUP_VERSION = {
    "resourceslices": "resource.k8s.io/v1",
    "resourceclaims": "resource.k8s.io/v1",
    "clusterpolicies": "nvidia.com/v1",
    "gpuclusters": "nvidia.com/v1alpha1",
    "nvidiadrivers": "nvidia.com/v1alpha1",
    "workloads": "kueue.x-k8s.io/v1beta2",
    "localqueues": "kueue.x-k8s.io/v1beta2",
    "clusterqueues": "kueue.x-k8s.io/v1beta2",
    "resourceflavors": "kueue.x-k8s.io/v1beta2",
}
#: Kueue's kinds (served at v1beta2 when the scenario has Kueue)
KUEUE_PLURALS = frozenset({"workloads", "localqueues", "clusterqueues", "resourceflavors"})
#: the DRA stack's CRDs (GPU Operator v26.7.0 and later)
DRA_STACK_PLURALS = frozenset({"gpuclusters", "nvidiadrivers"})


@dataclass(frozen=True, slots=True)
class _Selector:
    fields: str
    labels: str

    def matches(self, obj: dict[str, Any]) -> bool:
        return _matches(obj, self.fields) and _labels_match(obj, self.labels)


@dataclass(frozen=True, slots=True)
class Event:
    rv: int
    plural: str
    type: str
    obj: dict[str, Any]
    #: the object before this change (MODIFIED, DELETED): a filtered watch needs both
    prev: dict[str, Any] | None = None

    def seen_by(self, plural: str, selector: _Selector) -> tuple[str, dict[str, Any]] | None:
        """What a watch of ``plural`` through ``selector`` is sent for this change, as the real
        server's watch cache decides (``cacheWatcher.convertToWatchEvent``): an object that
        comes into the selection is ADDED, one that stays MODIFIED; one that leaves it is
        DELETED with its previous content at the new resourceVersion (a pod bound to a node
        leaves ``spec.nodeName=`` that way: the watcher reads the pod to learn where it went)."""
        if self.plural != plural:
            return None
        now = self.type != "DELETED" and selector.matches(self.obj)
        before = self.prev is not None and selector.matches(self.prev)
        if now:
            return ("MODIFIED" if before else "ADDED"), self.obj
        if before and self.prev is not None:
            rv = self.obj["metadata"]["resourceVersion"]
            return "DELETED", {
                **self.prev,
                "metadata": {**self.prev["metadata"], "resourceVersion": rv},
            }
        return None


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _field(obj: dict[str, Any], path: str) -> str:
    """A field as a field selector reads it: a field that is not set reads ``""`` (a pod the
    scheduler has not bound has no ``spec.nodeName``: ``spec.nodeName=`` selects it)."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _matches(obj: dict[str, Any], selector: str) -> bool:
    """``a.b=v``, ``a.b==v`` and ``a.b!=v`` terms, all of which must hold."""
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            key, _, want = term.partition("!=")
            if _field(obj, key) == want:
                return False
            continue
        key, _, want = term.partition("=")
        if _field(obj, key) != want.removeprefix("="):
            return False
    return True


_TERM = re.compile(r"\s*([^,=!\s()]+)\s+in\s+\(([^)]*)\)\s*|([^,]+)")


def _labels_match(obj: dict[str, Any], selector: str) -> bool:
    """Equality terms (``k=v``) and set terms (``k in (a,b)``), comma-separated."""
    labels = obj.get("metadata", {}).get("labels") or {}
    for m in _TERM.finditer(selector):
        if m.group(1) is not None:
            if labels.get(m.group(1)) not in {v.strip() for v in m.group(2).split(",")}:
                return False
            continue
        term = m.group(3).strip()
        if not term:
            continue
        key, _, want = term.partition("=")
        if labels.get(key.rstrip("!")) != want.lstrip("="):
            return False
    return True


def _deletion(plural: str, obj: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """The events the real API server sends when an object is deleted.

    Pods are always deleted gracefully (the pod strategy's ``CheckGracefulDelete``), even with
    ``gracePeriodSeconds=0`` or when never scheduled: the API server first writes the pod with
    ``deletionTimestamp`` and ``deletionGracePeriodSeconds`` (MODIFIED), then removes it
    (DELETED). A pod that vanishes without having been terminating gets both here too
    (``tests/realkube/test_double_conformance.py`` compares the two servers)."""
    meta = obj["metadata"]
    if plural != "pods" or meta.get("deletionTimestamp"):
        return [(plural, "DELETED", obj)]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    marked = {
        **obj,
        "metadata": {**meta, "deletionTimestamp": now, "deletionGracePeriodSeconds": 0},
    }
    return [(plural, "MODIFIED", marked), (plural, "DELETED", marked)]


class ApiServerDouble:
    def __init__(
        self,
        objects: Objects,
        *,
        dra_objects: Callable[[], list[dict[str, Any]]] | None = None,
        cluster_policies: Callable[[], list[dict[str, Any]]] | None = None,
        dra_stack: bool = False,
        kueue_objects: Callable[[], list[dict[str, Any]]] | None = None,
        tick_s: float = 0.1,
        bookmark_s: float = 1.0,
        history: int = 2000,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.objects = objects
        self.dra_objects = dra_objects or (lambda: [])
        self.cluster_policies = cluster_policies or (lambda: [])
        #: the ClusterPolicy CRD is installed (the GPU Operator is): may be switched either way
        self.serves_cluster_policies = cluster_policies is not None
        #: the GPUCluster and NVIDIADriver CRDs are installed (``cluster_policies`` provides their
        #: objects too)
        self.serves_dra_stack = dra_stack
        #: Kueue's CRDs are installed: its objects at kueue.x-k8s.io/v1beta2
        self.kueue_objects = kueue_objects or (lambda: [])
        self.serves_kueue = kueue_objects is not None
        self.tick_s = tick_s
        self.bookmark_s = bookmark_s
        self.history = history
        self.host = host
        self.port = port
        self.rv = 1
        self.lists = 0
        self.watches = 0
        self._store: dict[tuple[str, str], dict[str, Any]] = {}
        self._leases: dict[tuple[str, str], dict[str, Any]] = {}
        self._log: list[Event] = []
        self._expired_below = 0
        self._fail: list[int] = []
        self._pod_lists_open = asyncio.Event()
        self._pod_lists_open.set()
        self._changed = asyncio.Condition()
        self._cut = 0  # generation: streams opened before a cut are cut
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._ticker: asyncio.Task[None] | None = None

    # --- fault switches
    def expire_all(self) -> None:
        """Every resourceVersion handed out so far becomes too old: watches get 410."""
        self.rv += 1
        self._expired_below = self.rv

    def fail_next(self, n: int, status: int = 500) -> None:
        self._fail += [status] * n

    def hold_pod_lists(self) -> None:
        """Pod lists are answered only after :meth:`release_pod_lists` (a slow API server)."""
        self._pod_lists_open.clear()

    def release_pod_lists(self) -> None:
        self._pod_lists_open.set()

    def cut_streams(self) -> None:
        self._cut += 1

    async def down(self) -> None:
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def up(self) -> None:
        if self._site is None and self._runner is not None:
            self._site = web.TCPSite(self._runner, self.host, self.port)
            await self._site.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # --- the store
    def sync(self) -> None:
        """Diff the provider's objects against the store; append events for what changed."""
        pods, nodes = self.objects()
        desired = {
            (PLURAL[o["kind"]], o["metadata"]["uid"]): o
            for o in (
                *pods,
                *nodes,
                *self.dra_objects(),
                *self.cluster_policies(),
                *self.kueue_objects(),
            )
        }
        events: list[tuple[str, str, dict[str, Any]]] = []
        for key, obj in desired.items():
            old = self._store.get(key)
            if old is None:
                events.append((key[0], "ADDED", obj))
            elif {**old, "metadata": {**old["metadata"], "resourceVersion": None}} != {
                **obj,
                "metadata": {**obj["metadata"], "resourceVersion": None},
            }:
                events.append((key[0], "MODIFIED", obj))
        for key, old in self._store.items():
            if key not in desired:
                events += _deletion(key[0], old)
        for plural, kind, obj in events:
            self.rv += 1
            stored = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
            key = (plural, stored["metadata"]["uid"])
            prev = self._store.get(key)
            if kind == "DELETED":
                self._store.pop(key, None)
            else:
                self._store[key] = stored
            self._log.append(Event(self.rv, plural, kind, stored, prev))
        del self._log[: max(0, len(self._log) - self.history)]

    async def _tick(self) -> None:
        while True:
            before = self.rv
            self.sync()
            if self.rv != before:
                async with self._changed:
                    self._changed.notify_all()
            await asyncio.sleep(self.tick_s)

    # --- HTTP
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self._fail:
            code = self._fail.pop(0)
            return web.json_response(
                _status(code, "InternalError", "injected failure"), status=code
            )
        plural = request.match_info["plural"]
        unserved = (
            (plural == "clusterpolicies" and not self.serves_cluster_policies)
            or (plural in DRA_STACK_PLURALS and not self.serves_dra_stack)
            or (plural in KUEUE_PLURALS and not self.serves_kueue)
        )
        if unserved:
            # no API group serves the path: the real server's plain-text answer, list or watch
            return web.Response(status=404, text="404 page not found\n")
        fields = request.query.get("fieldSelector", "")
        if namespace := request.match_info.get("namespace"):  # a namespaced list or watch
            fields = ",".join(filter(None, (fields, f"metadata.namespace={namespace}")))
        selector = _Selector(fields, request.query.get("labelSelector", ""))
        if request.query.get("watch", "").lower() in ("1", "true"):
            return await self._watch(request, plural, selector)
        self.lists += 1
        if plural == "pods":
            await self._pod_lists_open.wait()
        items = [
            o for (p, _), o in sorted(self._store.items()) if p == plural and selector.matches(o)
        ]
        return web.json_response(
            {
                "kind": f"{KIND[plural]}List",
                "apiVersion": GROUP_VERSION.get(plural, "v1"),
                "metadata": {"resourceVersion": str(self.rv)},
                "items": items,
            }
        )

    async def _watch(
        self, request: web.Request, plural: str, selector: _Selector
    ) -> web.StreamResponse:
        self.watches += 1
        since = int(request.query.get("resourceVersion") or self.rv)
        bookmarks = request.query.get("allowWatchBookmarks", "").lower() == "true"
        deadline = asyncio.get_running_loop().time() + float(
            request.query.get("timeoutSeconds", 300)
        )
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        oldest = self._log[0].rv - 1 if self._log else self.rv
        if since < self._expired_below or since < oldest:
            err = _status(410, "Expired", f"too old resource version: {since} ({self.rv})")
            await resp.write(json.dumps({"type": "ERROR", "object": err}).encode() + b"\n")
            return resp
        # the client may go away at any time (aiohttp's ClientConnectionResetError is one)
        with contextlib.suppress(ConnectionResetError):
            await self._stream(resp, request, plural, selector, since, bookmarks, deadline)
        return resp

    async def _stream(
        self,
        resp: web.StreamResponse,
        request: web.Request,
        plural: str,
        selector: _Selector,
        since: int,
        bookmarks: bool,
        deadline: float,
    ) -> None:
        generation = self._cut
        while True:
            for ev in [e for e in self._log if e.rv > since]:
                since = ev.rv  # every event up to here is processed (sent or filtered out)
                seen = ev.seen_by(plural, selector)
                if seen is not None:
                    line = json.dumps({"type": seen[0], "object": seen[1]}).encode() + b"\n"
                    await resp.write(line)
            if self._cut != generation:
                await resp.write(b'{"type": "MODIFIED", "object": {"kind": "Po')
                assert request.transport is not None
                request.transport.close()  # cut mid-line, as a dropped connection does
                return
            if asyncio.get_running_loop().time() >= deadline:
                break
            async with self._changed:
                try:
                    await asyncio.wait_for(self._changed.wait(), self.bookmark_s)
                    continue
                except TimeoutError:
                    pass
            if bookmarks and not any(e.rv > since for e in self._log):
                mark = {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": KIND[plural],
                        "apiVersion": GROUP_VERSION.get(plural, "v1"),
                        "metadata": {"resourceVersion": str(since)},
                    },
                }
                await resp.write(json.dumps(mark).encode() + b"\n")

    async def _get_pod(self, request: web.Request) -> web.Response:
        """``GET /api/v1/namespaces/{namespace}/pods/{name}``: the pod as stored, or 404."""
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        if self._fail:
            code = self._fail.pop(0)
            return web.json_response(
                _status(code, "InternalError", "injected failure"), status=code
            )
        for (plural, _), obj in sorted(self._store.items()):
            meta = obj["metadata"]
            if plural == "pods" and (meta.get("namespace"), meta["name"]) == (namespace, name):
                return web.json_response(obj)
        return web.json_response(_status(404, "NotFound", f'pods "{name}" not found'), status=404)

    # --- Leases (coordination.k8s.io/v1): the cluster role's leader election
    def _lease_path(self, request: web.Request) -> tuple[str, str]:
        return request.match_info["namespace"], request.match_info.get("name", "")

    async def _get_lease(self, request: web.Request) -> web.Response:
        key = self._lease_path(request)
        lease = self._leases.get(key)
        if lease is None:
            return web.json_response(
                _status(404, "NotFound", f'leases.coordination.k8s.io "{key[1]}" not found'),
                status=404,
            )
        return web.json_response(lease)

    async def _create_lease(self, request: web.Request) -> web.Response:
        namespace, _ = self._lease_path(request)
        body = await request.json()
        name = body.get("metadata", {}).get("name", "")
        if (namespace, name) in self._leases:
            return web.json_response(
                _status(
                    409, "AlreadyExists", f'leases.coordination.k8s.io "{name}" already exists'
                ),
                status=409,
            )
        return web.json_response(self._store_lease(namespace, name, body), status=201)

    async def _replace_lease(self, request: web.Request) -> web.Response:
        key = self._lease_path(request)
        body = await request.json()
        current = self._leases.get(key)
        if current is None:
            return await self._get_lease(request)
        given = body.get("metadata", {}).get("resourceVersion")
        if given != current["metadata"]["resourceVersion"]:
            message = (
                f'Operation cannot be fulfilled on leases.coordination.k8s.io "{key[1]}": the '
                "object has been modified; please apply your changes to the latest version and "
                "try again"
            )
            return web.json_response(_status(409, "Conflict", message), status=409)
        return web.json_response(self._store_lease(*key, body))

    def _store_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        previous = self._leases.get((namespace, name), {}).get("metadata", {})
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": previous.get("uid") or f"lease-{namespace}-{name}",
                "resourceVersion": str(self.rv),
                "creationTimestamp": previous.get("creationTimestamp")
                or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
            "spec": body.get("spec") or {},
        }
        self._leases[(namespace, name)] = lease
        return lease

    async def start(self) -> None:
        self.sync()
        app = web.Application()
        leases = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        app.router.add_get(leases + "/{name}", self._get_lease)
        app.router.add_post(leases, self._create_lease)
        app.router.add_put(leases + "/{name}", self._replace_lease)
        app.router.add_get("/api/v1/{plural:pods|nodes}", self._handle)
        app.router.add_get("/api/v1/namespaces/{namespace}/{plural:pods}", self._handle)
        app.router.add_get("/api/v1/namespaces/{namespace}/pods/{name}", self._get_pod)
        app.router.add_get(
            "/apis/resource.k8s.io/v1/{plural:resourceslices|resourceclaims}", self._handle
        )
        app.router.add_get("/apis/nvidia.com/v1/{plural:clusterpolicies}", self._handle)
        app.router.add_get(
            "/apis/nvidia.com/v1alpha1/{plural:gpuclusters|nvidiadrivers}", self._handle
        )
        kueue = "workloads|localqueues|clusterqueues|resourceflavors"
        app.router.add_get(f"/apis/kueue.x-k8s.io/v1beta2/{{plural:{kueue}}}", self._handle)
        self._runner, self._site, self.port = await start_site(app, self.host, self.port, 0.5)
        self._ticker = asyncio.create_task(self._tick(), name="apiserver-double-tick")

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._site = None

    async def __aenter__(self) -> ApiServerDouble:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
