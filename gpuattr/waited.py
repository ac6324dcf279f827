"""GPU-hours waited: how long pods asking for GPUs waited for the scheduler, times the GPUs they
asked for, per namespace, workload and pool. Pure.

Read from the demand-events records of one range ``[start_ms, end_ms)``: the cluster role's
``k8s.pending-pod`` (a pod's every change, and its last record when it is ``bound`` or
``deleted``) and ``k8s.pending-pods`` (every pod pending after a list). A pod waits from its
creation (or the range's start, if earlier) until its bound or deleted record, or until a list
taken after its last record no longer has it (the demand stage's own rule), else until the
range's end. Each pod counts once per pool it asks for, however many copies of its records the
range holds (a pod's record goes to every resource it asks for, a list to every partition):
``wait x GPUs asked`` for that pool. A pod seen only in a list counts too. A pod whose records
all lie before the range and that no list within the range names is not seen (the topic keeps
records for its retention; lists come with every relist of the cluster role).

Waiting is not holding: these hours are GPUs asked for and not given, beside (never added to)
the held GPU-hours of :mod:`gpuattr.report`. A MIG pool's figure is in instance-hours.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace

from contract.inputs import PendingPod, PendingPodList
from contract.outputs import Pool

HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class WaitLine:
    namespace: str
    workload: str  # "Kind/name", or "Pod/<name>" for a pod without a controller
    pool: str  # Pool.key(): resource, and product / MIG profile where the pods asked for one
    pods: int  # distinct pods that waited in the range
    gpu_hours_waited: float
    longest_wait_h: float  # the longest one pod waited within the range
    waiting_at_end: int  # of those, still waiting at the range's end


@dataclass(frozen=True, slots=True)
class _Wait:
    namespace: str
    workload: str
    gpus: int
    created_ms: int
    last_seen_ms: int
    ended_ms: int | None = None


def _workload(pod: PendingPod) -> str:
    return f"{pod.workload.kind}/{pod.workload.name}" if pod.workload else f"Pod/{pod.name}"


def _pools(pod: PendingPod) -> dict[str, int]:
    """GPUs asked for per pool (two claims of one device class add up)."""
    asked: dict[str, int] = defaultdict(int)
    for r in pod.requests:
        asked[Pool(r.resource, r.product, r.mig_profile).key()] += r.count
    return asked


def _seen(waits: dict[tuple[str, str], _Wait], pod: PendingPod, ts_ms: int) -> None:
    for pool, gpus in _pools(pod).items():
        key = (pod.uid, pool)
        current = waits.get(key)
        if current is None:
            current = _Wait(pod.namespace, _workload(pod), gpus, pod.created_ms, ts_ms)
        elif ts_ms >= current.last_seen_ms:
            current = replace(current, gpus=gpus, last_seen_ms=ts_ms)
        if pod.state != "pending":
            end = min(ts_ms, current.ended_ms) if current.ended_ms is not None else ts_ms
            current = replace(current, ended_ms=end)
        elif current.ended_ms is not None and ts_ms > current.ended_ms:
            current = replace(current, ended_ms=None)  # a later word: it still waits
        waits[key] = current


def _listed(waits: dict[tuple[str, str], _Wait], pods: PendingPodList) -> None:
    listed = {p.uid for p in pods.pods}
    for p in pods.pods:
        _seen(waits, replace(p, state="pending"), pods.ts_ms)
    for (uid, pool), w in list(waits.items()):
        if uid not in listed and w.ended_ms is None and w.last_seen_ms < pods.ts_ms:
            waits[(uid, pool)] = replace(w, ended_ms=pods.ts_ms)  # gone without a last word


def _order(record: PendingPod | PendingPodList) -> tuple[int, int]:
    return record.ts_ms, isinstance(record, PendingPodList)  # a pod's own word first


def accumulate_waits(
    records: Iterable[PendingPod | PendingPodList], *, start_ms: int, end_ms: int
) -> list[WaitLine]:
    waits: dict[tuple[str, str], _Wait] = {}
    for record in sorted(records, key=_order):
        if record.ts_ms >= end_ms:
            continue
        if isinstance(record, PendingPodList):
            _listed(waits, record)
        else:
            _seen(waits, record, record.ts_ms)
    acc: dict[tuple[str, str, str], list[tuple[float, int, bool]]] = defaultdict(list)
    for (_, pool), w in waits.items():
        begin = max(w.created_ms, start_ms)
        end = min(w.ended_ms if w.ended_ms is not None else end_ms, end_ms)
        if end <= begin:
            continue
        acc[(w.namespace, w.workload, pool)].append(
            ((end - begin) / HOUR_MS, w.gpus, w.ended_ms is None)
        )
    return [
        WaitLine(
            namespace=ns,
            workload=wl,
            pool=pool,
            pods=len(pods),
            gpu_hours_waited=sum(hours * gpus for hours, gpus, _ in pods),
            longest_wait_h=max(hours for hours, _, _ in pods),
            waiting_at_end=sum(1 for _, _, still in pods if still),
        )
        for (ns, wl, pool), pods in sorted(acc.items())
    ]


WAIT_CSV_HEADER = (
    "namespace",
    "workload",
    "pool",
    "pods",
    "gpu_hours_waited",
    "longest_wait_h",
    "waiting_at_end",
)


def wait_csv_rows(lines: Iterable[WaitLine]) -> list[list[str]]:
    return [
        [
            line.namespace,
            line.workload,
            line.pool,
            str(line.pods),
            f"{line.gpu_hours_waited:.4f}",
            f"{line.longest_wait_h:.4f}",
            str(line.waiting_at_end),
        ]
        for line in lines
    ]
