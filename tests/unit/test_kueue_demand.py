"""Kueue's queued Workloads in the demand stage: a Workload not admitted is one waiter for quota
(it has no pods), counted apart from the pods pending for the scheduler; once admitted its pods
are the demand, never both; lists judge only their own kind; the alert names the ClusterQueue
that waits beside the idle holders."""

from __future__ import annotations

import pytest

from contract import codec
from contract.inputs import (
    ClockTick,
    GpuRequest,
    OwnerRef,
    PendingPod,
    PendingPodList,
    QueuedWorkload,
    QueuedWorkloadList,
)
from contract.outputs import Alert, Pool, PoolDemand
from streams.core.demand.demand import pool_demand, waiter_of, waiter_of_workload
from streams.core.flow.demandstage import (
    DemandOutput,
    DemandStage,
    DemandTables,
    UnusableDemandRecord,
)
from tests.unit.test_demand import GPU, KEY, MIN, WINDOW_S, device, pod, supply
from tests.unit.test_spine import UNBOUNDED

NS = "ml"
QUOTA = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
    "flavor a100, 8 more needed"
)


def workload(
    name: str = "job-train-llm-3f2a1",
    ts: int = 0,
    *,
    state: str = "queued",
    count: int = 8,
    since: int | None = None,
    owner: str = "train-llm",
    resource: str = GPU,
) -> QueuedWorkload:
    return QueuedWorkload(
        ts,
        NS,
        name,
        f"uid-{name}",
        0,
        (GpuRequest(resource, count),),
        state=state,  # type: ignore[arg-type]
        queue="training",
        cluster_queue="team-a",
        priority=100,
        owner=OwnerRef("Job", owner),
        reason="Pending",
        message=QUOTA,
        since_ms=since,
    )


def job_pod(name: str, ts: int, owner: str = "train-llm", state: str = "pending") -> PendingPod:
    return PendingPod(
        ts,
        NS,
        name,
        f"uid-{name}",
        ts,
        (GpuRequest(GPU, 4),),
        state=state,  # type: ignore[arg-type]
        workload=OwnerRef("Job", owner),
        scheduled_status="False",
        scheduled_reason="Unschedulable",
    )


def run(stage: DemandStage, *records: object) -> list[DemandOutput]:
    out: list[DemandOutput] = []
    for r in records:
        partition_wide = isinstance(r, ClockTick | PendingPodList | QueuedWorkloadList)
        out += stage.handle(r, 0, None if partition_wide else KEY)
    return out


def new_stage() -> tuple[DemandStage, DemandTables]:
    tables = DemandTables()
    return DemandStage(tables, WINDOW_S, life=UNBOUNDED), tables


def last_record(out: list[DemandOutput]) -> PoolDemand:
    records = [o for o in out if isinstance(o, PoolDemand) and o.pool == GPU]
    return records[-1]


def test_a_queued_workload_waits_for_quota_apart_from_the_pods() -> None:
    waiters = [waiter_of_workload(workload(since=5 * MIN), GPU), waiter_of(pod("p", 0), GPU)]
    d = pool_demand(Pool(GPU), waiters, [supply(0, "n1", device("g0", 0))], 7)
    assert (d.pending_pods, d.queued_workloads) == (1, 1)
    assert (d.gpus_requested, d.gpus_for_quota) == (9, 8)
    assert d.oldest_since_ms == 0  # the pod's wait is the older
    queued = next(w for w in d.waiting if w.waits_for == "quota")
    assert (queued.pod, queued.workload, queued.queue, queued.cluster_queue) == (
        "job-train-llm-3f2a1",
        "Job/train-llm",
        "training",
        "team-a",
    )
    assert (queued.gpus, queued.since_ms, queued.reason, queued.message) == (
        8,
        5 * MIN,  # since it was sent back to its queue
        "Pending",
        QUOTA,
    )
    assert codec.decode(codec.encode(d)) == d


def keys_of(tables: DemandTables) -> list[str]:
    return sorted(tables.demand_pods)


