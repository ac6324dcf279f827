"""Pod and node watchers: list → resourceVersion → watch (bookmarks) → relist on 410 → backoff.

Pods: ONE watcher per agent with ``fieldSelector=spec.nodeName=<node>``, like the kubelet itself.
It scales with the cluster (each agent sees only its node's pods, the API server filters), and
its records are keyed by node like every other input, so they land in the partition where that
node's holders are joined. Only pods that can hold a GPU are published (and listed in the
``k8s.pod-list`` record): :func:`agents.kube.translate.can_hold_gpu`. Nodes: one watcher with
``fieldSelector=metadata.name=<node>``. The GPU Operator's operand pods on the node (its
namespace, ``fieldSelector=spec.nodeName=<node>,metadata.namespace=<ns>``: the pods the agent may
already list): :class:`OperandWatcher` publishes them whole on every change.

Each step is a small method; every outage is one warning and one recovery line, counted.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.watch import Watch

from agents.health import SourceHealth
from agents.kube.dra import claim_record, slice_record
from agents.kube.gpuoperator import operand_pods
from agents.kube.translate import can_hold_gpu, exporter_pod, node_record, pod_record
from agents.locate import ExporterLocator, ExporterPod, RefusedWhy
from agents.selfmetrics import EXPORTER_REFUSED, SOURCE_ERRORS
from agents.types import AgentRecord, Emit, NowMs
from contract.inputs import (
    OperandPod,
    PodListSnapshot,
    ResourceClaimRecord,
    ResourceSliceRecord,
)
from contract.records import replace
from infra.backoff import Backoff
from infra.kube import make_api_client as make_api_client  # where every watcher gets it
from infra.settings import KubeSettings

log = logging.getLogger(__name__)

R = TypeVar("R")


#: what the API server answers, as plain text, for a path no API serves (a CRD not installed, or
#: removed): the client library hands a watch this line as it is
NOT_FOUND_PAGE = "404 page not found"


class StreamCut(Exception):
    """The watch stream ended mid-line or carried something that is not an event."""


class ListWatcher(Generic[R]):
    """The list-then-watch loop every watcher shares; subclasses say what to list and what
    records an object makes (``R``: what ``emit`` takes)."""

    kind = ""
    #: an API the cluster may not serve (DRA before 1.34, a CRD not installed): a 404 is
    #: :meth:`_not_served` (by default: said once, and the watcher ends)
    optional_api = False

    def __init__(
        self,
        *,
        node: str,
        api: Any,
        emit: Callable[[R], Awaitable[None]],
        now_ms: NowMs,
        settings: KubeSettings,
    ) -> None:
        self.node = node
        self.core = client.CoreV1Api(api)
        self.emit = emit
        self.now_ms = now_ms
        self.settings = settings
        self.health = SourceHealth("apiserver", f"{self.kind} watch for node {node}", log)
        self.position = ""  # the resourceVersion it has seen up to (events and bookmarks)

    # --- what differs between pods and nodes
    def _list_call(self) -> Callable[..., Any]:
        raise NotImplementedError

    def _selector(self) -> str:
        raise NotImplementedError

    def _label_selector(self) -> str:
        return ""

    def _filters(self) -> dict[str, str]:
        label = self._label_selector()
        return {"field_selector": self._selector(), **({"label_selector": label} if label else {})}

    def _records(self, obj: Any, deleted: bool) -> list[R]:
        raise NotImplementedError

    async def _not_served(self) -> bool:
        """The API server answered 404 for an optional API: say so once and stop watching.
        ``True`` instead: this watcher has waited and lists again."""
        SOURCE_ERRORS.labels("apiserver", "not_served").inc()
        log.warning(
            "%s watch: the API server does not serve it (404): no %s input from "
            "this agent; restart the agent once the cluster serves it",
            self.kind,
            self.kind,
        )
        self._up()  # not a failing source: an API this cluster does not have
        return False

    async def _after_list(self, items: list[Any], rv: str) -> None:
        """Hook, after the list's records: publish a listing snapshot (pods)."""

    # --- the loop, one small step each
    async def run(self) -> None:
        rv: str | None = None
        backoff = Backoff(0.2, self.settings.max_backoff_s)
        while True:
            try:
                if rv is None:
                    rv = await self.relist()
                rv = await self.watch(rv)
                backoff.reset()
            except ApiException as exc:
                if exc.status == 404 and self.optional_api:
                    if not await self._not_served():
                        return
                    rv = None
                    continue
                if exc.status == 410:
                    SOURCE_ERRORS.labels("apiserver", "expired").inc()
                    log.info(
                        "%s watch: resourceVersion %s expired (410 Gone); relisting", self.kind, rv
                    )
                    rv = None
                    continue
                self._down(f"http_{exc.status}", str(exc.reason))
            except (aiohttp.ClientError, TimeoutError, OSError, StreamCut) as exc:
                self._down(type(exc).__name__.lower(), str(exc) or type(exc).__name__)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                # an object the client library (or our translation) cannot read: count it, log
                # it, and list again after a backoff; the agent's other collectors go on
                log.error("%s watch: unreadable object from the API server: %r", self.kind, exc)
                self._down("unreadable_object", repr(exc)[:200])
                rv = None
            await backoff.sleep()

    def _listed(self, listing: Any) -> tuple[str, list[Any]]:
        """A list reply's resourceVersion and items (client models here; dicts for DRA)."""
        return str(listing.metadata.resource_version or ""), list(listing.items or [])

    async def relist(self) -> str:
        """List everything, publish it, and return the list's resourceVersion."""
        listing = await self._list_call()(**self._filters())
        rv, items = self._listed(listing)
        for obj in items:
            await self._handle(obj, deleted=False)
        await self._after_list(items, rv)  # last: it marks the full list as published
        self._up()
        self.position = rv
        return rv

    async def watch(self, rv: str) -> str:
        """Follow the watch from ``rv`` until the server ends it; return the last version."""
        stream = Watch().stream(
            self._list_call(),
            **self._filters(),
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self.settings.watch_timeout_s,
        )
        async with stream:
            async for event in stream:
                if not isinstance(event, dict):
                    if str(event).strip() == NOT_FOUND_PAGE:  # the API is not served (any more)
                        raise ApiException(status=404, reason="Not Found")
                    raise StreamCut(f"watch stream cut: {str(event)[:80]!r}")
                self._up()
                kind = event["type"]
                raw = event["raw_object"]
                rv = str(raw.get("metadata", {}).get("resourceVersion") or rv)
                self.position = rv
                if kind == "BOOKMARK":
                    continue
                await self._handle(event["object"], deleted=kind == "DELETED")
        return rv

    async def _handle(self, obj: Any, deleted: bool) -> None:
        """One listed or watched object: emit its records (a watcher that must read more, e.g.
        the pod behind a DELETED event, overrides this)."""
        for record in self._records(obj, deleted):
            await self.emit(record)

    def _down(self, reason: str, details: str) -> None:
        self.health.failed(reason, details)

    def _up(self) -> None:
        self.health.ok()


