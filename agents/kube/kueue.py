"""Translate a Kueue ``Workload`` (``kueue.x-k8s.io`` ``v1beta2`` or ``v1beta1``, the API
server's JSON) and what is known of its queues into a ``QueuedWorkload``. Pure: problems are
returned, the caller logs and counts them.

Two steps. :func:`read_workload` reads what the Workload alone says (:class:`WorkloadFacts`);
:func:`queued_workload` joins those facts with the queues (:class:`Queues`: LocalQueue →
ClusterQueue, ClusterQueue → the flavors covering each resource, ResourceFlavor → its
``nvidia.com/gpu.product`` node label), so a change of a queue re-judges a Workload without
reading it again.

What it asks for: per podSet, ``count`` pods each asking what its ``template.spec`` asks,
counted as the scheduler counts a pod (:func:`agents.kube.pending.device_plugin_counts`: the
``nvidia.com/*`` resources, the larger of the containers' sum and the init containers' peak).
Once Kueue reserved quota (``status.admission``), a podSet's ``podSetAssignments[].count`` is
what was reserved (partial admission may reduce it). DRA claims in a template are not counted
(``dra_claims``).

Where it stands (Kueue's conditions, the same types in both versions): ``finished`` when
``Finished`` is True; ``admitted`` when ``Admitted`` is True (quota reserved and every admission
check ready: Kueue unsuspends its job now); ``deactivated`` when ``spec.active`` is false (its
owner paused it: it waits for nothing); otherwise ``queued``. Its word on why it waits: the
``QuotaReserved`` condition when False (``Pending``: "couldn't assign flavors to pod set main:
insufficient unused quota ..."), else the latest True ``Evicted``/``Preempted``, else (quota
reserved, admission checks pending) the ``Admitted`` condition's. ``since_ms``: the later of its
creation and the last transition of ``Requeued`` or of a True ``Evicted`` (Kueue's own
``QueuedWaitTime`` starts at creation or the ``Requeued`` transition).

Field names that differ between the versions: ``v1beta1`` ``spec.priorityClassName``, ``v1beta2``
``spec.priorityClassRef.name``; both are read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agents.bounds import bounded
from agents.kube.pending import (
    PRODUCT_LABEL,
    controller,
    device_plugin_counts,
    mig_profile,
    ms,
    wanted_product,
)
from contract.inputs import GpuRequest, OwnerRef, QueuedState, QueuedWorkload

GROUP = "kueue.x-k8s.io"
#: the versions Kueue serves, preferred first (v1beta2 served since v0.15, stored since v0.16)
VERSIONS = ("v1beta2", "v1beta1")

#: why some of a Workload could not be used (``gpuattr_cluster_kueue_unusable_total{reason}``)
Unusable = Literal[
    "no_podsets",
    "bad_count",
    "bad_quantity",
    "dra_claims",
    "no_queue",
    "queue_unknown",
    "cluster_queue_unknown",
    "flavor_unknown",
    "flavor_without_product",
]


@dataclass(frozen=True)
class Problem:
    reason: Unusable
    detail: str


@dataclass(frozen=True)
class Asked:
    """What the podSets ask of one resource: ``count`` times each pod's request, summed."""

    resource: str
    devices: int
    product: str = ""  # what the podSet's template selects, if anything


@dataclass(frozen=True)
class WorkloadFacts:
    """What a Workload says, read once per change of it (no queue known yet)."""

    namespace: str
    name: str
    uid: str
    created_ms: int
    asked: tuple[Asked, ...]
    state: QueuedState
    queue: str
    admitted_in: str  # status.admission.clusterQueue: "" unless Kueue reserved quota
    priority: int
    priority_class: str
    owner: OwnerRef | None
    reason: str
    message: str
    since_ms: int | None
    resource_version: str
    problems: tuple[Problem, ...] = ()


@dataclass(frozen=True)
class Queues:
    """What the cluster role knows of Kueue's queues (live objects only)."""

    #: (namespace, LocalQueue) → its ClusterQueue
    local: Mapping[tuple[str, str], str] = field(default_factory=dict)
    #: ClusterQueue → resource → the flavors its resource groups list for it
    cluster: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    #: ResourceFlavor → its ``nvidia.com/gpu.product`` node label ("" when it has none)
    flavors: Mapping[str, str] = field(default_factory=dict)


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return bounded(value, "kueue workload field") if isinstance(value, str) else ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {
        str(_map(c).get("type")): _map(c)
        for c in _list(status.get("conditions"))
        if isinstance(_map(c).get("type"), str)
    }


def _true(condition: Mapping[str, Any] | None) -> bool:
    return condition is not None and condition.get("status") == "True"


def _false(condition: Mapping[str, Any] | None) -> bool:
    return condition is not None and condition.get("status") == "False"


