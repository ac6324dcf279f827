"""The GPU Operator's cluster-scoped intent, watched by the cluster role (one reader per cluster,
not every node's agent): ``ClusterPolicy`` (``nvidia.com/v1``, the device-plugin stack),
``GPUCluster`` (``nvidia.com/v1alpha1``, the DRA stack) and ``NVIDIADriver``
(``nvidia.com/v1alpha1``, a driver for the nodes it owns). One watcher per kind.

Each object is published whole (:mod:`agents.kube.gpuoperator`) after every list and whenever a
watch event changes what it says — intent or the operator's own word (``status.state``,
conditions); a write that changes nothing we read (a label, managed fields) is not published
again. The watcher remembers what it published (a cluster has one or a few of each), so an
object deleted while the watch was down, missing from the relist, is published once more as
deleted.

A cluster without the GPU Operator (or with a release before the DRA stack's CRDs) does not serve
the kind: the API server answers 404. That is a state, not a fault: logged once,
``gpuattr_cluster_<kind>_served`` 0, ``gpuattr_agent_source_errors_total{source=<kind>,
error="not_served"}`` counted, and the list is tried again within ``retry_s`` (the operator may be
installed later). What this watcher had published is published as deleted: with its CRD gone, so
are the objects.

What we cannot read is said, not dropped: an object's ``status.state`` outside the CRD's enum, or a
GPUCluster ``spec`` key this build does not know, is logged (once per object and what it says)
and counted in ``gpuattr_cluster_unread_fields_total{kind,field}``; the record is published
with what we could read.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, Generic, TypeVar

from kubernetes_asyncio import client
from prometheus_client import Counter, Gauge

from agents.health import SourceHealth
from agents.kube.gpuoperator import CR_STATES, cluster_policy, gpu_cluster, nvidia_driver
from agents.kube.watch import ListWatcher
from agents.selfmetrics import SOURCE_ERRORS
from agents.types import NowMs
from contract.inputs import (
    ClusterPolicyRecord,
    DeviceTaintRuleRecord,
    GpuClusterRecord,
    NvidiaDriverRecord,
)
from contract.records import replace
from infra.backoff import Backoff
from infra.settings import KubeSettings

log = logging.getLogger(__name__)

OperatorRecord = ClusterPolicyRecord | GpuClusterRecord | NvidiaDriverRecord
R = TypeVar("R", bound=OperatorRecord | DeviceTaintRuleRecord)

CRD_SERVED = Gauge(
    "gpuattr_cluster_clusterpolicy_served",
    "1 when the API server serves clusterpolicies.nvidia.com (the GPU Operator's CRD is "
    "installed), 0 when it answers 404 (not installed) and before the first list",
)
GPUCLUSTER_SERVED = Gauge(
    "gpuattr_cluster_gpucluster_served",
    "1 when the API server serves gpuclusters.nvidia.com/v1alpha1 (the GPU Operator's DRA stack "
    "CRD), 0 when it answers 404 and before the first list",
)
NVIDIADRIVER_SERVED = Gauge(
    "gpuattr_cluster_nvidiadriver_served",
    "1 when the API server serves nvidiadrivers.nvidia.com/v1alpha1, 0 when it answers 404 and "
    "before the first list",
)
UNREAD = Counter(
    "gpuattr_cluster_unread_fields_total",
    "GPU Operator objects published with a field this build cannot read (a status.state outside "
    "the CRD's enum, a GPUCluster spec key it does not know), by kind and field",
    ["kind", "field"],
)


def _said(record: R) -> R:
    """The record without when it was read and at which version: what a change is judged on."""
    return replace(record, ts_ms=0, resource_version="")


class OperatorWatcher(ListWatcher[R], Generic[R]):
    """One cluster-scoped GPU Operator kind, listed and watched whole (also any other
    cluster-scoped kind an API server may not serve: :mod:`agents.kube.taintrulewatch`)."""

    optional_api = True  # 404: the kind's CRD is not installed (yet)
    group: ClassVar[str] = "nvidia.com"
    version: ClassVar[str]
    plural: ClassVar[str]
    title: ClassVar[str]
    served: ClassVar[Gauge]
    absent: ClassVar[str]  # what a 404 means for this kind
    not_served_reason: ClassVar[str] = "crd-not-installed"
    logger: ClassVar[logging.Logger] = log  # the health lines name the kind's own module

    def __init__(
        self,
        *,
        api: Any,
        emit: Callable[[R], Awaitable[None]],
        now_ms: NowMs,
        settings: KubeSettings,
        retry_s: float,
    ) -> None:
        super().__init__(node="", api=api, emit=emit, now_ms=now_ms, settings=settings)
        self.custom = client.CustomObjectsApi(api)
        self.health = SourceHealth(self.kind, self._what(), self.logger)
        self.retry_s = retry_s
        self.published: dict[str, R] = {}  # name → last published
        self._listing = False

    def _translate(self, obj: Mapping[str, Any], deleted: bool) -> R | None:
        raise NotImplementedError

    def _what(self) -> str:
        """How the health lines and the status record name this watch."""
        return f"{self.title} watch ({self.group}/{self.version})"

    def _why_not_served(self) -> str:
        """What a 404 means, right after the API path in the not-served detail."""
        return f"(404): {self.absent}"

    def _list_call(self) -> Callable[..., Any]:
        return functools.partial(
            self.custom.list_cluster_custom_object, self.group, self.version, self.plural
        )

    def _filters(self) -> dict[str, str]:
        return {}  # every object: cluster-scoped, a handful at most

    def _listed(self, listing: Any) -> tuple[str, list[Any]]:
        meta = listing.get("metadata") or {}
        return str(meta.get("resourceVersion") or ""), list(listing.get("items") or [])

    def _records(self, obj: Any, deleted: bool) -> list[R]:
        raw: Mapping[str, Any] = obj if isinstance(obj, Mapping) else {}
        record = self._translate(raw, deleted)
        if record is None:
            return []
        before = self.published.pop(record.name, None)
        if deleted:
            return [record]
        self.published[record.name] = record
        if not self._listing and before is not None and _said(before) == _said(record):
            return []  # written, but nothing we read changed
        self._unread(raw, record, before)
        return [record]

    def _unread(self, raw: Mapping[str, Any], record: R, before: R | None) -> None:
        """Log and count what the record could not carry (once per change of it)."""
        status = raw.get("status")
        state = status.get("state") if isinstance(status, Mapping) else None
        unread: list[tuple[str, str]] = []
        if isinstance(state, str) and state and state not in CR_STATES:
            unread.append(("status.state", f"status.state {state!r} is none this build knows"))
        if isinstance(record, GpuClusterRecord):
            unread += [
                (f"spec.{k}", f"spec.{k} is unknown to this build") for k in record.unknown_fields
            ]
        if not unread or (before is not None and _said(before) == _said(record)):
            return
        for field, why in unread:
            UNREAD.labels(self.kind, field).inc()
            log.warning(
                "%s %s: %s; published with what could be read", self.title, record.name, why
            )

    async def relist(self) -> str:
        self._listing = True  # a list is published whole, changed or not
        try:
            rv = await super().relist()
        finally:
            self._listing = False
        self.served.set(1)
        return rv

    async def _after_list(self, items: list[Any], rv: str) -> None:
        """What was published before but the list no longer has: deleted meanwhile."""
        listed = {str((obj.get("metadata") or {}).get("name") or "") for obj in items}
        for name in sorted(set(self.published) - listed):
            await self.emit(self._gone(self.published.pop(name)))

    def _gone(self, record: R) -> R:
        return replace(record, ts_ms=self.now_ms(), deleted=True)

    async def _not_served(self) -> bool:
        """The kind is not served (its CRD is not installed, its API version not enabled):
        publish what was published as deleted, wait ``retry_s`` and list again."""
        SOURCE_ERRORS.labels(self.kind, "not_served").inc()
        self.served.set(0)
        self.health.disabled(
            self.not_served_reason,
            f"the API server does not serve {self.plural}.{self.group}/{self.version} "
            f"{self._why_not_served()}; no {self.title} is published; listing again within "
            f"{self.retry_s:g}s",
        )
        for name in sorted(self.published):
            await self.emit(self._gone(self.published.pop(name)))
        await Backoff(self.retry_s, self.retry_s).sleep()
        return True


class ClusterPolicyWatcher(OperatorWatcher[ClusterPolicyRecord]):
    kind = "clusterpolicy"
    version, plural, title = "v1", "clusterpolicies", "ClusterPolicy"
    served = CRD_SERVED
    absent = "the GPU Operator is not installed"

    def _translate(self, obj: Mapping[str, Any], deleted: bool) -> ClusterPolicyRecord | None:
        return cluster_policy(obj, ts_ms=self.now_ms(), deleted=deleted)


class GpuClusterWatcher(OperatorWatcher[GpuClusterRecord]):
    kind = "gpucluster"
    version, plural, title = "v1alpha1", "gpuclusters", "GPUCluster"
    served = GPUCLUSTER_SERVED
    absent = "no GPU Operator with the DRA stack (v26.7.0 or later) is installed"

    def _translate(self, obj: Mapping[str, Any], deleted: bool) -> GpuClusterRecord | None:
        return gpu_cluster(obj, ts_ms=self.now_ms(), deleted=deleted)


class NvidiaDriverWatcher(OperatorWatcher[NvidiaDriverRecord]):
    kind = "nvidiadriver"
    version, plural, title = "v1alpha1", "nvidiadrivers", "NVIDIADriver"
    served = NVIDIADRIVER_SERVED
    absent = "the GPU Operator is not installed, or without its NVIDIADriver CRD"

    def _translate(self, obj: Mapping[str, Any], deleted: bool) -> NvidiaDriverRecord | None:
        return nvidia_driver(obj, ts_ms=self.now_ms(), deleted=deleted)


#: every kind the cluster role watches, in the order it starts them
WATCHERS: tuple[type[OperatorWatcher[Any]], ...] = (
    ClusterPolicyWatcher,
    GpuClusterWatcher,
    NvidiaDriverWatcher,
)