class PodWatcher(ListWatcher[AgentRecord]):
    kind = "pod"

    def _list_call(self) -> Callable[..., Any]:
        return self.core.list_pod_for_all_namespaces  # type: ignore[no-any-return]

    def _selector(self) -> str:
        return f"spec.nodeName={self.node}"

    def _records(self, obj: Any, deleted: bool) -> list[AgentRecord]:
        if not can_hold_gpu(obj):  # the same object on DELETED: its spec is immutable
            return []
        return [pod_record(obj, node=self.node, ts_ms=self.now_ms(), deleted=deleted)]

    async def _after_list(self, items: list[Any], rv: str) -> None:
        uids = tuple(
            sorted(
                str(p.metadata.uid)
                for p in items
                if p.metadata and p.metadata.uid and can_hold_gpu(p)
            )
        )
        await self.emit(PodListSnapshot(self.node, self.now_ms(), uids, rv))


class OperandWatcher(ListWatcher[AgentRecord]):
    """The GPU Operator's operand pods on this node (the operator's namespace): published whole
    (``k8s.operand-pods``) after every list and whenever a watch event changes what they say —
    a pod's readiness, restarts, reason or init progress; a pod gone. The pods it holds are the
    node's operand pods, a handful."""

    kind = "operand pod"

    def __init__(
        self,
        *,
        node: str,
        api: Any,
        emit: Emit,
        now_ms: NowMs,
        settings: KubeSettings,
        namespace: str,
    ) -> None:
        super().__init__(node=node, api=api, emit=emit, now_ms=now_ms, settings=settings)
        self.namespace = namespace
        self.serialize = api.sanitize_for_serialization  # a client model → the API's JSON
        self.pods: dict[str, Mapping[str, Any]] = {}  # name → the pod as the API server has it
        self.published: tuple[OperandPod, ...] | None = None
        self._listing = False

    def _list_call(self) -> Callable[..., Any]:
        return self.core.list_pod_for_all_namespaces  # type: ignore[no-any-return]

    def _selector(self) -> str:
        return f"spec.nodeName={self.node},metadata.namespace={self.namespace}"

    def _json(self, obj: Any) -> Mapping[str, Any]:
        raw = obj if isinstance(obj, Mapping) else self.serialize(obj)
        return raw if isinstance(raw, Mapping) else {}

    def _changed(self) -> list[AgentRecord]:
        record = operand_pods(
            self.pods.values(),
            node=self.node,
            namespace=self.namespace,
            ts_ms=self.now_ms(),
            resource_version=self.position,
        )
        if record.pods == self.published:
            return []
        self.published = record.pods
        return [record]

    async def relist(self) -> str:
        self._listing = True  # the list's items are published once, whole, after it
        try:
            return await super().relist()
        finally:
            self._listing = False

    def _records(self, obj: Any, deleted: bool) -> list[AgentRecord]:
        if self._listing:
            return []
        raw = self._json(obj)
        name = str((raw.get("metadata") or {}).get("name") or "")
        if not name:
            return []
        if deleted:
            self.pods.pop(name, None)
        else:
            self.pods[name] = raw
        return self._changed()

    async def _after_list(self, items: list[Any], rv: str) -> None:
        listed = [self._json(obj) for obj in items]
        self.pods = {str((r.get("metadata") or {}).get("name")): r for r in listed}
        self.position = rv
        for record in self._changed():
            await self.emit(record)


