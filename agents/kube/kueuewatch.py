"""Kueue's queued Workloads as GPU demand (the cluster role's, under its leader).

Kueue keeps a Job suspended, with no pod, until its ``Workload`` (``kueue.x-k8s.io``) is
admitted: that wait is demand no pod shows. Four list/watch loops, one per kind — Workloads (all
namespaces), LocalQueues, ClusterQueues, ResourceFlavors — each preferring ``v1beta2`` and
falling back to ``v1beta1`` when the API server does not serve it. They feed one join
(:class:`KueueJoin`: the live queues and flavors, the facts of each queued GPU Workload), which
translates (:mod:`agents.kube.kueue`) and publishes a Workload's record, one per resource it asks
for, keyed by that resource on the demand-events topic, whenever what it says changes — its
conditions, or a queue or flavor change that alters its ClusterQueue or product. Its wait ends
with one last record: ``admitted``, ``finished`` or ``deleted``; an admitted Workload's pods are
pending pods from then on. After every list of Workloads: every queued one
(``kueue.workloads``) into every demand partition. The Workloads are listed after the queues'
first lists (bounded by ``retry_s``), so a Workload is not first judged against no queue.

A cluster without Kueue serves neither version (404): a state, not a fault.
``gpuattr_cluster_kueue_served`` 0, ``gpuattr_agent_source_errors_total{source="kueue-<plural>",
error="not_served"}`` counted, each kind listed again within ``retry_s``; the Workloads published
as queued are published as deleted (with the CRD gone, so are they) and the queues forgotten.

What a Workload says that cannot be used (no podSets, a request that is not a whole number, a
queue or flavor not known, a flavor naming no product, DRA claims in a template) is logged and
counted in ``gpuattr_cluster_kueue_unusable_total{reason}`` once per record published with it;
the record carries what could be read (``cluster_queue`` ``""``, ``product`` ``""``). A Workload
asking for no GPU is counted and not published.

State: the live LocalQueues, ClusterQueues and ResourceFlavors (names and what we read of
them), the facts and last record of each queued GPU Workload, and the uids of the live GPU
Workloads already admitted or finished (so their last record is published once).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol, TypeVar

from kubernetes_asyncio import client
from prometheus_client import Counter, Gauge

from agents.health import SourceHealth
from agents.kube.kueue import (
    GROUP,
    VERSIONS,
    Problem,
    Queues,
    WorkloadFacts,
    cluster_queue,
    local_queue,
    queued_workload,
    read_workload,
    resource_flavor,
)
from agents.kube.pending import per_resource
from agents.kube.watch import ListWatcher
from agents.selfmetrics import SOURCE_ERRORS
from agents.types import NowMs
from contract.inputs import QueuedState, QueuedWorkload, QueuedWorkloadList
from contract.records import replace
from infra.backoff import Backoff
from infra.settings import KubeSettings

log = logging.getLogger(__name__)

SERVED = Gauge(
    "gpuattr_cluster_kueue_served",
    "1 when the API server serves workloads.kueue.x-k8s.io (v1beta2 or v1beta1: Kueue is "
    "installed), 0 when it answers 404 for both and before the first list",
)
UNUSABLE = Counter(
    "gpuattr_cluster_kueue_unusable_total",
    "Kueue Workload records published with something that could not be used (no podSets, a "
    "request not a whole number, a queue or flavor not known, a flavor naming no product, DRA "
    "claims), once per record, by reason",
    ["reason"],
)
IGNORED = Counter(
    "gpuattr_cluster_kueue_workloads_ignored_total",
    "Watch events and list items of Kueue Workloads that ask for no GPU (not published)",
)
QUEUED = Gauge(
    "gpuattr_cluster_kueue_queued_gpu_workloads",
    "Kueue Workloads asking for GPUs and not admitted, as the leader's watch sees them",
)


class WorkloadSink(Protocol):
    """Where queued Workloads go (:class:`agents.publish.Publisher`)."""

    async def publish_workload(self, resource: str, record: QueuedWorkload) -> None: ...

    async def publish_workload_list(self, record: QueuedWorkloadList) -> None: ...


def _said(record: QueuedWorkload) -> QueuedWorkload:
    """What a change is judged on: the record without when it was read and at which version."""
    return replace(record, ts_ms=0, resource_version="")


class KueueJoin:
    """The live queues, flavors and queued GPU Workloads; publishes what changes."""

    def __init__(self, sink: WorkloadSink, now_ms: NowMs) -> None:
        self.sink = sink
        self.now_ms = now_ms
        self.local: dict[tuple[str, str], str] = {}
        self.cluster: dict[str, dict[str, tuple[str, ...]]] = {}
        self.flavors: dict[str, str] = {}
        #: uid → (facts, last published record) of each queued GPU Workload
        self.waiting: dict[str, tuple[WorkloadFacts, QueuedWorkload]] = {}
        self.settled: set[str] = set()  # live GPU Workloads admitted or finished
        self._seen: set[str] | None = None  # while listing: the uids the list has

    def queues(self) -> Queues:
        return Queues(self.local, self.cluster, self.flavors)

    # --- Workloads
    async def workload(self, raw: Mapping[str, Any], deleted: bool) -> None:
        facts = read_workload(raw)
        if facts is None:
            return
        uid = facts.uid
        if deleted:
            self.settled.discard(uid)
            if uid in self.waiting:
                await self._ended(uid, "deleted")
            return
        if self._seen is not None:
            self._seen.add(uid)
        record, problems = queued_workload(facts, self.queues(), ts_ms=self.now_ms())
        if record is None:
            IGNORED.inc()
            _unusable(problems)  # no podSets, or every request unreadable
            return
        if record.state == "queued":
            self.settled.discard(uid)
            await self._judged(facts, record, problems)
        elif uid not in self.settled:
            self.settled.add(uid)
            if uid in self.waiting:  # its wait ends: once
                del self.waiting[uid]
                await self._publish(record)
        QUEUED.set(len(self.waiting))

    async def _judged(
        self, facts: WorkloadFacts, record: QueuedWorkload, problems: tuple[Problem, ...]
    ) -> None:
        before = self.waiting.get(facts.uid)
        self.waiting[facts.uid] = (facts, record)
        if before is None or _said(before[1]) != _said(record):
            _unusable(problems)
            await self._publish(record)

    async def _ended(self, uid: str, state: QueuedState) -> None:
        _, last = self.waiting.pop(uid)
        await self._publish(replace(last, ts_ms=self.now_ms(), state=state))
        QUEUED.set(len(self.waiting))

    async def _publish(self, record: QueuedWorkload) -> None:
        for resource, part in per_resource(record):
            await self.sink.publish_workload(resource, part)

    def listing_workloads(self) -> None:
        self._seen = set()

    async def workloads_listed(self, rv: str) -> None:
        """After a list: what it no longer has was deleted meanwhile; then every queued one."""
        listed, self._seen = self._seen or set(), None
        for uid in sorted(set(self.waiting) - listed):
            await self._ended(uid, "deleted")
        self.settled &= listed
        records = sorted(
            (r for _, r in self.waiting.values()), key=lambda r: (r.namespace, r.name, r.uid)
        )
        await self.sink.publish_workload_list(QueuedWorkloadList(self.now_ms(), tuple(records), rv))

    async def workloads_gone(self) -> None:
        """Kueue's API is not served: no Workload is left."""
        for uid in sorted(self.waiting):
            await self._ended(uid, "deleted")
        self.settled.clear()

    # --- what the Workloads are judged against
    async def rejudge(self) -> None:
        """A queue or flavor changed: every queued Workload judged again, published if it moved."""
        queues = self.queues()
        for facts, _ in list(self.waiting.values()):
            record, problems = queued_workload(facts, queues, ts_ms=self.now_ms())
            if record is not None:
                await self._judged(facts, record, problems)


