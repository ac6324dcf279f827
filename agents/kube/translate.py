"""Translate Kubernetes objects (kubernetes-asyncio models) into our records. Never crashes on a
partial object: whatever is missing is published as unknown. Annotation and label values are
cut to the contract's size (:func:`agents.bounds.bounded`, counted); the API server bounds names.

Device health (``status.containerStatuses[].allocatedResourcesStatus``, the kubelet's): one
entry per container, resource and device, in a fixed order so that an unchanged status makes an
equal record. Every resource is kept, device plugin or DRA claim alike: the kubelet has already
joined each device to its holder, and a pod whose only GPU is a claim has no ``nvidia.com/``
name to filter on. A health the API does not define is published as ``Unknown``; an entry that
names no device is dropped (both counted).

Workload identity: a pod's controller resolved to the workload a person would name — a
ReplicaSet to its Deployment, a Job to its CronJob — through an owner lookup when one is given,
else by the controllers' naming conventions (marked ``inferred``), else the direct owner.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, get_args

from agents.bounds import bounded, bounded_map, oversized
from agents.locate import ExporterPod
from agents.selfmetrics import REFUSED_VALUES
from contract import annotations as ours
from contract.inputs import (
    NodeRecord,
    OwnerRef,
    PodRecord,
    ResourceHealth,
    ResourceHealthState,
)

GPU_PREFIX = "nvidia.com/"
ANNOTATION_PREFIX = ours.PREFIX
log = logging.getLogger(__name__)
_CRONJOB_JOB = re.compile(r"^(?P<cronjob>.+)-\d{8,}$")

OwnerLookup = Callable[[str, str, str], OwnerRef | None]

#: the health values the API defines, each as itself (anything else is refused)
HEALTH: dict[str, ResourceHealthState] = {h: h for h in get_args(ResourceHealthState)}
#: which of two entries for one device is kept: the worse news
_HEALTH_RANK: dict[ResourceHealthState, int] = {"Unhealthy": 0, "Unknown": 1, "Healthy": 2}
_logged_refusals: set[tuple[str, str]] = set()  # (what, value) already logged
_LOGGED_REFUSALS = 256  # bounded: a source could send a new value on every event


def refuse(what: str, value: object, message: str, *args: object) -> None:
    """Count a value refused at the edge (``gpuattr_agent_refused_values_total{what}``) and log
    the first of each distinct value only: a source that sends one resends it on every update
    of its object, and the counter already says how often."""
    REFUSED_VALUES.labels(what).inc()
    seen = (what, repr(value)[:80])
    if seen in _logged_refusals or len(_logged_refusals) >= _LOGGED_REFUSALS:
        return
    _logged_refusals.add(seen)
    log.warning(message + " (counted; logged once per value)", *args)


def _ms(value: datetime | None) -> int | None:
    """Milliseconds since the epoch; a zone-less time is UTC (as the API server means it)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return int(value.timestamp() * 1000)
    except (ValueError, OverflowError):  # year 1 and friends: not a time we can use
        return None


