"""Translate DRA objects (``resource.k8s.io/v1`` ResourceSlices and ResourceClaims, and
``resource.k8s.io/v1alpha3`` DeviceTaintRules, as the API server's JSON) into our records. Pure
(a refused value is counted); never crashes on a partial object: what is missing is published as
unknown (``None``), what cannot be read at all gives no record; a capacity that is not a
Kubernetes quantity is dropped (counted).

Device taints (``spec.devices[].taints``, KEP-5055: the driver's, e.g. NVIDIA's on a health
event) are kept in a fixed order (key, effect, value), so an unchanged slice makes an equal
record. A taint whose effect is not one the API defines, or that has no effect or key, is one
the API server would not have accepted: it is dropped (counted), not guessed at.

Attribute names: a device's attributes are keyed by qualified names (``gpu.nvidia.com/uuid``)
or, for the driver's own domain, unqualified ones (``uuid``); both are read. Attribute values
are one-of ``{string|int|bool|version}``.

Which claims belong to a node: a node-local device's allocation carries
``status.allocation.nodeSelector`` with a ``metadata.name`` field term naming the node (how the
scheduler pins it, and how the NVIDIA driver's devices are allocated). Claims allocated
elsewhere, or not allocated, give no record for this node.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, get_args

from agents.bounds import bounded
from agents.kube.translate import refuse, rfc3339_ms
from agents.selfmetrics import REFUSED_VALUES
from contract.inputs import (
    ClaimConfig,
    ClaimConsumer,
    ClaimResult,
    DeviceTaint,
    DeviceTaintRuleRecord,
    DraDevice,
    ResourceClaimRecord,
    ResourceSliceRecord,
    TaintEffect,
)
from contract.quantity import valid as valid_quantity

log = logging.getLogger(__name__)

#: the NVIDIA driver's claim-config sharing strategies, as our sharing modes
SHARING = {"TimeSlicing": "time-slicing", "MPS": "mps"}
#: the taint effects the API defines, each as itself (a taint with any other is dropped)
EFFECTS: dict[str, TaintEffect] = {e: e for e in get_args(TaintEffect)}


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _attribute(attributes: Mapping[str, Any], driver: str, name: str) -> str | None:
    """A device attribute's value as text, under its unqualified or driver-qualified name."""
    for key in (name, f"{driver}/{name}"):
        value = _map(attributes.get(key))
        for field in ("string", "version", "int", "bool"):
            if field in value and value[field] is not None:
                raw = value[field]
                return str(raw).lower() if isinstance(raw, bool) else str(raw)
    return None


def device(raw: Any, driver: str) -> DraDevice | None:
    obj = _map(raw)
    name = _str(obj.get("name"))
    if name is None:
        return None
    attributes = _map(obj.get("attributes"))
    return DraDevice(
        name=name,
        type=_attribute(attributes, driver, "type"),
        uuid=_attribute(attributes, driver, "uuid"),
        parent_uuid=_attribute(attributes, driver, "parentUUID"),
        profile=_attribute(attributes, driver, "profile"),
        product=_attribute(attributes, driver, "productName"),
        multiple_allocations=obj.get("allowMultipleAllocations") is True,
        capacity=_quantities(
            {str(k): _map(v).get("value") for k, v in _map(obj.get("capacity")).items()},
            f"device {name} capacity",
        ),
        taints=_taints(obj.get("taints"), f"device {name}"),
    )


def _taints(raw: Any, where: str) -> tuple[DeviceTaint, ...]:
    """A device's taints, sorted by key, effect and value; one without a key or a defined
    effect is dropped (:func:`_taint`)."""
    kept = [t for item in _list(raw) if (t := _taint(item, where)) is not None]
    return tuple(sorted(kept, key=lambda taint: (taint.key, taint.effect, taint.value)))