@pytest.mark.parametrize(
    ("records", "left"),
    [
        ([workload(ts=1)], ["kueue:ml/job-train-llm-3f2a1"]),
        ([workload(ts=1), workload(ts=2, state="admitted")], []),
        ([workload(ts=1), workload(ts=2, state="finished")], []),
        ([workload(ts=1), workload(ts=2, state="deleted")], []),
        ([workload(ts=1), workload(ts=2, state="deactivated")], []),  # its owner paused it
        ([workload(ts=2, state="admitted"), workload(ts=1)], []),  # a late, older record
        # admitted, its pods pending for the scheduler: the pods are the demand
        ([workload(ts=1), workload(ts=2, state="admitted"), job_pod("w-0", 3)], ["ml/w-0"]),
        # the pods' watch delivered first: the Workload's wait ends with its first pod
        ([workload(ts=1), job_pod("w-0", 3), job_pod("w-1", 3)], ["ml/w-0", "ml/w-1"]),
        # another job's pod leaves the Workload waiting
        (
            [workload(ts=1), job_pod("x-0", 3, owner="other")],
            ["kueue:ml/job-train-llm-3f2a1", "ml/x-0"],
        ),
        # evicted and requeued after its pods went: waiting again
        (
            [workload(ts=1), job_pod("w-0", 3), job_pod("w-0", 4, state="deleted"), workload(ts=5)],
            ["kueue:ml/job-train-llm-3f2a1"],
        ),
        # each list judges its own kind only
        ([workload(ts=1), pod("a", 1), PendingPodList(5, ())], ["kueue:ml/job-train-llm-3f2a1"]),
        ([workload(ts=1), pod("a", 1), QueuedWorkloadList(5, ())], ["ml/a"]),
        (
            [workload(ts=1), QueuedWorkloadList(5, (workload(ts=0),))],
            ["kueue:ml/job-train-llm-3f2a1"],
        ),
        ([workload(ts=9), QueuedWorkloadList(5, ())], ["kueue:ml/job-train-llm-3f2a1"]),
    ],
)
def test_the_stages_keys(records: list[object], left: list[str]) -> None:
    stage, tables = new_stage()
    run(stage, *records)
    assert keys_of(tables) == sorted(f"{GPU}|{k}" for k in left)


def test_a_workload_keyed_under_a_resource_it_does_not_ask_for_is_refused() -> None:
    stage, _ = new_stage()
    with pytest.raises(UnusableDemandRecord, match="asks for"):
        stage.handle(workload(resource="nvidia.com/mig-1g.10gb"), 0, KEY)


def test_quota_beside_idle_names_the_clusterqueue_and_the_idle_holders() -> None:
    stage, _ = new_stage()
    out = run(
        stage,
        supply(0, "n1", device("g0", 0, holder="notebook-0")),
        workload(ts=MIN),
        ClockTick(0, int(WINDOW_S * 1000) + 2 * MIN),
    )
    (alert,) = [o for o in out if isinstance(o, Alert)]
    assert alert.kind == "demand-while-idle"
    assert alert.summary.startswith(
        "ClusterQueue team-a (queue ml/training) waits for quota for 8 GPUs (1 Workload: "
        "ml/job-train-llm-3f2a1, Job/train-llm) for nvidia.com/gpu (oldest 17 min) while 1 "
        "allocated GPU of that pool has been idle for 17 min: team/notebook-0 (Deployment/hog)"
    ), alert.summary
    assert (alert.figures.pending_pods, alert.figures.queued_workloads) == (0, 1)
    assert alert.demand is not None
    assert [w.waits_for for w in alert.demand.waiting] == ["quota"]
    record = last_record(out)
    assert (record.queued_workloads, record.gpus_for_quota, record.pending_pods) == (1, 8, 0)

    # admitted: the Workload's wait ends; nothing waits, the alert resolves
    out = run(stage, workload(ts=20 * MIN, state="admitted"))
    (resolved,) = [o for o in out if isinstance(o, Alert)]
    assert (resolved.status, resolved.id) == ("resolved", alert.id)
    assert resolved.summary.endswith("nobody waits any more")


def test_pods_only_read_as_before() -> None:
    """Without Workloads the alert's words are the pods' as they always were."""
    stage, _ = new_stage()
    out = run(
        stage,
        supply(0, "n1", device("g0", 0)),
        pod("a", MIN, created=MIN),
        ClockTick(0, int(WINDOW_S * 1000) + 2 * MIN),
    )
    (alert,) = [o for o in out if isinstance(o, Alert)]
    assert alert.summary.startswith("1 pod waits for nvidia.com/gpu (oldest")
    assert alert.figures.queued_workloads is None
