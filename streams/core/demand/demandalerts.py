"""A pool's ``demand-while-idle`` alert: pods wait for its GPUs while GPUs of the same pool sit
allocated and idle. Pure.

``step(fired, demand, now_ms, window_ms) -> (fired, alerts)`` on event time (the record's or
the partition clock's ``ts_ms``), from the pool's demand record alone
(:func:`streams.core.demand.demand.pool_demand`), which holds the oldest wait and every idle GPU
with
its idle start and holders.

- It **fires** when the oldest waiting pod has waited at least the window
  (``GPUATTR_ALERTS_DEMAND_WINDOW_S``) and at least one allocated GPU of the pool has been
  measured idle at least the window. The alert names the waiting pods (oldest first) and the
  GPUs idle that long with their holders; its ``started_ms`` is when demand and idleness began
  to coexist (the later of the oldest wait's start and the earliest such idle start), and its id
  is :func:`streams.core.alerts.alerts.alert_id` of (kind, pool, that start), so the firing and
  resolved records of one episode share it. A usage unknown is never idle (the demand record
  does not list it).
- While it fires, changes of the waiting pods or idle GPUs do not fire it again.
- It **resolves** when nobody waits any more, when no GPU of the pool has been idle the window
  (one was given work, freed or reported unknown), or when the pool retires (:func:`retired`).
  Time alone never resolves it: for the same record both durations only grow.
"""

from __future__ import annotations

from contract.outputs import (
    Alert,
    AlertFigures,
    AlertKind,
    DemandBrief,
    Holder,
    IdleGpu,
    PoolDemand,
    WaitingPod,
)
from contract.records import replace
from streams.core.alerts.alerts import alert_id
from streams.core.demand.demand import waiting

KIND: AlertKind = "demand-while-idle"
NAMED = 10  # idle GPUs named in the summary (every one is in the brief)


def duration(seconds: float) -> str:
    """``28 d``, ``2 h``, ``15 min``, ``40 s`` (the largest unit, rounded down)."""
    s = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s // size} {unit}"
    return f"{s} s"


def idle_long(demand: PoolDemand, now_ms: int, window_ms: int) -> tuple[IdleGpu, ...]:
    return tuple(g for g in demand.idle if now_ms - g.since_ms >= window_ms)


def due(demand: PoolDemand | None, now_ms: int, window_ms: int) -> bool:
    """Whether the pool's condition holds at ``now_ms``."""
    if demand is None or demand.oldest_since_ms is None or not waiting(demand):
        return False
    if now_ms - demand.oldest_since_ms < window_ms:
        return False
    return bool(idle_long(demand, now_ms, window_ms))


def _holder_text(g: IdleGpu) -> str:
    pods = [
        f"{h.namespace}/{h.pod}" + (f" ({h.workload.kind}/{h.workload.name})" if h.workload else "")
        for h in g.holders
    ] or ["nobody named"]
    return f"{', '.join(pods)} on {g.node}/{g.device_uuid}"


def _holders(idle: tuple[IdleGpu, ...]) -> tuple[Holder, ...]:
    seen: dict[tuple[str, str, str], Holder] = {}
    for g in idle:
        for h in g.holders:
            key = (h.namespace, h.pod, h.device_ids[0] if h.device_ids else "")
            seen.setdefault(key, h)
    return tuple(seen[k] for k in sorted(seen))


def _who_waits(demand: PoolDemand) -> str:
    """``3 pods wait``; with Kueue Workloads queued, which ClusterQueue waits for how many GPUs of
    quota: ``ClusterQueue team-a (queue ml/training) waits for quota for 8 GPUs (1 Workload:
    ml/train-llm, Job/train-llm) and 2 pods wait``: the line a platform team needs to lend
    quota."""
    said: list[str] = []
    queues: dict[str, list[WaitingPod]] = {}
    for w in demand.waiting:
        if w.waits_for == "quota":
            queues.setdefault(w.cluster_queue, []).append(w)
    for cq, ws in sorted(queues.items()):
        local = sorted({f"{w.namespace}/{w.queue}" for w in ws if w.queue})
        where = f"ClusterQueue {cq}" if cq else "a Kueue queue"
        where += f" (queue {', '.join(local)})" if local else ""
        gpus = sum(w.gpus for w in ws)
        named = ", ".join(
            f"{w.namespace}/{w.pod}" + (f", {w.workload}" if w.workload else "") for w in ws[:3]
        )
        count = f"{len(ws)} Workload{'s' if len(ws) != 1 else ''}"
        said.append(
            f"{where} waits for quota for {gpus} GPU{'s' if gpus != 1 else ''} ({count}: {named})"
        )
    unlisted = demand.queued_workloads - sum(len(ws) for ws in queues.values())
    if unlisted > 0:
        said.append(f"{unlisted} more Workload{'s' if unlisted != 1 else ''} wait for quota")
    if demand.pending_pods or not said:
        pods = "pod waits" if demand.pending_pods == 1 else "pods wait"
        said.append(f"{demand.pending_pods} {pods}")
    return " and ".join(said)