def _unusable(problems: tuple[Problem, ...]) -> None:
    for problem in problems:
        UNUSABLE.labels(problem.reason).inc()
        log.warning("Kueue: %s (%s)", problem.detail, problem.reason)


class KueueWatcher(ListWatcher[None]):
    """One Kueue kind listed and watched whole, ``v1beta2`` first, else ``v1beta1``."""

    optional_api = True  # 404: Kueue is not installed (or not this version)
    plural: ClassVar[str]

    def __init__(
        self, *, api: Any, join: KueueJoin, now_ms: NowMs, settings: KubeSettings, retry_s: float
    ) -> None:
        super().__init__(node="", api=api, emit=_nothing, now_ms=now_ms, settings=settings)
        self.custom = client.CustomObjectsApi(api)
        self.join = join
        self.retry_s = retry_s
        self.version = VERSIONS[0]
        self.health = SourceHealth(f"kueue-{self.plural}", f"Kueue {self.plural} watch", log)
        self.ready = asyncio.Event()  # listed once, or found not served

    def _list_call(self) -> Callable[..., Any]:
        return functools.partial(
            self.custom.list_cluster_custom_object, GROUP, self.version, self.plural
        )

    def _filters(self) -> dict[str, str]:
        return {}

    def _listed(self, listing: Any) -> tuple[str, list[Any]]:
        meta = listing.get("metadata") or {}
        return str(meta.get("resourceVersion") or ""), list(listing.get("items") or [])

    async def relist(self) -> str:
        rv = await super().relist()
        self.ready.set()
        return rv

    async def _not_served(self) -> bool:
        """This version is not served: try the older one at once; neither: Kueue is not
        installed, so what it held is gone; list again within ``retry_s``."""
        at = VERSIONS.index(self.version)
        if at + 1 < len(VERSIONS):
            log.info(
                "%s.%s/%s not served; trying %s", self.plural, GROUP, self.version, VERSIONS[at + 1]
            )
            self.version = VERSIONS[at + 1]
            return True
        self.version = VERSIONS[0]
        SOURCE_ERRORS.labels(self.health.source, "not_served").inc()
        self.health.disabled(
            "kueue-not-installed",
            f"the API server serves {self.plural}.{GROUP} in none of {', '.join(VERSIONS)} (404): "
            f"Kueue is not installed; listing again within {self.retry_s:g}s",
        )
        await self._gone()
        self.ready.set()
        await Backoff(self.retry_s, self.retry_s).sleep()
        return True

    async def _gone(self) -> None:
        raise NotImplementedError


