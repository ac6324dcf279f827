"""Translate the GPU Operator's objects (the API server's JSON) into our records. Pure; never
crashes on a partial object: what is missing is published as unknown, what cannot be read at all
gives no record.

* Operand pods: the pods of the operator's namespace on this node that carry an ``app`` label
  (the operator labels every operand's pods ``app=<DaemonSet name>``); which plane each is, is
  the worker's call (:mod:`streams.core.stack.operatorstack`). Init containers keep the pod spec's
  order — the validator's run ``driver-validation`` → ``toolkit-validation`` →
  ``cuda-validation`` → ``plugin-validation`` — with the ones not started yet included, so how
  far a pod got is readable.
* The ``ClusterPolicy`` (``nvidia.com/v1``): ``spec.<operand>.enabled`` as written (an unset
  one is left out: the operator's default applies), ``spec.mig.strategy``,
  ``spec.devicePlugin.config.name``, ``status.state``, ``status.namespace`` and
  ``status.conditions``.
* The ``GPUCluster`` (``nvidia.com/v1alpha1``, the DRA stack): ``spec.dcgm.enabled``,
  ``spec.dcgmExporter.enabled`` and ``spec.draDriver.computeDomains.enabled`` as written, the
  ``spec`` keys this build does not know (named, so a newer operator's intent we do not read is
  said, not silently judged without), and its status as the ClusterPolicy's.
* The ``NVIDIADriver`` (``nvidia.com/v1alpha1``): its driver type, version and status.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, get_args

from agents.bounds import bounded
from contract.inputs import (
    ClusterPolicyRecord,
    ContainerProgress,
    ContainerState,
    GpuClusterRecord,
    NvidiaDriverRecord,
    OperandPod,
    OperandPods,
    OperandSpec,
    OperatorCrState,
    PodPhase,
    PolicyCondition,
    PolicyState,
)

PHASES: Mapping[str, PodPhase] = {p: p for p in get_args(PodPhase)}
POLICY_STATES: Mapping[str, PolicyState] = {s: s for s in get_args(PolicyState)}
CR_STATES: Mapping[str, OperatorCrState] = {s: s for s in get_args(OperatorCrState)}

#: the GPUCluster ``spec`` keys of ``nvidia.com/v1alpha1`` (the vendored CRD's, checked by its test)
GPUCLUSTER_SPEC = frozenset({"draDriver", "dcgm", "dcgmExporter", "hostPaths", "daemonsets"})


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    """A string of the object, cut to the contract's size (condition messages are free text)."""
    return bounded(value, "gpu-operator field") if isinstance(value, str) else ""


INT32 = 2**31  # restartCount and exitCode are int32 in the API: anything else is not a count
INT64 = 2**63  # metadata.generation is int64


def _int(value: Any, bound: int) -> int | None:
    """An integer of the API's width; a bool (an int to Python) or a wider number is none."""
    ok = isinstance(value, int) and not isinstance(value, bool) and -bound <= value < bound
    return value if ok else None


def _int32(value: Any) -> int | None:
    return _int(value, INT32)


def _count(value: Any) -> int:
    n = _int32(value)
    return n if n is not None and n >= 0 else 0