def rfc3339_ms(text: Any) -> int | None:
    """An RFC 3339 time of the API's JSON (``2026-11-20T10:00:00Z``) as :func:`_ms` reads it;
    ``None`` when it is not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return _ms(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        return None


def _gpu(resources: Mapping[str, Any] | None) -> dict[str, str]:
    return {k: str(v) for k, v in (resources or {}).items() if k.startswith(GPU_PREFIX)}


def can_hold_gpu(pod: Any) -> bool:
    """Whether a pod can hold a GPU: a container or init container requests or limits an
    ``nvidia.com/...`` resource, or the pod has DRA ``resourceClaims``. Only such pods are
    published (with their DELETED events): the worker joins nothing else, and a node's
    CPU-only pods (Jobs, CronJobs: thousands a day) would only grow its state."""
    spec = getattr(pod, "spec", None)
    if spec is None:
        return False
    if getattr(spec, "resource_claims", None):
        return True
    containers = [
        *(getattr(spec, "containers", None) or ()),
        *(getattr(spec, "init_containers", None) or ()),
    ]
    for container in containers:
        resources = getattr(container, "resources", None)
        for field in ("requests", "limits"):
            amounts = getattr(resources, field, None)
            if isinstance(amounts, Mapping) and _gpu(amounts):
                return True
    return False


def controller_of(owner_refs: list[Any] | None) -> OwnerRef | None:
    refs = owner_refs or []
    chosen = next((r for r in refs if getattr(r, "controller", False)), refs[0] if refs else None)
    return OwnerRef(chosen.kind, chosen.name) if chosen is not None else None


def resolve_workload(
    owner: OwnerRef | None,
    pod_labels: Mapping[str, str],
    namespace: str = "",
    lookup: OwnerLookup | None = None,
) -> OwnerRef | None:
    """The workload behind a pod's direct owner."""
    if owner is None:
        return None
    if owner.kind in ("ReplicaSet", "Job") and lookup is not None:
        parent = lookup(owner.kind, namespace, owner.name)
        if parent is not None:
            return parent
    if owner.kind == "ReplicaSet":
        pod_hash = pod_labels.get("pod-template-hash")
        if pod_hash and owner.name.endswith(f"-{pod_hash}"):
            return OwnerRef("Deployment", owner.name[: -len(pod_hash) - 1], inferred=True)
    if owner.kind == "Job" and (m := _CRONJOB_JOB.match(owner.name)):
        return OwnerRef("CronJob", m["cronjob"], inferred=True)
    return owner


def pod_record(
    pod: Any, *, node: str, ts_ms: int, deleted: bool = False, lookup: OwnerLookup | None = None
) -> PodRecord:
    meta = pod.metadata
    labels = dict(getattr(meta, "labels", None) or {})
    namespace = getattr(meta, "namespace", None) or ""
    annotations = {}
    for k, v in (getattr(meta, "annotations", None) or {}).items():
        if not k.startswith(ANNOTATION_PREFIX):
            continue
        if ours.refused(k, v):
            REFUSED_VALUES.labels("annotation").inc()
            log.warning(
                "pod %s/%s: annotation %s=%r is not a finite number in its range: ignored",
                namespace,
                getattr(meta, "name", None) or "",
                k,
                v[:40],
            )
            continue
        annotations[k] = bounded(v, "pod annotation")
    owner = controller_of(getattr(meta, "owner_references", None))
    return PodRecord(
        node=node,
        ts_ms=ts_ms,
        uid=getattr(meta, "uid", None) or "",
        namespace=namespace,
        name=getattr(meta, "name", None) or "",
        created_ms=_ms(getattr(meta, "creation_timestamp", None)),
        deletion_ts_ms=_ms(getattr(meta, "deletion_timestamp", None)),
        deleted=deleted,
        annotations=tuple(sorted(annotations.items())),
        owner=owner,
        workload=resolve_workload(owner, labels, namespace, lookup),
        resource_version=getattr(meta, "resource_version", None) or "",
        resource_health=device_health(
            getattr(pod, "status", None), f"{namespace}/{getattr(meta, 'name', None) or ''}"
        ),
    )


def _text(value: Any, what: str) -> str:
    return bounded(value, what) if isinstance(value, str) else ""


def _health(value: Any, where: str) -> ResourceHealthState:
    """A device's health as the API defines it; any other value, or none, is ``Unknown``."""
    health = HEALTH.get(value) if isinstance(value, str) else None
    if health is None:
        shown = value[:40] if isinstance(value, str) else value
        refuse(
            "resource_health",
            shown,
            "%s: device health %r is not Healthy, Unhealthy or Unknown: published as Unknown",
            where,
            shown,
        )
        return "Unknown"
    return health