def _state(conditions: Mapping[str, Mapping[str, Any]], active: Any) -> QueuedState:
    if _true(conditions.get("Finished")):
        return "finished"
    if _true(conditions.get("Admitted")):
        return "admitted"
    if active is False:  # its owner paused it: Kueue admits it only once active again
        return "deactivated"
    return "queued"


def _why(conditions: Mapping[str, Mapping[str, Any]]) -> tuple[str, str]:
    """Kueue's own word on why the Workload is not admitted (``("", "")`` when it says none)."""
    reserved = conditions.get("QuotaReserved")
    if _false(reserved) and reserved is not None:
        return _str(reserved.get("reason")), _str(reserved.get("message"))
    evicted = [c for t in ("Evicted", "Preempted") if _true(c := conditions.get(t, {}))]
    if evicted:
        latest = max(evicted, key=lambda c: ms(c.get("lastTransitionTime")) or 0)
        return _str(latest.get("reason")), _str(latest.get("message"))
    admitted = conditions.get("Admitted")
    if _true(reserved) and _false(admitted) and admitted is not None:
        return _str(admitted.get("reason")), _str(admitted.get("message"))
    return "", ""


def _since(created: int, conditions: Mapping[str, Mapping[str, Any]]) -> int:
    moments = [created]
    requeued = conditions.get("Requeued")
    if requeued is not None:
        moments.append(ms(requeued.get("lastTransitionTime")) or 0)
    evicted = conditions.get("Evicted", {})
    if _true(evicted):
        moments.append(ms(evicted.get("lastTransitionTime")) or 0)
    return max(moments)


def _priority_class(spec: Mapping[str, Any]) -> str:
    return _str(spec.get("priorityClassName")) or _str(
        _map(spec.get("priorityClassRef")).get("name")
    )


def _reserved_counts(status: Mapping[str, Any]) -> dict[str, int]:
    """podSet → the count Kueue reserved quota for (partial admission may reduce it)."""
    out: dict[str, int] = {}
    for assignment in _list(_map(status.get("admission")).get("podSetAssignments")):
        count = _int(_map(assignment).get("count"))
        name = _str(_map(assignment).get("name")) or "main"
        if count is not None and count >= 0:
            out[name] = count
    return out


def _asked(wl: Mapping[str, Any], where: str) -> tuple[tuple[Asked, ...], tuple[Problem, ...]]:
    spec, status = _map(wl.get("spec")), _map(wl.get("status"))
    podsets = [_map(p) for p in _list(spec.get("podSets"))]
    problems: list[Problem] = []
    if not podsets:
        return (), (Problem("no_podsets", f"Workload {where} has no podSets"),)
    reserved = _reserved_counts(status)
    totals: dict[tuple[str, str], int] = {}

    def refused(at: str, text: Any) -> None:
        problems.append(
            Problem("bad_quantity", f"Workload {at}: request {text!r} is not a whole number")
        )

    for podset in podsets:
        name = _str(podset.get("name")) or "main"
        count = reserved.get(name, _int(podset.get("count")))
        if count is None or count < 0:
            problems.append(
                Problem(
                    "bad_count", f"Workload {where} podSet {name}: count {podset.get('count')!r}"
                )
            )
            continue
        pod = _map(_map(podset.get("template")).get("spec"))
        if _list(pod.get("resourceClaims")):
            problems.append(
                Problem("dra_claims", f"Workload {where} podSet {name}: DRA claims not counted")
            )
        product = wanted_product(pod)
        per_pod = device_plugin_counts(pod, f"{where} podSet {name}", refused)
        for resource, devices in per_pod.items():
            key = (resource, product)
            totals[key] = totals.get(key, 0) + count * devices
    asked = tuple(Asked(r, n, p) for (r, p), n in sorted(totals.items()) if n > 0)
    return asked, tuple(problems)


def read_workload(wl: Mapping[str, Any]) -> WorkloadFacts | None:
    """What the Workload says, or ``None`` when it names no object (no uid)."""
    meta, spec, status = _map(wl.get("metadata")), _map(wl.get("spec")), _map(wl.get("status"))
    uid = _str(meta.get("uid"))
    if not uid:
        return None
    namespace, name = _str(meta.get("namespace")), _str(meta.get("name"))
    asked, problems = _asked(wl, f"{namespace}/{name}")
    conditions = _conditions(status)
    created = ms(meta.get("creationTimestamp")) or 0
    reason, message = _why(conditions)
    return WorkloadFacts(
        namespace=namespace,
        name=name,
        uid=uid,
        created_ms=created,
        asked=asked,
        state=_state(conditions, spec.get("active")),
        queue=_str(spec.get("queueName")),
        admitted_in=_str(_map(status.get("admission")).get("clusterQueue")),
        priority=_int(spec.get("priority")) or 0,
        priority_class=_priority_class(spec),
        owner=controller(meta.get("ownerReferences")),
        reason=reason,
        message=message,
        since_ms=_since(created, conditions),
        resource_version=_str(meta.get("resourceVersion")),
        problems=problems,
    )