def _taint(raw: Any, where: str) -> DeviceTaint | None:
    """One taint; ``None`` without a key or a defined effect (counted, its effect logged once):
    the API says to treat an unknown effect like ``None``, and we say nothing rather than guess."""
    t = _map(raw)
    key, effect = _str(t.get("key")), t.get("effect")
    known = EFFECTS.get(effect) if isinstance(effect, str) else None
    if key is None or known is None:
        shown = effect[:40] if isinstance(effect, str) else effect
        refuse(
            "device_taint",
            shown if key is not None else "no key",
            "%s: taint %r with effect %r (not NoSchedule, NoExecute or None, or no key): dropped",
            where,
            (key or "")[:80],
            shown,
        )
        return None
    value = t.get("value")
    return DeviceTaint(
        key=bounded(key, "device taint key"),
        effect=known,
        value=bounded(value, "device taint value") if isinstance(value, str) else "",
        time_added_ms=rfc3339_ms(t.get("timeAdded")),
    )


def taint_rule(raw: Any, *, ts_ms: int, deleted: bool) -> DeviceTaintRuleRecord | None:
    """A ``DeviceTaintRule`` (``resource.k8s.io/v1alpha3``) as our record; ``None`` without a
    name. Criteria we cannot evaluate (``deviceClassName``, CEL ``selectors``: what servers
    before 1.35 kept) make the rule ``unevaluable``; a bad taint makes it say nothing."""
    obj = _map(raw)
    meta = _map(obj.get("metadata"))
    name = _str(meta.get("name"))
    if name is None:
        return None
    spec = _map(obj.get("spec"))
    raw_selector = spec.get("deviceSelector")
    selector = _map(raw_selector)
    cannot = [f for f in ("deviceClassName", "selectors") if selector.get(f)]
    where = f"DeviceTaintRule {name[:80]}"
    return DeviceTaintRuleRecord(
        name=bounded(name, "device taint rule name"),
        ts_ms=ts_ms,
        driver=_optional(selector.get("driver"), "device taint rule driver"),
        pool=_optional(selector.get("pool"), "device taint rule pool"),
        device=_optional(selector.get("device"), "device taint rule device"),
        taint=_taint(spec.get("taint"), where),
        selector=isinstance(raw_selector, Mapping),
        unevaluable=(
            f"its deviceSelector sets {' and '.join(cannot)}, which this reader cannot evaluate"
            if cannot
            else ""
        ),
        deleted=deleted,
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def _optional(value: Any, what: str) -> str | None:
    """A selector field: absent (selects all) or its text."""
    return bounded(value, what) if isinstance(value, str) and value else None


def _quantities(values: Mapping[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    """Name → quantity pairs that are Kubernetes quantities; any other value is refused here
    (counted, logged), so a claim or slice never carries one to the worker."""
    kept = []
    for name, value in values.items():
        if value is None:
            continue
        text = str(value)
        if not valid_quantity(text):
            REFUSED_VALUES.labels("quantity").inc()
            log.warning("%s: %s = %r is not a Kubernetes quantity: ignored", where, name, text[:40])
            continue
        kept.append((name, text))
    return tuple(sorted(kept))


def slice_record(
    obj: Mapping[str, Any], *, node: str, ts_ms: int, deleted: bool = False
) -> ResourceSliceRecord | None:
    """A ResourceSlice of ``node``; ``None`` if it names no driver or pool, or another node."""
    meta, spec = _map(obj.get("metadata")), _map(obj.get("spec"))
    driver, pool = _str(spec.get("driver")), _map(spec.get("pool"))
    pool_name, name = _str(pool.get("name")), _str(meta.get("name"))
    if driver is None or pool_name is None or name is None or spec.get("nodeName") != node:
        return None
    generation = pool.get("generation")
    devices = (device(d, driver) for d in _list(spec.get("devices")))
    return ResourceSliceRecord(
        node=node,
        ts_ms=ts_ms,
        name=name,
        driver=driver,
        pool=pool_name,
        pool_generation=generation if isinstance(generation, int) else 0,
        devices=tuple(sorted((d for d in devices if d is not None), key=lambda d: d.name)),
        deleted=deleted,
        resource_version=_str(meta.get("resourceVersion")) or "",
    )


def allocated_node(obj: Mapping[str, Any]) -> str | None:
    """The node a claim's devices are allocated on (a single ``metadata.name`` In term)."""
    selector = _map(_map(_map(obj.get("status")).get("allocation")).get("nodeSelector"))
    nodes: set[str] = set()
    for term in _list(selector.get("nodeSelectorTerms")):
        for field in _list(_map(term).get("matchFields")):
            f = _map(field)
            if f.get("key") == "metadata.name" and f.get("operator") == "In":
                nodes.update(v for v in _list(f.get("values")) if isinstance(v, str))
    return nodes.pop() if len(nodes) == 1 else None


def _result(raw: Any) -> ClaimResult | None:
    r = _map(raw)
    request, driver, pool, dev = (_str(r.get(k)) for k in ("request", "driver", "pool", "device"))
    if request is None or driver is None or pool is None or dev is None:
        return None
    consumed = _map(r.get("consumedCapacity"))
    return ClaimResult(
        request=request,
        driver=driver,
        pool=pool,
        device=dev,
        admin_access=r.get("adminAccess") is True,
        share_id=_str(r.get("shareID")),
        consumed=_quantities({str(k): v for k, v in consumed.items()}, f"claim result {dev}"),
    )


def _consumer(raw: Any) -> ClaimConsumer | None:
    c = _map(raw)
    resource, name, uid = (_str(c.get(k)) for k in ("resource", "name", "uid"))
    if resource is None or name is None or uid is None:
        return None
    return ClaimConsumer(resource, name, uid)


def _config(raw: Any) -> ClaimConfig | None:
    c = _map(raw)
    opaque = _map(c.get("opaque"))
    driver = _str(opaque.get("driver"))
    if driver is None:
        return None
    params = _map(opaque.get("parameters"))
    strategy = _str(_map(params.get("sharing")).get("strategy"))
    return ClaimConfig(
        driver=driver,
        requests=tuple(r for r in _list(c.get("requests")) if isinstance(r, str)),
        kind=_str(params.get("kind")),
        sharing=SHARING.get(strategy, strategy.lower()) if strategy else None,
    )


def claim_record(
    obj: Mapping[str, Any], *, node: str, ts_ms: int, deleted: bool = False
) -> ResourceClaimRecord | None:
    """A ResourceClaim allocated on ``node``; ``None`` for one that is not (or unreadable).

    The allocation's own config (``status.allocation.devices.config``: the claim's and its
    DeviceClass's, as allocated) is read; the claim's ``spec.devices.config`` only when the
    allocation carries none."""
    meta = _map(obj.get("metadata"))
    namespace, name, uid = (_str(meta.get(k)) for k in ("namespace", "name", "uid"))
    if namespace is None or name is None or uid is None or allocated_node(obj) != node:
        return None
    status = _map(obj.get("status"))
    devices = _map(_map(status.get("allocation")).get("devices"))
    configs = _list(devices.get("config")) or _list(
        _map(_map(obj.get("spec")).get("devices")).get("config")
    )
    results = (_result(r) for r in _list(devices.get("results")))
    consumers = (_consumer(c) for c in _list(status.get("reservedFor")))
    config = (_config(c) for c in configs)
    return ResourceClaimRecord(
        node=node,
        ts_ms=ts_ms,
        namespace=namespace,
        name=name,
        uid=uid,
        results=tuple(r for r in results if r is not None),
        reserved_for=tuple(sorted((c for c in consumers if c is not None), key=lambda c: c.uid)),
        config=tuple(c for c in config if c is not None),
        deleted=deleted,
        resource_version=_str(meta.get("resourceVersion")) or "",
    )
