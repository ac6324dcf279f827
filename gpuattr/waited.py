"""GPU-hours waited: how long pods asking for GPUs waited for the scheduler, times the GPUs they
asked for, per namespace, workload and pool. Pure.

Read from the demand-events records of one range ``[start_ms, end_ms)``: the cluster role's
``k8s.pending-pod`` (a pod's every change, and its last record when it is ``bound`` or
``deleted``) and ``k8s.pending-pods`` (every pod pending after a list). A pod waits from its
creation (or the range's start, if earlier) until its bound or deleted record, or until a list
taken after its last record no longer has it (the demand stage's own rule), else until the
range's end. Each pod counts once per pool it asks for, however many copies of its records the
range holds (a pod's record goes to every resource it asks for, a list to every partition):
``wait x GPUs asked`` for that pool. A ResourceClaim several pods reference (by name) is one
allocation: its devices count once, for as long as any of its pods waits, on the line of the pod
that waited first (a claim made from a template is its pod's own). A pod seen only in a list
counts too. A pod whose records all lie before the range and that no list within the range names
is not seen (the topic keeps records for its retention; lists come with every relist of the
cluster role).

Kueue's queued Workloads (``kueue.workload``, ``kueue.workloads``) wait for quota the same way,
from their creation (or last eviction) until their ``admitted``, ``finished`` or ``deleted``
record or a later Workload list without them, on the line of the job they stand for — the line
its pods wait on once admitted; ``quota_gpu_hours`` is that part of the line's hours.

Waiting is not holding: these hours are GPUs asked for and not given, beside (never added to)
the held GPU-hours of :mod:`gpuattr.report`. A MIG pool's figure is in instance-hours.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from contract.inputs import PendingPod, PendingPodList, QueuedWorkload, QueuedWorkloadList
from contract.outputs import Pool
from contract.records import replace

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
    workloads: int = 0  # distinct Kueue Workloads that waited for quota (not in ``pods``)
    quota_gpu_hours: float = 0.0  # of gpu_hours_waited, theirs


#: a pool's claims a pod waits on: (namespace/name, devices), sorted
Claims = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class _Wait:
    namespace: str
    workload: str
    gpus: int  # asked for outside any claim another pod may share
    created_ms: int
    last_seen_ms: int
    ended_ms: int | None = None
    claims: Claims = ()
    queued: bool = False  # a Kueue Workload waiting for quota


def _workload(pod: PendingPod) -> str:
    return f"{pod.workload.kind}/{pod.workload.name}" if pod.workload else f"Pod/{pod.name}"


def _pools(pod: PendingPod) -> dict[str, tuple[int, Claims]]:
    """Per pool: the GPUs asked for outside named claims (two claims of one device class add
    up), and the named claims' devices."""
    asked: dict[str, int] = defaultdict(int)
    claims: dict[str, dict[str, int]] = defaultdict(dict)
    for r in pod.requests:
        pool = Pool(r.resource, r.product, r.mig_profile).key()
        if r.claim:
            claims[pool][r.claim] = claims[pool].get(r.claim, 0) + r.count
        else:
            asked[pool] += r.count
    return {p: (asked[p], tuple(sorted(claims[p].items()))) for p in {*asked, *claims}}


def _as_pod(w: QueuedWorkload) -> PendingPod:
    """A queued Workload as a wait: on its job's line, from its creation or last eviction."""
    return PendingPod(
        w.ts_ms,
        w.namespace,
        w.name,
        w.uid,
        w.since_ms if w.since_ms is not None else w.created_ms,
        w.requests,
        state="pending" if w.state == "queued" else "deleted",
        workload=w.owner,
    )


def _seen(
    waits: dict[tuple[str, str], _Wait], pod: PendingPod, ts_ms: int, queued: bool = False
) -> None:
    for pool, (gpus, claims) in _pools(pod).items():
        key = (pod.uid, pool)
        current = waits.get(key)
        if current is None:
            current = _Wait(
                pod.namespace, _workload(pod), gpus, pod.created_ms, ts_ms, None, claims, queued
            )
        elif ts_ms >= current.last_seen_ms:
            current = replace(current, gpus=gpus, last_seen_ms=ts_ms, claims=claims)
        if pod.state != "pending":
            end = min(ts_ms, current.ended_ms) if current.ended_ms is not None else ts_ms
            current = replace(current, ended_ms=end)
        elif current.ended_ms is not None and ts_ms > current.ended_ms:
            current = replace(current, ended_ms=None)  # a later word: it still waits
        waits[key] = current


