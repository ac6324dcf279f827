"""Translate a pod the scheduler has not bound (the API server's JSON) into a ``PendingPod``. Pure.

What a pod asks for, counted as the scheduler counts it (``resourcehelper.PodRequests``): the
sum over app containers and sidecars (init containers with ``restartPolicy: Always``), or the
largest init container plus the sidecars started before it, whichever is larger. A container's
request of a resource is its ``requests`` entry, else its ``limits`` entry (an extended
resource is often given as a limit only: the API server defaults the request to it). Only
``nvidia.com/*`` resources count. A quantity that is not a whole non-negative number is refused
(logged, counted) and the container's entry ignored.

Where the pod says which GPU: ``nvidia.com/gpu.product`` in its ``nodeSelector``, else a
required node affinity with exactly one term whose expression on that label is ``In`` one value;
the MIG profile from a MIG resource's name (``nvidia.com/mig-1g.10gb`` → ``1g.10gb``). Anything
less clear (several terms, several values, ``mig.config`` names) says nothing: ``""``.

DRA: each ``spec.resourceClaims`` entry names a ResourceClaim or a ResourceClaimTemplate; the
caller reads those (:func:`claim_sources`) and hands their claim specs in. Each ``exactly``
request of a claim asks for ``count`` devices of its ``deviceClassName`` (``All``: at least one)
as resource ``dra:<class>``; a ``firstAvailable`` list counts only when every alternative names
the same class and count. The MIG profile a request's selectors name with one equality on the
NVIDIA driver's ``profile`` attribute (``device.attributes['gpu.nvidia.com'].profile ==
'1g.10gb'``, no ``||``) is its ``mig_profile``; any other selector says nothing of it. Each
request carries its claim (``namespace/name``): pods that reference one ResourceClaim by name
share its devices (the demand counts them once); a claim made from a template is its pod's own
(named once the controller made it, else ``""``). A claim a pod references twice counts once.
A claim that could not be read says nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from agents.bounds import bounded
from agents.kube.translate import GPU_PREFIX, resolve_workload
from agents.selfmetrics import REFUSED_VALUES
from contract.inputs import (
    DRA_PREFIX,
    GpuRequest,
    OwnerRef,
    PendingPod,
    PendingState,
    QueuedWorkload,
)
from contract.quantity import parse as parse_quantity
from contract.records import replace

log = logging.getLogger(__name__)

PRODUCT_LABEL = "nvidia.com/gpu.product"
MIG_PREFIX = "nvidia.com/mig-"
CLAIM, TEMPLATE = "ResourceClaim", "ResourceClaimTemplate"

#: (kind, namespace, name) of a ResourceClaim or ResourceClaimTemplate a pod references
ClaimSource = tuple[str, str, str]
#: what was read of them: the source → the claim's ``spec`` (a template's ``spec.spec``)
ClaimSpecs = Mapping[ClaimSource, Mapping[str, Any]]


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    """A string of the object, cut to the contract's size (a scheduler message can be long)."""
    return bounded(value, "pending pod field") if isinstance(value, str) else ""


def ms(stamp: Any) -> int | None:
    """An RFC 3339 time of the API (``2026-05-01T10:00:00Z``) in ms since the epoch."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except (ValueError, OverflowError):
        return None


#: what is done with a request that is not a whole number of devices: (where, the text)
Refused = Callable[[str, Any], None]


def _refused_by_pod(where: str, text: Any) -> None:
    REFUSED_VALUES.labels("pending_pod_request").inc()
    log.error("pending pod %s: request %r is not a whole number of devices: ignored", where, text)


def _count(text: Any, where: str, refused: Refused) -> int | None:
    value = parse_quantity(str(text)) if isinstance(text, str | int) else None
    if value is None or value < 0 or value != value.to_integral_value():
        refused(where, text)
        return None
    return int(value)


def container_gpus(
    container: Mapping[str, Any], where: str, refused: Refused = _refused_by_pod
) -> dict[str, int]:
    """A container's GPU resources: its request, else its limit (the API's defaulting)."""
    resources = _map(container.get("resources"))
    requests, limits = _map(resources.get("requests")), _map(resources.get("limits"))
    out: dict[str, int] = {}
    for name in sorted({*requests, *limits}):
        if not isinstance(name, str) or not name.startswith(GPU_PREFIX):
            continue
        count = _count(requests[name] if name in requests else limits[name], where, refused)
        if count is not None:
            out[name] = count
    return out


def _add(into: dict[str, int], more: Mapping[str, int]) -> dict[str, int]:
    return {k: into.get(k, 0) + more.get(k, 0) for k in {*into, *more}}


def _max(into: dict[str, int], more: Mapping[str, int]) -> dict[str, int]:
    return {k: max(into.get(k, 0), more.get(k, 0)) for k in {*into, *more}}


def device_plugin_counts(
    spec: Mapping[str, Any], where: str = "", refused: Refused = _refused_by_pod
) -> dict[str, int]:
    """The pod's ``nvidia.com/*`` requests as the scheduler sums them (zero counts dropped); a
    request that is not a whole number is handed to ``refused`` (by default logged and counted
    as a pending pod's) and ignored."""
    total: dict[str, int] = {}
    for container in _list(spec.get("containers")):
        total = _add(total, container_gpus(_map(container), where, refused))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in _list(spec.get("initContainers")):
        own = container_gpus(_map(container), where, refused)
        if _map(container).get("restartPolicy") == "Always":  # a sidecar: runs with the app
            total = _add(total, own)
            sidecars = _add(sidecars, own)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, _add(own, sidecars))
    return {k: v for k, v in sorted(_max(total, init_peak).items()) if v > 0}