def fire(demand: PoolDemand, now_ms: int, window_ms: int) -> Alert:
    assert demand.oldest_since_ms is not None  # due() checked
    idle = idle_long(demand, now_ms, window_ms)
    since = max(demand.oldest_since_ms, min(g.since_ms for g in idle))
    wait_s = (now_ms - demand.oldest_since_ms) / 1000
    idle_for_s = min(now_ms - g.since_ms for g in idle) / 1000
    gpus = "GPU" if len(idle) == 1 else "GPUs"
    has = "has" if len(idle) == 1 else "have"
    named = ", ".join(_holder_text(g) for g in idle[:NAMED])
    more = f", and {len(idle) - NAMED} more" if len(idle) > NAMED else ""
    # the record lists the longest idle; unlisted ones idled for less, some maybe long enough
    least = "at least " if len(idle) == len(demand.idle) < demand.idle_count() else ""
    summary = (
        f"{_who_waits(demand)} for {demand.pool} (oldest {duration(wait_s)}) while "
        f"{least}{len(idle)} allocated {gpus} of that pool {has} been idle for "
        f"{duration(idle_for_s)}: {named}{more}"
    )
    return Alert(
        id=alert_id(KIND, "", demand.pool, since),
        kind=KIND,
        status="firing",
        node="",
        device_uuid="",
        gpu_uuid="",
        model=demand.product,
        mig=None,
        sharing="unknown",
        holders=_holders(idle),
        figures=AlertFigures(
            pending_pods=demand.pending_pods,
            gpus_requested=demand.gpus_requested,
            oldest_wait_s=wait_s,
            queued_workloads=demand.queued_workloads or None,
            idle_gpus=len(idle),
            idle_for_s=idle_for_s,
        ),
        window_s=window_ms / 1000,
        started_ms=since,
        ts_ms=now_ms,
        device_wide=False,
        summary=summary,
        demand=DemandBrief(
            pool=demand.pool,
            resource=demand.resource,
            product=demand.product,
            mig_profile=demand.mig_profile,
            waiting=demand.waiting,
            idle=idle,
        ),
    )


def resolve(fired: Alert, now_ms: int, why: str) -> Alert:
    pool = fired.demand.pool if fired.demand is not None else "?"
    return replace(
        fired, status="resolved", ts_ms=now_ms, summary=f"resolved: demand for {pool}: {why}"
    )


def _why(demand: PoolDemand | None, now_ms: int, window_ms: int) -> str:
    if demand is None:
        return "nobody waits any more (the pool retired)"
    if not waiting(demand):
        return "nobody waits any more"
    return "no allocated GPU of the pool has been idle for the window any more"


def step(
    fired: Alert | None, demand: PoolDemand | None, now_ms: int, window_ms: int
) -> tuple[Alert | None, tuple[Alert, ...]]:
    """The pool's open alert after its demand record as of ``now_ms``, and what moved.

    ``now_ms`` never goes back from the open alert's time (a record older than it, from another
    producer, judges at the alert's time), so time alone never resolves it."""
    if fired is not None:
        now_ms = max(now_ms, fired.ts_ms)
        if due(demand, now_ms, window_ms):
            return fired, ()
        return None, (resolve(fired, now_ms, _why(demand, now_ms, window_ms)),)
    if demand is not None and due(demand, now_ms, window_ms):
        alert = fire(demand, now_ms, window_ms)
        return alert, (alert,)
    return None, ()