async def _nothing(record: None) -> None:
    """The watchers publish through the join, not ``emit``."""


def _raw(obj: Any) -> Mapping[str, Any]:
    return obj if isinstance(obj, Mapping) else {}


class WorkloadWatcher(KueueWatcher):
    kind = "kueue workload"
    plural = "workloads"

    async def relist(self) -> str:
        self.join.listing_workloads()
        rv = await super().relist()
        SERVED.set(1)
        log.debug("Kueue Workloads listed (%s)", self.version)
        return rv

    async def _handle(self, obj: Any, deleted: bool) -> None:
        await self.join.workload(_raw(obj), deleted)

    async def _after_list(self, items: list[Any], rv: str) -> None:
        await self.join.workloads_listed(rv)

    async def _gone(self) -> None:
        SERVED.set(0)
        await self.join.workloads_gone()


class QueueWatcher(KueueWatcher):
    """A kind the Workloads are judged against: kept whole, each change re-judges them."""

    _listing = False

    def _table(self) -> dict[Any, Any]:
        raise NotImplementedError

    def _read(self, raw: Mapping[str, Any]) -> tuple[Any, Any] | None:
        raise NotImplementedError

    async def relist(self) -> str:
        self._listing = True  # judged once, after the whole list
        try:
            return await super().relist()
        finally:
            self._listing = False

    async def _handle(self, obj: Any, deleted: bool) -> None:
        read = self._read(_raw(obj))
        if read is None or self._listing:
            return
        key, value = read
        table = self._table()
        before = table.pop(key, None)
        if not deleted:
            table[key] = value
        if before != (None if deleted else value):
            await self.join.rejudge()

    async def _after_list(self, items: list[Any], rv: str) -> None:
        listed = dict(r for r in (self._read(_raw(obj)) for obj in items) if r is not None)
        table = self._table()
        if listed != table:
            table.clear()
            table.update(listed)
            await self.join.rejudge()

    async def _gone(self) -> None:
        # not judged again: with Kueue gone its Workloads go too (their watch says so)
        self._table().clear()


class LocalQueueWatcher(QueueWatcher):
    kind = "kueue localqueue"
    plural = "localqueues"

    def _table(self) -> dict[Any, Any]:
        return self.join.local

    def _read(self, raw: Mapping[str, Any]) -> tuple[Any, Any] | None:
        return local_queue(raw)


class ClusterQueueWatcher(QueueWatcher):
    kind = "kueue clusterqueue"
    plural = "clusterqueues"

    def _table(self) -> dict[Any, Any]:
        return self.join.cluster

    def _read(self, raw: Mapping[str, Any]) -> tuple[Any, Any] | None:
        return cluster_queue(raw)


class ResourceFlavorWatcher(QueueWatcher):
    kind = "kueue resourceflavor"
    plural = "resourceflavors"

    def _table(self) -> dict[Any, Any]:
        return self.join.flavors

    def _read(self, raw: Mapping[str, Any]) -> tuple[Any, Any] | None:
        return resource_flavor(raw)


W = TypeVar("W", bound=KueueWatcher)


def _make(
    kind: type[W],
    *,
    api: Any,
    join: KueueJoin,
    now_ms: NowMs,
    settings: KubeSettings,
    retry_s: float,
) -> W:
    return kind(api=api, join=join, now_ms=now_ms, settings=settings, retry_s=retry_s)


class KueueWatch:
    """The four watchers over one join: the queues first, then the Workloads."""

    def __init__(
        self, *, api: Any, sink: WorkloadSink, now_ms: NowMs, settings: KubeSettings, retry_s: float
    ) -> None:
        self.join = KueueJoin(sink, now_ms)
        self.retry_s = retry_s
        made = functools.partial(
            _make, api=api, join=self.join, now_ms=now_ms, settings=settings, retry_s=retry_s
        )
        self.queues = tuple(
            made(kind) for kind in (ResourceFlavorWatcher, ClusterQueueWatcher, LocalQueueWatcher)
        )
        self.workloads = made(WorkloadWatcher)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for watcher in self.queues:
                group.create_task(watcher.run(), name=f"cluster-{watcher.plural}")
            # the queues first (bounded: a kind that keeps failing does not hold the Workloads)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.retry_s):
                    for watcher in self.queues:
                        await watcher.ready.wait()
            group.create_task(self.workloads.run(), name="cluster-kueue-workloads")
