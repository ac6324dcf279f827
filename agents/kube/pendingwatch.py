"""Pods no node has yet, cluster-wide (``fieldSelector=spec.nodeName=``): the GPU demand the
scheduler could not place (the cluster role's, under its leader).

Only pods asking for GPUs (:func:`agents.kube.pending.pending_pod`) are kept and published; the
others are counted and forgotten. Each pod is published on change, one record per distinct
resource it asks for, keyed by that resource on the demand-events topic
(:func:`agents.kube.pending.per_resource`). A pod leaves the selector when the scheduler binds it
or when it is deleted; the watch says DELETED either way, with the pod as it was. The watcher
then reads the pod once (a list by name: the role lists and watches, it never gets one object):
there with ``spec.nodeName`` → its last records say ``bound`` and the
node; gone (404, or a new pod under the name) → ``deleted``. A pod that left while the watch was
down is missing from the relist and is read the same way. After every list: the whole list of
pending GPU pods (``k8s.pending-pods``) into every partition, so the demand stage drops what it
holds and the list no longer has. A new leader makes a new watcher, which lists first.

State: the last record of each live pending GPU pod (and the DRA claim specs it asks through,
read once: a claim's spec is immutable), nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import Counter, Gauge

from agents.health import SourceHealth
from agents.kube.pending import (
    CLAIM,
    ClaimSource,
    claim_sources,
    pending_pod,
    per_resource,
)
from agents.kube.watch import ListWatcher
from agents.types import NowMs
from contract.inputs import PendingPod, PendingPodList, PendingState
from contract.records import replace
from infra.settings import KubeSettings

log = logging.getLogger(__name__)

IGNORED = Counter(
    "gpuattr_cluster_pending_pods_ignored_total",
    "Watch events and list items of unbound pods that ask for no GPU (not published)",
)
PENDING = Gauge(
    "gpuattr_cluster_pending_gpu_pods",
    "Pods not bound to a node that ask for GPUs, as the leader's watch sees them",
)
CLAIMS_UNREAD = Counter(
    "gpuattr_cluster_pending_claims_unread_total",
    "ResourceClaims or templates a pending pod references that could not be read, by reason",
    ["reason"],
)


class DemandSink(Protocol):
    """Where pending pods go (:class:`agents.publish.Publisher`)."""

    async def publish_pending(self, resource: str, record: PendingPod) -> None: ...

    async def publish_pending_list(self, record: PendingPodList) -> None: ...


def _said(record: PendingPod) -> PendingPod:
    """What a change is judged on: the record without when it was read and at which version."""
    return replace(record, ts_ms=0, resource_version="")


class PendingPodWatcher(ListWatcher[PendingPod]):
    kind = "pending pod"

    def __init__(
        self, *, api: Any, sink: DemandSink, now_ms: NowMs, settings: KubeSettings
    ) -> None:
        super().__init__(node="", api=api, emit=self._publish, now_ms=now_ms, settings=settings)
        self.sink = sink
        self.custom = client.CustomObjectsApi(api)
        self.serialize = api.sanitize_for_serialization  # a client model → the API's JSON
        self.health = SourceHealth("apiserver", "pending pod watch (spec.nodeName=)", log)
        self.pods: dict[str, PendingPod] = {}  # uid → last published (every request)
        self.claims: dict[str, dict[ClaimSource, Mapping[str, Any]]] = {}  # uid → claim specs
        self._seen_in_list: set[str] = set()

    def _list_call(self) -> Any:
        return self.core.list_pod_for_all_namespaces

    def _selector(self) -> str:
        return "spec.nodeName="

    def _json(self, obj: Any) -> Mapping[str, Any]:
        raw = obj if isinstance(obj, Mapping) else self.serialize(obj)
        return raw if isinstance(raw, Mapping) else {}

    async def _publish(self, record: PendingPod) -> None:
        for resource, part in per_resource(record):
            await self.sink.publish_pending(resource, part)

    async def relist(self) -> str:
        self._seen_in_list = set()
        return await super().relist()

    async def _handle(self, obj: Any, deleted: bool) -> None:
        pod = self._json(obj)
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return
        if deleted:
            if uid in self.pods:
                await self._left(uid)
            self.claims.pop(uid, None)
            return
        self._seen_in_list.add(uid)
        record = pending_pod(pod, ts_ms=self.now_ms(), claims=await self._claims(uid, pod))
        if record is None:
            IGNORED.inc()
            self.claims.pop(uid, None)
            return
        before = self.pods.get(uid)
        self.pods[uid] = record
        PENDING.set(len(self.pods))
        if before is None or _said(before) != _said(record):
            await self.emit(record)

    async def _after_list(self, items: list[Any], rv: str) -> None:
        for uid in sorted(set(self.pods) - self._seen_in_list):  # left while the watch was down
            await self._left(uid)
        pods = tuple(sorted(self.pods.values(), key=lambda p: (p.namespace, p.name, p.uid)))
        await self.sink.publish_pending_list(PendingPodList(self.now_ms(), pods, rv))

    async def _left(self, uid: str) -> None:
        """The pod left the selector: read it once; publish its last records; forget it."""
        last = self.pods[uid]
        state, node = await self._where(last)
        final = replace(last, ts_ms=self.now_ms(), state=state, node=node)
        await self.emit(final)
        del self.pods[uid]
        self.claims.pop(uid, None)
        PENDING.set(len(self.pods))
        log.debug("%s/%s %s %s", last.namespace, last.name, state, node)

    async def _where(self, last: PendingPod) -> tuple[PendingState, str]:
        # a list by name, not a get: the role lists and watches, it never gets one object
        found = await self.core.list_namespaced_pod(
            last.namespace, field_selector=f"metadata.name={last.name}"
        )
        if not found.items:
            return "deleted", ""
        meta, spec = found.items[0].metadata, found.items[0].spec
        node = str(getattr(spec, "node_name", None) or "")
        if getattr(meta, "uid", None) != last.uid:  # another pod under the same name
            return "deleted", ""
        if not node:  # still unbound: the watch said it left; it is gone for our purposes
            log.warning("%s/%s left the pending watch unbound", last.namespace, last.name)
            return "deleted", ""
        return "bound", node

    async def _claims(
        self, uid: str, pod: Mapping[str, Any]
    ) -> dict[ClaimSource, Mapping[str, Any]]:
        """The claim specs of the pod's DRA claims, read once per pod (immutable)."""
        sources = claim_sources(pod)
        known = self.claims.get(uid, {})
        missing = [s for s in sources if s not in known]
        if not missing:
            return known
        read = dict(known)
        for source in missing:
            spec = await self._read_claim(source)
            if spec is not None:
                read[source] = spec
        self.claims[uid] = read
        return read

    async def _read_claim(self, source: ClaimSource) -> Mapping[str, Any] | None:
        kind, namespace, name = source
        plural = "resourceclaims" if kind == CLAIM else "resourceclaimtemplates"
        try:
            listing = await self.custom.list_namespaced_custom_object(
                "resource.k8s.io", "v1", namespace, plural, field_selector=f"metadata.name={name}"
            )
        except ApiException as exc:
            CLAIMS_UNREAD.labels(f"http_{exc.status}").inc()
            log.warning("%s %s/%s not read (HTTP %s)", kind, namespace, name, exc.status)
            return None
        items = (listing or {}).get("items") or []
        if not items:
            CLAIMS_UNREAD.labels("not_found").inc()
            log.warning("%s %s/%s not found (yet)", kind, namespace, name)
            return None
        spec = items[0].get("spec") or {}
        out = spec if kind == CLAIM else (spec.get("spec") or {})
        return out if isinstance(out, Mapping) else None