class ExporterWatcher(ListWatcher[AgentRecord]):
    """The dcgm-exporter pods on this node (``spec.nodeName=<node>`` and a label selector): where
    the agent scrapes (:class:`agents.locate.ExporterLocator`). Publishes nothing.

    It lists every namespace, not only the exporter's, so a pod that carries the label without
    being the operator's exporter is seen: refused, logged once and counted by reason
    (``gpuattr_agent_exporter_candidates_refused_total``), never scraped."""

    kind = "exporter pod"

    def __init__(
        self,
        *,
        node: str,
        api: Any,
        emit: Emit,
        now_ms: NowMs,
        settings: KubeSettings,
        locator: ExporterLocator,
        port_name: str,
        default_port: int,
    ) -> None:
        super().__init__(node=node, api=api, emit=emit, now_ms=now_ms, settings=settings)
        self.locator = locator
        self.port_name = port_name
        self.default_port = default_port

    def _list_call(self) -> Callable[..., Any]:
        return self.core.list_pod_for_all_namespaces  # type: ignore[no-any-return]

    def _selector(self) -> str:
        return f"spec.nodeName={self.node}"

    def _label_selector(self) -> str:
        return self.locator.selector

    def _pod(self, obj: Any) -> ExporterPod:
        return exporter_pod(obj, port_name=self.port_name, default_port=self.default_port)

    def _records(self, obj: Any, deleted: bool) -> list[AgentRecord]:
        pod = self._pod(obj)
        why = self.locator.seen(pod, deleted)
        if why is not None:
            self._refused(pod, why)
        return []

    async def _after_list(self, items: list[Any], rv: str) -> None:
        for pod, why in self.locator.relisted(self._pod(obj) for obj in items):
            self._refused(pod, why)

    def _refused(self, pod: ExporterPod, why: RefusedWhy) -> None:
        EXPORTER_REFUSED.labels(why).inc()
        owner = f"{pod.owner_kind} {pod.owner_name}" if pod.owner_kind else "no controller"
        log.warning(
            "pod %s on node %s is labelled %s but is not the exporter of DaemonSet %s/%s "
            "(%s: namespace %s, %s): never scraped",
            pod.key,
            self.node,
            self.locator.selector,
            self.locator.namespace,
            self.locator.daemonset,
            why,
            pod.namespace,
            owner,
        )