def device_health(status: Any, pod: str) -> tuple[ResourceHealth, ...]:
    """The health the kubelet wrote for each device the pod's containers hold, one entry per
    (container, resource, device), sorted. Only ``containerStatuses``: the kubelet writes none
    for init or ephemeral containers. ``pod`` (namespace/name) is for the log."""
    found: dict[tuple[str, str, str], ResourceHealth] = {}
    for container in getattr(status, "container_statuses", None) or ():
        name = _text(getattr(container, "name", None), "container name")
        for resource in getattr(container, "allocated_resources_status", None) or ():
            resource_name = _text(getattr(resource, "name", None), "health resource name")
            where = f"pod {pod} container {name} resource {resource_name}"
            for device in getattr(resource, "resources", None) or ():
                resource_id = _text(getattr(device, "resource_id", None), "health resource id")
                if not resource_id:
                    refuse(
                        "resource_health_id",
                        "",
                        "%s: a device health entry without a resourceID: dropped",
                        where,
                    )
                    continue
                entry = ResourceHealth(
                    container=name,
                    resource=resource_name,
                    resource_id=resource_id,
                    health=_health(getattr(device, "health", None), where),
                    message=_text(getattr(device, "message", None), "health message"),
                )
                key = (name, resource_name, resource_id)
                kept = found.get(key)
                if kept is None or _worse(entry, kept):
                    found[key] = entry
    return tuple(found[key] for key in sorted(found))


def _worse(entry: ResourceHealth, than: ResourceHealth) -> bool:
    """Whether ``entry`` wins over another for the same device (the API lists each device once;
    should it not, the worse health, then the first message in order, so the pick does not
    depend on the list's order)."""
    mine, theirs = _HEALTH_RANK[entry.health], _HEALTH_RANK[than.health]
    return mine < theirs or (mine == theirs and entry.message < than.message)


def node_record(node: Any, *, ts_ms: int, deleted: bool = False) -> NodeRecord:
    meta, status = node.metadata, node.status
    labels = {
        k: v
        for k, v in (getattr(meta, "labels", None) or {}).items()
        if k.startswith(GPU_PREFIX) or k == "kubernetes.io/hostname"
    }
    if oversized(labels):
        labels = bounded_map(labels, "node label")
    allocatable = _gpu(getattr(status, "allocatable", None))
    return NodeRecord(
        node=getattr(meta, "name", None) or "",
        ts_ms=ts_ms,
        labels=tuple(sorted(labels.items())),
        allocatable=tuple(sorted(allocatable.items())),
        deleted=deleted,
        resource_version=getattr(meta, "resource_version", None) or "",
    )


def _port(pod: Any, port_name: str, default: int) -> int:
    for container in getattr(pod.spec, "containers", None) or []:
        for port in getattr(container, "ports", None) or []:
            if getattr(port, "name", None) == port_name and getattr(port, "container_port", None):
                return int(port.container_port)
    return default


def exporter_pod(pod: Any, *, port_name: str, default_port: int) -> ExporterPod:
    meta, status = pod.metadata, getattr(pod, "status", None)
    conditions = getattr(status, "conditions", None) or []
    ready = any(
        getattr(c, "type", None) == "Ready" and getattr(c, "status", None) == "True"
        for c in conditions
    )
    # only the controller counts: any pod may list other owners (the locator checks this one)
    refs = getattr(meta, "owner_references", None) or []
    controller = next((r for r in refs if getattr(r, "controller", None) is True), None)
    return ExporterPod(
        namespace=getattr(meta, "namespace", None) or "",
        name=getattr(meta, "name", None) or "",
        ip=getattr(status, "pod_ip", None) or "",
        port=_port(pod, port_name, default_port),
        phase=getattr(status, "phase", None) or "Unknown",
        ready=ready,
        terminating=getattr(meta, "deletion_timestamp", None) is not None,
        created_ms=_ms(getattr(meta, "creation_timestamp", None)),
        owner_kind=(getattr(controller, "kind", None) or "") if controller is not None else "",
        owner_name=(getattr(controller, "name", None) or "") if controller is not None else "",
    )
