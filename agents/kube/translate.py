"""Translate Kubernetes objects (kubernetes-asyncio models) into our records. Never crashes on a
partial object: whatever is missing is published as unknown. Annotation and label values are
cut to the contract's size (:func:`agents.bounds.bounded`, counted); the API server bounds names.

Workload identity: a pod's controller resolved to the workload a person would name — a
ReplicaSet to its Deployment, a Job to its CronJob — through an owner lookup when one is given,
else by the controllers' naming conventions (marked ``inferred``), else the direct owner.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from agents.bounds import bounded, bounded_map, oversized
from agents.locate import ExporterPod
from agents.selfmetrics import REFUSED_VALUES
from contract import annotations as ours
from contract.inputs import NodeRecord, OwnerRef, PodRecord

GPU_PREFIX = "nvidia.com/"
ANNOTATION_PREFIX = ours.PREFIX
log = logging.getLogger(__name__)
_CRONJOB_JOB = re.compile(r"^(?P<cronjob>.+)-\d{8,}$")

OwnerLookup = Callable[[str, str, str], OwnerRef | None]


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
    )


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