class NodeWatcher(ListWatcher[AgentRecord]):
    kind = "node"

    def _list_call(self) -> Callable[..., Any]:
        return self.core.list_node  # type: ignore[no-any-return]

    def _selector(self) -> str:
        return f"metadata.name={self.node}"

    def _records(self, obj: Any, deleted: bool) -> list[AgentRecord]:
        return [node_record(obj, ts_ms=self.now_ms(), deleted=deleted)]


class ClusterNodeWatcher(ListWatcher[AgentRecord]):
    """Every Node of the cluster (the cluster role's, not an agent's): publishes each deletion,
    keyed by that node, so the worker lets the node's devices go at once instead of after its
    TTL. A node's labels come from its own agent; nothing else is published."""

    kind = "cluster node"

    def _list_call(self) -> Callable[..., Any]:
        return self.core.list_node  # type: ignore[no-any-return]

    def _selector(self) -> str:
        return ""

    def _records(self, obj: Any, deleted: bool) -> list[AgentRecord]:
        return [node_record(obj, ts_ms=self.now_ms(), deleted=True)] if deleted else []


DraRecord = ResourceSliceRecord | ResourceClaimRecord


class _DraWatcher(ListWatcher[AgentRecord]):
    """A ``resource.k8s.io/v1`` object watcher (plain JSON through the custom-objects client).

    It remembers what it published for this node (bounded by what is live there), so an object
    that leaves the node — deleted, deallocated, or gone while the watch was down and missing
    from the relist — is published once more as deleted."""

    plural = ""
    optional_api = True

    def __init__(
        self, *, node: str, api: Any, emit: Emit, now_ms: NowMs, settings: KubeSettings
    ) -> None:
        super().__init__(node=node, api=api, emit=emit, now_ms=now_ms, settings=settings)
        self.custom = client.CustomObjectsApi(api)
        self.published: dict[str, DraRecord] = {}

    def _list_call(self) -> Callable[..., Any]:
        return functools.partial(
            self.custom.list_cluster_custom_object, "resource.k8s.io", "v1", self.plural
        )

    def _listed(self, listing: Any) -> tuple[str, list[Any]]:
        meta = listing.get("metadata") or {}
        return str(meta.get("resourceVersion") or ""), list(listing.get("items") or [])

    def _key(self, obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"

    def _translate(self, obj: Mapping[str, Any], deleted: bool) -> DraRecord | None:
        raise NotImplementedError

    def _gone(self, record: DraRecord) -> DraRecord:
        return replace(record, ts_ms=self.now_ms(), deleted=True)

    def _records(self, obj: Any, deleted: bool) -> list[AgentRecord]:
        key = self._key(obj)
        record = self._translate(obj, deleted)
        if record is None:  # not (or no longer) this node's
            before = self.published.pop(key, None)
            return [self._gone(before)] if before is not None else []
        if deleted:
            self.published.pop(key, None)
        else:
            self.published[key] = record
        return [record]

    async def _after_list(self, items: list[Any], rv: str) -> None:
        listed = {self._key(obj) for obj in items}
        for key in sorted(set(self.published) - listed):
            await self.emit(self._gone(self.published.pop(key)))


class ResourceSliceWatcher(_DraWatcher):
    """The node's ResourceSlices (``spec.nodeName=<node>``): DRA devices and their GPU UUIDs."""

    kind = "resourceslice"
    plural = "resourceslices"

    def _selector(self) -> str:
        return f"spec.nodeName={self.node}"

    def _translate(self, obj: Mapping[str, Any], deleted: bool) -> DraRecord | None:
        return slice_record(obj, node=self.node, ts_ms=self.now_ms(), deleted=deleted)


class ResourceClaimWatcher(_DraWatcher):
    """ResourceClaims allocated on the node.

    The API server has no field selector for a claim's node, so every agent watches all claims
    and keeps those whose allocation names its node (:func:`agents.kube.dra.allocated_node`):
    claims are few next to pods (one per GPU workload, not per container), but this is the
    agent's one cluster-wide watch."""

    kind = "resourceclaim"
    plural = "resourceclaims"

    def _selector(self) -> str:
        return ""

    def _translate(self, obj: Mapping[str, Any], deleted: bool) -> DraRecord | None:
        return claim_record(obj, node=self.node, ts_ms=self.now_ms(), deleted=deleted)
