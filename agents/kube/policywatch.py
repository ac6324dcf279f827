"""The GPU Operator's ``ClusterPolicy`` objects (``clusterpolicies.nvidia.com/v1``, cluster-scoped),
watched by the cluster role (one reader per cluster, not every node's agent).

Each policy is published whole (:func:`agents.kube.gpuoperator.cluster_policy`) after every list
and whenever a watch event changes what it says — intent (``spec.<operand>.enabled``, MIG
strategy, sharing config) or the operator's own word (``status.state``, conditions); a write
that changes nothing we read (a label, managed fields) is not published again. The watcher
remembers what it published (a cluster has one policy, rarely a few), so a policy deleted while
the watch was down, missing from the relist, is published once more as deleted.

A cluster without the GPU Operator has no ``ClusterPolicy`` CRD: the API server answers 404.
That is a state, not a fault: logged once, ``gpuattr_cluster_clusterpolicy_served`` 0,
``gpuattr_agent_source_errors_total{source="clusterpolicy",error="not_served"}`` counted, and
the list is tried again within ``retry_s`` (the operator may be installed later). Policies this
watcher had published are published as deleted: with its CRD gone, so are they.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kubernetes_asyncio import client
from prometheus_client import Gauge

from agents.health import SourceHealth
from agents.kube.gpuoperator import cluster_policy
from agents.kube.watch import ListWatcher
from agents.selfmetrics import SOURCE_ERRORS
from agents.types import NowMs
from contract.inputs import ClusterPolicyRecord
from contract.records import replace
from infra.backoff import Backoff
from infra.settings import KubeSettings

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "nvidia.com", "v1", "clusterpolicies"

CRD_SERVED = Gauge(
    "gpuattr_cluster_clusterpolicy_served",
    "1 when the API server serves clusterpolicies.nvidia.com (the GPU Operator's CRD is "
    "installed), 0 when it answers 404 (not installed) and before the first list",
)

EmitPolicy = Callable[[ClusterPolicyRecord], Awaitable[None]]


def _said(record: ClusterPolicyRecord) -> ClusterPolicyRecord:
    """The record without when it was read and at which version: what a change is judged on."""
    return replace(record, ts_ms=0, resource_version="")


class ClusterPolicyWatcher(ListWatcher[ClusterPolicyRecord]):
    kind = "clusterpolicy"
    optional_api = True  # 404: the GPU Operator's CRD is not installed (yet)

    def __init__(
        self,
        *,
        api: Any,
        emit: EmitPolicy,
        now_ms: NowMs,
        settings: KubeSettings,
        retry_s: float,
    ) -> None:
        super().__init__(node="", api=api, emit=emit, now_ms=now_ms, settings=settings)
        self.custom = client.CustomObjectsApi(api)
        self.health = SourceHealth("clusterpolicy", "ClusterPolicy watch (nvidia.com/v1)", log)
        self.retry_s = retry_s
        self.published: dict[str, ClusterPolicyRecord] = {}  # name → last published
        self._listing = False

    def _list_call(self) -> Callable[..., Any]:
        return functools.partial(self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)

    def _filters(self) -> dict[str, str]:
        return {}  # every ClusterPolicy: cluster-scoped, a handful at most

    def _listed(self, listing: Any) -> tuple[str, list[Any]]:
        meta = listing.get("metadata") or {}
        return str(meta.get("resourceVersion") or ""), list(listing.get("items") or [])

    def _records(self, obj: Any, deleted: bool) -> list[ClusterPolicyRecord]:
        raw: Mapping[str, Any] = obj if isinstance(obj, Mapping) else {}
        record = cluster_policy(raw, ts_ms=self.now_ms(), deleted=deleted)
        if record is None:
            return []
        before = self.published.pop(record.name, None)
        if deleted:
            return [record]
        self.published[record.name] = record
        if not self._listing and before is not None and _said(before) == _said(record):
            return []  # written, but nothing we read changed
        return [record]

    async def relist(self) -> str:
        self._listing = True  # a list is published whole, changed or not
        try:
            rv = await super().relist()
        finally:
            self._listing = False
        CRD_SERVED.set(1)
        return rv

    async def _after_list(self, items: list[Any], rv: str) -> None:
        """What was published before but the list no longer has: deleted meanwhile."""
        listed = {str((obj.get("metadata") or {}).get("name") or "") for obj in items}
        for name in sorted(set(self.published) - listed):
            await self.emit(self._gone(self.published.pop(name)))

    def _gone(self, record: ClusterPolicyRecord) -> ClusterPolicyRecord:
        return replace(record, ts_ms=self.now_ms(), deleted=True)

    async def _not_served(self) -> bool:
        """No ClusterPolicy CRD: a cluster without the GPU Operator. Publish what was published
        as deleted, wait ``retry_s`` and list again."""
        SOURCE_ERRORS.labels("clusterpolicy", "not_served").inc()
        CRD_SERVED.set(0)
        self.health.disabled(
            "crd-not-installed",
            f"the API server does not serve {PLURAL}.{GROUP}/{VERSION} (404): the GPU Operator "
            f"is not installed; no ClusterPolicy is published; listing again within "
            f"{self.retry_s:g}s",
        )
        for name in sorted(self.published):
            await self.emit(self._gone(self.published.pop(name)))
        await Backoff(self.retry_s, self.retry_s).sleep()
        return True