def ms(value: Any) -> int | None:
    """An RFC 3339 time (``2026-05-23T10:00:00Z``) as milliseconds since the epoch."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    except (ValueError, OverflowError):
        return None


def _progress(name: str, status: Mapping[str, Any], init: bool) -> ContainerProgress:
    state = _map(status.get("state"))
    restarts = _count(status.get("restartCount"))
    ready = status.get("ready") is True
    kind: ContainerState
    if "waiting" in state:
        kind, detail = "waiting", _map(state.get("waiting"))
    elif "running" in state:
        kind, detail = "running", _map(state.get("running"))
    elif "terminated" in state:
        kind, detail = "terminated", _map(state.get("terminated"))
    else:
        kind, detail = "unknown", {}
    exit_code = _int32(detail.get("exitCode"))
    if init and kind == "terminated" and exit_code == 0:
        ready = True  # an init container that finished well (its `ready` is true on newer kubelets)
    return ContainerProgress(name, kind, ready, restarts, _str(detail.get("reason")), exit_code)


def _containers(
    spec: Iterable[Any], statuses: Iterable[Any], init: bool
) -> tuple[ContainerProgress, ...]:
    """Every container of the spec in its order, with its status (``unknown`` before it has one)."""
    by_name = {_str(_map(s).get("name")): _map(s) for s in statuses}
    names = [_str(_map(c).get("name")) for c in spec]
    names += [n for n in by_name if n not in names]  # a status the spec did not list: kept
    return tuple(_progress(n, by_name.get(n, {}), init) for n in names if n)


def operand_pod(obj: Mapping[str, Any]) -> OperandPod | None:
    """One operand pod; ``None`` without a name or an ``app`` label."""
    meta, spec, status = _map(obj.get("metadata")), _map(obj.get("spec")), _map(obj.get("status"))
    name, app = _str(meta.get("name")), _str(_map(meta.get("labels")).get("app"))
    if not name or not app:
        return None
    phase = _str(status.get("phase"))
    init = _containers(
        _list(spec.get("initContainers")), _list(status.get("initContainerStatuses")), True
    )
    main = _containers(_list(spec.get("containers")), _list(status.get("containerStatuses")), False)
    conditions = {_str(_map(c).get("type")): _map(c) for c in _list(status.get("conditions"))}
    ready_c = conditions.get("Ready", {})
    scheduled = conditions.get("PodScheduled", {})
    reason = next((c.reason for c in main if not c.ready and c.reason), "")
    reason = reason or _str(status.get("reason"))
    if not reason and scheduled.get("status") == "False":
        reason = _str(scheduled.get("reason"))
    return OperandPod(
        namespace=_str(meta.get("namespace")),
        name=name,
        app=app,
        phase=PHASES.get(phase, "Unknown"),
        ready=ready_c.get("status") == "True",
        restarts=sum(c.restarts for c in main),
        reason=reason,
        ready_since_ms=ms(ready_c.get("lastTransitionTime")),
        init=init,
        containers=main,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def operand_pods(
    objs: Iterable[Mapping[str, Any]],
    *,
    node: str,
    namespace: str,
    ts_ms: int,
    resource_version: str = "",
) -> OperandPods:
    """The operand pods of ``namespace`` on ``node`` (others are not this node's), by name."""
    pods = []
    for obj in objs:
        if _map(obj.get("spec")).get("nodeName") != node:
            continue
        if _str(_map(obj.get("metadata")).get("namespace")) != namespace:
            continue
        pod = operand_pod(obj)
        if pod is not None:
            pods.append(pod)
    pods.sort(key=lambda p: p.name)
    return OperandPods(node, ts_ms, namespace, tuple(pods), resource_version)


def _condition(raw: Any) -> PolicyCondition | None:
    c = _map(raw)
    kind, status = _str(c.get("type")), _str(c.get("status"))
    if not kind or not status:
        return None
    return PolicyCondition(
        kind,
        status,
        _str(c.get("reason")),
        _str(c.get("message")),
        ms(c.get("lastTransitionTime")),
    )


def cluster_policy(
    obj: Mapping[str, Any], *, ts_ms: int, deleted: bool = False
) -> ClusterPolicyRecord | None:
    """The ClusterPolicy; ``None`` without a name."""
    meta, spec, status = _map(obj.get("metadata")), _map(obj.get("spec")), _map(obj.get("status"))
    name = _str(meta.get("name"))
    if not name:
        return None
    operands = tuple(
        OperandSpec(key, value["enabled"])
        for key, value in sorted(spec.items())
        if isinstance(value, Mapping) and isinstance(value.get("enabled"), bool)
    )
    strategy = _str(_map(spec.get("mig")).get("strategy")) or None
    state = _str(status.get("state"))
    conditions = (_condition(c) for c in _list(status.get("conditions")))
    return ClusterPolicyRecord(
        name=name,
        ts_ms=ts_ms,
        operands=operands,
        mig_strategy=strategy,
        device_plugin_config=_str(_map(_map(spec.get("devicePlugin")).get("config")).get("name")),
        state=POLICY_STATES.get(state, ""),
        namespace=_str(status.get("namespace")),
        conditions=tuple(c for c in conditions if c is not None),
        generation=_int(meta.get("generation"), INT64),
        deleted=deleted,
        resource_version=_str(meta.get("resourceVersion")),
    )


def _enabled(value: Any) -> bool | None:
    flag = _map(value).get("enabled")
    return flag if isinstance(flag, bool) else None


def gpu_cluster(
    obj: Mapping[str, Any], *, ts_ms: int, deleted: bool = False
) -> GpuClusterRecord | None:
    """The GPUCluster; ``None`` without a name."""
    meta, spec, status = _map(obj.get("metadata")), _map(obj.get("spec")), _map(obj.get("status"))
    name = _str(meta.get("name"))
    if not name:
        return None
    said = {
        "dcgm": _enabled(spec.get("dcgm")),
        "dcgmExporter": _enabled(spec.get("dcgmExporter")),
        "computeDomains": _enabled(_map(spec.get("draDriver")).get("computeDomains")),
    }
    conditions = (_condition(c) for c in _list(status.get("conditions")))
    return GpuClusterRecord(
        name=name,
        ts_ms=ts_ms,
        operands=tuple(OperandSpec(k, v) for k, v in sorted(said.items()) if v is not None),
        state=CR_STATES.get(_str(status.get("state")), ""),
        namespace=_str(status.get("namespace")),
        conditions=tuple(c for c in conditions if c is not None),
        generation=_int(meta.get("generation"), INT64),
        unknown_fields=tuple(sorted(_str(k) for k in spec if k not in GPUCLUSTER_SPEC))[:16],
        deleted=deleted,
        resource_version=_str(meta.get("resourceVersion")),
    )


def nvidia_driver(
    obj: Mapping[str, Any], *, ts_ms: int, deleted: bool = False
) -> NvidiaDriverRecord | None:
    """The NVIDIADriver; ``None`` without a name."""
    meta, spec, status = _map(obj.get("metadata")), _map(obj.get("spec")), _map(obj.get("status"))
    name = _str(meta.get("name"))
    if not name:
        return None
    conditions = (_condition(c) for c in _list(status.get("conditions")))
    return NvidiaDriverRecord(
        name=name,
        ts_ms=ts_ms,
        driver_type=_str(spec.get("driverType")),
        version=_str(spec.get("version")),
        state=CR_STATES.get(_str(status.get("state")), ""),
        namespace=_str(status.get("namespace")),
        conditions=tuple(c for c in conditions if c is not None),
        generation=_int(meta.get("generation"), INT64),
        deleted=deleted,
        resource_version=_str(meta.get("resourceVersion")),
    )