def flavor_product(
    queues: Queues, cluster_queue: str, resource: str
) -> tuple[str, tuple[Problem, ...]]:
    """The one product every flavor the ClusterQueue lists for ``resource`` says, else ``""``."""
    flavors = queues.cluster.get(cluster_queue, {}).get(resource, ())
    problems: list[Problem] = []
    products: set[str] = set()
    for flavor in flavors:
        if flavor not in queues.flavors:
            problems.append(Problem("flavor_unknown", f"ResourceFlavor {flavor} is not known"))
            products.add("")
        elif not queues.flavors[flavor]:
            problems.append(
                Problem("flavor_without_product", f"ResourceFlavor {flavor} has no {PRODUCT_LABEL}")
            )
            products.add("")
        else:
            products.add(queues.flavors[flavor])
    return (products.pop() if len(products) == 1 else ""), tuple(problems)


def queued_workload(
    facts: WorkloadFacts, queues: Queues, *, ts_ms: int
) -> tuple[QueuedWorkload | None, tuple[Problem, ...]]:
    """The Workload as a record (``None`` when it asks for no GPU), and what could not be used."""
    problems = list(facts.problems)
    if not facts.asked:
        return None, tuple(problems)
    where = f"Workload {facts.namespace}/{facts.name}"
    cluster_queue = facts.admitted_in
    if not cluster_queue:
        cluster_queue = queues.local.get((facts.namespace, facts.queue), "")
        if not facts.queue:
            problems.append(Problem("no_queue", f"{where} names no queue (spec.queueName)"))
        elif not cluster_queue:
            problems.append(
                Problem("queue_unknown", f"{where}: LocalQueue {facts.queue} is not known")
            )
    if cluster_queue and cluster_queue not in queues.cluster:
        problems.append(
            Problem("cluster_queue_unknown", f"{where}: ClusterQueue {cluster_queue} is not known")
        )
    requests: dict[tuple[str, str], int] = {}
    for asked in facts.asked:
        product, said = flavor_product(queues, cluster_queue, asked.resource)
        problems.extend(said)
        key = (asked.resource, product or asked.product)
        requests[key] = requests.get(key, 0) + asked.devices
    record = QueuedWorkload(
        ts_ms=ts_ms,
        namespace=facts.namespace,
        name=facts.name,
        uid=facts.uid,
        created_ms=facts.created_ms,
        requests=tuple(
            GpuRequest(resource, n, product=product, mig_profile=mig_profile(resource))
            for (resource, product), n in sorted(requests.items())
        ),
        state=facts.state,
        queue=facts.queue,
        cluster_queue=cluster_queue,
        priority=facts.priority,
        priority_class=facts.priority_class,
        owner=facts.owner,
        reason=facts.reason,
        message=facts.message,
        since_ms=facts.since_ms,
        resource_version=facts.resource_version,
    )
    return record, tuple(dict.fromkeys(problems))


def local_queue(obj: Mapping[str, Any]) -> tuple[tuple[str, str], str] | None:
    """A LocalQueue: ((namespace, name), its ClusterQueue)."""
    meta = _map(obj.get("metadata"))
    name = _str(meta.get("name"))
    if not name:
        return None
    return (_str(meta.get("namespace")), name), _str(_map(obj.get("spec")).get("clusterQueue"))


def cluster_queue(obj: Mapping[str, Any]) -> tuple[str, dict[str, tuple[str, ...]]] | None:
    """A ClusterQueue: (name, resource → the flavors its resource groups list, in order)."""
    name = _str(_map(obj.get("metadata")).get("name"))
    if not name:
        return None
    covered: dict[str, tuple[str, ...]] = {}
    for group in _list(_map(obj.get("spec")).get("resourceGroups")):
        group = _map(group)
        flavors = tuple(
            f for f in (_str(_map(x).get("name")) for x in _list(group.get("flavors"))) if f
        )
        for resource in _list(group.get("coveredResources")):
            if isinstance(resource, str):
                covered[resource] = (*covered.get(resource, ()), *flavors)
    return name, covered


def resource_flavor(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """A ResourceFlavor: (name, its ``nvidia.com/gpu.product`` node label or ``""``)."""
    name = _str(_map(obj.get("metadata")).get("name"))
    if not name:
        return None
    labels = _map(_map(obj.get("spec")).get("nodeLabels"))
    return name, _str(labels.get(PRODUCT_LABEL))