def wanted_product(spec: Mapping[str, Any]) -> str:
    """The ``nvidia.com/gpu.product`` the pod's placement rules name unambiguously, else ``""``."""
    chosen = _str(_map(spec.get("nodeSelector")).get(PRODUCT_LABEL))
    if chosen:
        return chosen
    required = _map(
        _map(_map(spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
    terms = _list(required.get("nodeSelectorTerms"))
    if len(terms) != 1:  # terms are alternatives: several may name several products
        return ""
    named = [
        values
        for expr in _list(_map(terms[0]).get("matchExpressions"))
        if _map(expr).get("key") == PRODUCT_LABEL and _map(expr).get("operator") == "In"
        for values in [_list(_map(expr).get("values"))]
    ]
    if len(named) == 1 and len(named[0]) == 1 and isinstance(named[0][0], str):
        return str(named[0][0])
    return ""


def mig_profile(resource: str) -> str:
    return resource[len(MIG_PREFIX) :] if resource.startswith(MIG_PREFIX) else ""


def claim_sources(pod: Mapping[str, Any]) -> list[ClaimSource]:
    """The ResourceClaims and ResourceClaimTemplates the pod's ``spec.resourceClaims`` name."""
    meta, spec = _map(pod.get("metadata")), _map(pod.get("spec"))
    namespace = _str(meta.get("namespace"))
    out: list[ClaimSource] = []
    for entry in _list(spec.get("resourceClaims")):
        entry = _map(entry)
        if name := _str(entry.get("resourceClaimName")):
            out.append((CLAIM, namespace, name))
        elif template := _str(entry.get("resourceClaimTemplateName")):
            out.append((TEMPLATE, namespace, template))
    return out


def _generated_claims(pod: Mapping[str, Any]) -> dict[str, str]:
    """Pod claim entry name → the claim the controller made from its template (pod status)."""
    statuses = _list(_map(pod.get("status")).get("resourceClaimStatuses"))
    return {
        _str(_map(s).get("name")): _str(_map(s).get("resourceClaimName"))
        for s in statuses
        if _str(_map(s).get("name"))
    }


#: a CEL selector's equality on the NVIDIA driver's MIG ``profile`` attribute
_PROFILE_IS = re.compile(
    r"""device\.attributes\[\s*['"]gpu\.nvidia\.com['"]\s*\]\.profile\s*==\s*['"]([^'"]+)['"]"""
)


def selected_profile(request: Mapping[str, Any]) -> str:
    """The MIG profile the request's CEL selectors name unambiguously, else ``""``."""
    named: set[str] = set()
    for selector in _list(request.get("selectors")):
        expression = _str(_map(_map(selector).get("cel")).get("expression"))
        found = _PROFILE_IS.findall(expression)
        if found and "||" in expression:  # alternatives: any of several profiles
            return ""
        named.update(found)
    return next(iter(named)) if len(named) == 1 else ""


def _dra_request(request: Mapping[str, Any]) -> tuple[str, str, int] | None:
    """(device class, MIG profile, count) of one claim request, when it says so unambiguously."""
    exactly = _map(request.get("exactly"))
    if exactly:
        klass = _str(exactly.get("deviceClassName"))
        if not klass:
            return None
        if exactly.get("allocationMode") == "All":
            return klass, selected_profile(exactly), 1  # every matching device: at least one
        count = exactly.get("count", 1)
        ok = isinstance(count, int) and not isinstance(count, bool) and count > 0
        return (klass, selected_profile(exactly), count) if ok else None
    alternatives = [_map(a) for a in _list(request.get("firstAvailable"))]
    said = {
        (_str(a.get("deviceClassName")), selected_profile(a), a.get("count", 1))
        for a in alternatives
    }
    if len(said) == 1:
        klass, profile, count = next(iter(said))
        if klass and isinstance(count, int) and count > 0 and _exact_counts(alternatives):
            return klass, profile, count
    return None


def _exact_counts(alternatives: Iterable[Mapping[str, Any]]) -> bool:
    return all(a.get("allocationMode", "ExactCount") == "ExactCount" for a in alternatives)


def dra_requests(pod: Mapping[str, Any], claims: ClaimSpecs) -> list[GpuRequest]:
    """One request per device class per claim the pod references, from the claims read."""
    meta, spec = _map(pod.get("metadata")), _map(pod.get("spec"))
    namespace = _str(meta.get("namespace"))
    generated = _generated_claims(pod)
    out: list[GpuRequest] = []
    named: set[str] = set()
    for entry in _list(spec.get("resourceClaims")):
        entry = _map(entry)
        if name := _str(entry.get("resourceClaimName")):
            source, claim = (CLAIM, namespace, name), f"{namespace}/{name}"
            if claim in named:  # one claim under two entries: one allocation
                continue
            named.add(claim)
        elif template := _str(entry.get("resourceClaimTemplateName")):
            made = generated.get(_str(entry.get("name")), "")
            source, claim = (TEMPLATE, namespace, template), f"{namespace}/{made}" if made else ""
        else:
            continue
        counts: dict[tuple[str, str], int] = {}
        for request in _list(_map(_map(claims.get(source)).get("devices")).get("requests")):
            said = _dra_request(_map(request))
            if said is not None:
                counts[said[:2]] = counts.get(said[:2], 0) + said[2]
        out.extend(
            GpuRequest(f"{DRA_PREFIX}{k}", n, mig_profile=profile, claim=claim)
            for (k, profile), n in sorted(counts.items())
        )
    return out


def gpu_requests(
    pod: Mapping[str, Any], claims: ClaimSpecs | None = None
) -> tuple[GpuRequest, ...]:
    """Every GPU the pod asks for: device-plugin resources, then DRA claims."""
    meta, spec = _map(pod.get("metadata")), _map(pod.get("spec"))
    where = f"{_str(meta.get('namespace'))}/{_str(meta.get('name'))}"
    product = wanted_product(spec)
    plugin = [
        GpuRequest(resource, n, product=product, mig_profile=mig_profile(resource))
        for resource, n in device_plugin_counts(spec, where).items()
    ]
    return (*plugin, *dra_requests(pod, claims or {}))


def controller(refs: Any) -> OwnerRef | None:
    """The object's controller ownerReference (else its first), as an owner."""
    owners = [_map(r) for r in _list(refs)]
    chosen = next((r for r in owners if r.get("controller")), owners[0] if owners else None)
    if chosen is None or not _str(chosen.get("kind")) or not _str(chosen.get("name")):
        return None
    return OwnerRef(_str(chosen.get("kind")), _str(chosen.get("name")))


def _scheduled(status: Mapping[str, Any]) -> Mapping[str, Any]:
    for condition in _list(status.get("conditions")):
        if _map(condition).get("type") == "PodScheduled":
            return _map(condition)
    return {}


def pending_pod(
    pod: Mapping[str, Any],
    *,
    ts_ms: int,
    claims: ClaimSpecs | None = None,
    state: PendingState = "pending",
    node: str = "",
) -> PendingPod | None:
    """The pod as a pending-pod record, or ``None`` when it asks for no GPU."""
    requests = gpu_requests(pod, claims)
    if not requests:
        return None
    meta, spec, status = _map(pod.get("metadata")), _map(pod.get("spec")), _map(pod.get("status"))
    labels = {str(k): str(v) for k, v in _map(meta.get("labels")).items()}
    namespace = _str(meta.get("namespace"))
    condition = _scheduled(status)
    priority = spec.get("priority")
    return PendingPod(
        ts_ms=ts_ms,
        namespace=namespace,
        name=_str(meta.get("name")),
        uid=_str(meta.get("uid")),
        created_ms=ms(meta.get("creationTimestamp")) or 0,
        requests=requests,
        state=state,
        node=node,
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        priority_class=_str(spec.get("priorityClassName")),
        workload=resolve_workload(controller(meta.get("ownerReferences")), labels, namespace),
        scheduled_status=_str(condition.get("status")),
        scheduled_reason=_str(condition.get("reason")),
        scheduled_message=_str(condition.get("message")),
        scheduled_since_ms=ms(condition.get("lastTransitionTime")),
        resource_version=_str(meta.get("resourceVersion")),
    )


#: a demand record published per resource: a pending pod or a queued Kueue Workload
Waiter = TypeVar("Waiter", PendingPod, QueuedWorkload)


def per_resource(record: Waiter) -> list[tuple[str, Waiter]]:
    """The records published for a pod (or a queued Workload): one per distinct resource it asks
    for, keyed by it, each carrying only that resource's requests (so a consumer of one key counts
    only its own)."""
    resources = sorted({r.resource for r in record.requests})
    return [
        (
            resource,
            replace(record, requests=tuple(r for r in record.requests if r.resource == resource)),
        )
        for resource in resources
    ]