def _listed(
    waits: dict[tuple[str, str], _Wait], pods: tuple[PendingPod, ...], ts_ms: int, queued: bool
) -> None:
    """A list of one kind (pending pods, or queued Workloads) ends the waits of that kind only."""
    listed = {p.uid for p in pods}
    for p in pods:
        _seen(waits, replace(p, state="pending"), ts_ms, queued)
    for (uid, pool), w in list(waits.items()):
        if w.queued != queued:
            continue
        if uid not in listed and w.ended_ms is None and w.last_seen_ms < ts_ms:
            waits[(uid, pool)] = replace(w, ended_ms=ts_ms)  # gone without a last word


WaitRecord = PendingPod | PendingPodList | QueuedWorkload | QueuedWorkloadList


def _order(record: WaitRecord) -> tuple[int, int]:
    listing = isinstance(record, PendingPodList | QueuedWorkloadList)
    return record.ts_ms, listing  # a pod's own word first


def accumulate_waits(
    records: Iterable[WaitRecord], *, start_ms: int, end_ms: int
) -> list[WaitLine]:
    waits: dict[tuple[str, str], _Wait] = {}
    for record in sorted(records, key=_order):
        if record.ts_ms >= end_ms:
            continue
        if isinstance(record, PendingPodList):
            _listed(waits, record.pods, record.ts_ms, queued=False)
        elif isinstance(record, QueuedWorkloadList):
            workloads = tuple(_as_pod(w) for w in record.workloads)
            _listed(waits, workloads, record.ts_ms, queued=True)
        elif isinstance(record, QueuedWorkload):
            _seen(waits, _as_pod(record), record.ts_ms, queued=True)
        else:
            _seen(waits, record, record.ts_ms)
    acc: dict[tuple[str, str, str], list[tuple[float, float, bool, bool]]] = defaultdict(list)
    # (pool, claim) → its devices and each of its pods' wait: (begin, uid, line, end)
    shared: dict[tuple[str, str], tuple[int, list[tuple[int, str, tuple[str, str, str], int]]]]
    shared = {}
    for (uid, pool), w in waits.items():
        begin = max(w.created_ms, start_ms)
        end = min(w.ended_ms if w.ended_ms is not None else end_ms, end_ms)
        if end <= begin:
            continue
        line = (w.namespace, w.workload, pool)
        acc[line].append(
            (
                (end - begin) / HOUR_MS,
                (end - begin) / HOUR_MS * w.gpus,
                w.ended_ms is None,
                w.queued,
            )
        )
        for claim, devices in w.claims:
            count, spans = shared.setdefault((pool, claim), (devices, []))
            shared[(pool, claim)] = (max(count, devices), spans)
            spans.append((begin, uid, line, end))
    extra: dict[tuple[str, str, str], float] = defaultdict(float)
    for devices, spans in shared.values():
        extra[min(spans)[2]] += _covered(spans) / HOUR_MS * devices
    return [
        WaitLine(
            namespace=ns,
            workload=wl,
            pool=pool,
            pods=sum(1 for *_, queued in pods if not queued),
            gpu_hours_waited=sum(gpu_h for _, gpu_h, _, _ in pods) + extra[(ns, wl, pool)],
            longest_wait_h=max(hours for hours, _, _, _ in pods),
            waiting_at_end=sum(1 for _, _, still, _ in pods if still),
            workloads=sum(1 for *_, queued in pods if queued),
            quota_gpu_hours=sum(gpu_h for _, gpu_h, _, queued in pods if queued),
        )
        for (ns, wl, pool), pods in sorted(acc.items())
    ]


def _covered(spans: Iterable[tuple[int, str, tuple[str, str, str], int]]) -> int:
    """The ms of the union of the spans (a claim waits while any of its pods does)."""
    total, reach = 0, None
    for begin, _, _, end in sorted(spans):
        if reach is None or begin > reach:
            total, reach = total + end - begin, end
        elif end > reach:
            total, reach = total + end - reach, end
    return total


WAIT_CSV_HEADER = (
    "namespace",
    "workload",
    "pool",
    "pods",
    "gpu_hours_waited",
    "longest_wait_h",
    "waiting_at_end",
    "workloads",
    "quota_gpu_hours",
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
            str(line.workloads),
            f"{line.quota_gpu_hours:.4f}",
        ]
        for line in lines
    ]
