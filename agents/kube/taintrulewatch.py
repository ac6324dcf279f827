"""DRA ``DeviceTaintRule`` objects (``resource.k8s.io/v1alpha3``, KEP-5055, cluster-scoped),
watched by the cluster role (one reader per cluster, not every node's agent).

Each rule is published whole (:func:`agents.kube.dra.taint_rule`) into every input partition
after every list and whenever a watch event changes what it says (its selector or taint); a
write that changes nothing we read (a status condition, a label) is not published again. The
watcher remembers what it published (a handful of rules), so a rule deleted while the watch was
down, missing from the relist, is published once more as deleted.

Kubernetes 1.35 serves the kind only with ``--runtime-config=resource.k8s.io/v1alpha3=true``
(whatever the gates: the scheduler and the eviction controller act on rules only with the
``DRADeviceTaintRules`` gate, alpha, on top of ``DRADeviceTaints``); otherwise the API server
answers 404. That is a state, not a fault: logged, ``gpuattr_cluster_devicetaintrule_served`` 0,
``gpuattr_agent_source_errors_total{source="devicetaintrule",error="not_served"}`` counted, and
the list is tried again within ``retry_s``. Rules this watcher had published are published as
deleted: with the API gone, no rule applies.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kubernetes_asyncio import client
from prometheus_client import Gauge

from agents.health import SourceHealth
from agents.kube.dra import taint_rule
from agents.kube.watch import ListWatcher
from agents.selfmetrics import SOURCE_ERRORS
from agents.types import NowMs
from contract.inputs import DeviceTaintRuleRecord
from contract.records import replace
from infra.backoff import Backoff
from infra.settings import KubeSettings

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "resource.k8s.io", "v1alpha3", "devicetaintrules"

SERVED = Gauge(
    "gpuattr_cluster_devicetaintrule_served",
    "1 when the API server serves devicetaintrules.resource.k8s.io/v1alpha3 (that API version is "
    "enabled), 0 when it answers 404 and before the first list",
)

EmitRule = Callable[[DeviceTaintRuleRecord], Awaitable[None]]


def _said(record: DeviceTaintRuleRecord) -> DeviceTaintRuleRecord:
    """The record without when it was read and at which version: what a change is judged on."""
    return replace(record, ts_ms=0, resource_version="")


class DeviceTaintRuleWatcher(ListWatcher[DeviceTaintRuleRecord]):
    kind = "devicetaintrule"
    optional_api = True  # 404: the v1alpha3 API version is not enabled

    def __init__(
        self,
        *,
        api: Any,
        emit: EmitRule,
        now_ms: NowMs,
        settings: KubeSettings,
        retry_s: float,
    ) -> None:
        super().__init__(node="", api=api, emit=emit, now_ms=now_ms, settings=settings)
        self.custom = client.CustomObjectsApi(api)
        self.health = SourceHealth("devicetaintrule", f"DeviceTaintRule watch ({VERSION})", log)
        self.retry_s = retry_s
        self.published: dict[str, DeviceTaintRuleRecord] = {}  # name → last published
        self._listing = False

    def _list_call(self) -> Callable[..., Any]:
        return functools.partial(self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)

    def _filters(self) -> dict[str, str]:
        return {}  # every rule: cluster-scoped, a handful at most

    def _listed(self, listing: Any) -> tuple[str, list[Any]]:
        meta = listing.get("metadata") or {}
        return str(meta.get("resourceVersion") or ""), list(listing.get("items") or [])

    def _records(self, obj: Any, deleted: bool) -> list[DeviceTaintRuleRecord]:
        raw: Mapping[str, Any] = obj if isinstance(obj, Mapping) else {}
        record = taint_rule(raw, ts_ms=self.now_ms(), deleted=deleted)
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
        SERVED.set(1)
        return rv

    async def _after_list(self, items: list[Any], rv: str) -> None:
        """What was published before but the list no longer has: deleted meanwhile."""
        listed = {str((obj.get("metadata") or {}).get("name") or "") for obj in items}
        for name in sorted(set(self.published) - listed):
            await self.emit(self._gone(self.published.pop(name)))

    def _gone(self, record: DeviceTaintRuleRecord) -> DeviceTaintRuleRecord:
        return replace(record, ts_ms=self.now_ms(), deleted=True)

    async def _not_served(self) -> bool:
        """The API is not served: publish what was published as deleted, wait ``retry_s`` and
        list again."""
        SOURCE_ERRORS.labels("devicetaintrule", "not_served").inc()
        SERVED.set(0)
        self.health.disabled(
            "api-not-served",
            f"the API server does not serve {PLURAL}.{GROUP}/{VERSION} (404: "
            f"--runtime-config={GROUP}/{VERSION}=true is not set); no DeviceTaintRule is "
            f"published; listing again within {self.retry_s:g}s",
        )
        for name in sorted(self.published):
            await self.emit(self._gone(self.published.pop(name)))
        await Backoff(self.retry_s, self.retry_s).sleep()
        return True
