"""``gpuattr demo --scenario demand --json``: who waits for a GPU while allocated GPUs sit idle,
end to end (simulated cluster and API server, real Kafka, agents, the cluster role's
pending-pod watch, the worker's demand stage), as a user runs it. The test reads the demo's
stdout while it runs, waits (bounded) for each step, then stops the demo with SIGTERM:

- two replicas of inference/serve-mistral wait for ``nvidia.com/gpu`` from 5 s with the
  scheduler's word ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu. …"): the pool's
  demand record lists them while three allocated GPUs of the pool idle;
- ``demand-while-idle`` fires naming the waiting replicas and the idle holders (the notebook,
  the stuck trial, the canary without traffic);
- at 65 s the first replica is scheduled (the trial's GPU is free): the record drops it; at 95 s
  the second (the canary's): nobody waits, the alert resolves (the same alert id);
- two replicas of serving/chat wait for ``nvidia.com/gpu.shared`` on L4s (a node selector on the
  product label) whose every replica is held and busy: their pool's record lists them, and no
  alert ever names that pool;
- a training Job queued in Kueue (no pods: its Workload waits for quota in ClusterQueue team-ml,
  whose only flavor is the A100s) is one waiter for quota in the A100 pool, with Kueue's word;
  ``demand-while-idle`` fires for that pool naming the ClusterQueue and the idle notebook.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract import assert_valid
from tests.integration.demo_run import Records, demo

pytestmark = pytest.mark.integration

GPU_POOL = "nvidia.com/gpu"
SHARED_POOL = "nvidia.com/gpu.shared|product=NVIDIA-L4-SHARED"
A100_POOL = "nvidia.com/gpu|product=NVIDIA-A100-SXM4-80GB"  # the ClusterQueue's only flavor
FIRST = "serve-mistral-5d8f7c9b6-x7k2p"  # scheduled at 65 s
SECOND = "serve-mistral-5d8f7c9b6-r4n8w"  # scheduled at 95 s
CHATS = {"chat-6c8d9f7b5-z7x4c", "chat-6c8d9f7b5-k8q2w"}  # never scheduled
IDLE_HOLDERS = {"notebook-kim-0", "hparam-trial-17-b6x2m", "serve-mistral-canary-6f5d4c8b7-z8v3n"}
MESSAGE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def demand(records: Records, pool: str) -> Records:
    return [r for r in records if r["schema"] == "demand" and r["pool"] == pool]


def waiting(record: dict[str, Any]) -> set[str]:
    return {w["pod"] for w in record["waiting"]}


def demand_alerts(records: Records, status: str = "firing") -> Records:
    return [
        r
        for r in records
        if r["schema"] == "alert" and r["kind"] == "demand-while-idle" and r["status"] == status
    ]


def holders(alert: dict[str, Any]) -> set[str]:
    return {h["pod"] for h in alert["holders"]}


def both_replicas_wait_while_gpus_idle(records: Records) -> bool:
    return any(
        waiting(r) == {FIRST, SECOND} and r["idle"] and r["gpus_requested"] == 2
        for r in demand(records, GPU_POOL)
    )


def the_chats_wait_without_idle_supply(records: Records) -> bool:
    return any(waiting(r) == CHATS and not r["idle"] for r in demand(records, SHARED_POOL))


def the_alert_names_the_idle_holders(records: Records) -> bool:
    return any(
        a["demand"]["pool"] == GPU_POOL and holders(a) >= IDLE_HOLDERS
        for a in demand_alerts(records)
    )


def the_workload_waits_for_quota(records: Records) -> bool:
    return any(r.get("queued_workloads") for r in demand(records, A100_POOL))


def the_quota_alert_names_the_clusterqueue(records: Records) -> bool:
    return any(
        a["demand"]["pool"] == A100_POOL and "ClusterQueue team-ml" in a["summary"]
        for a in demand_alerts(records)
    )


def the_first_replica_left_the_line(records: Records) -> bool:
    return any(waiting(r) == {SECOND} for r in demand(records, GPU_POOL))


def nobody_waits_for_the_pool(records: Records) -> bool:
    return any(r["pending_pods"] == 0 for r in demand(records, GPU_POOL))


def the_alert_resolved(records: Records) -> bool:
    fired = {a["id"] for a in demand_alerts(records)}
    return any(a["id"] in fired for a in demand_alerts(records, "resolved"))


async def test_demand_demo_names_who_waits_while_allocated_gpus_idle(
    kafka_bootstrap: str,
) -> None:
    # an upper bound: the test stops it once the last replica is scheduled
    async with demo(kafka_bootstrap, "demand", duration_s=400) as run:
        await run.until(both_replicas_wait_while_gpus_idle, 180)
        await run.until(the_chats_wait_without_idle_supply, 60)
        await run.until(the_workload_waits_for_quota, 60)  # created at 8 s
        await run.until(the_alert_names_the_idle_holders, 120)  # 20 s window from 5 s
        await run.until(the_quota_alert_names_the_clusterqueue, 60)
        await run.until(the_first_replica_left_the_line, 120)  # scheduled at 65 s
        await run.until(nobody_waits_for_the_pool, 120)  # the second at 95 s
        await run.until(the_alert_resolved, 60)
    records = run.records

    def told() -> str:
        pools = [
            (r["pool"], r["pending_pods"], sorted(waiting(r)), len(r["idle"]))
            for r in records
            if r["schema"] == "demand"
        ][-12:]
        return f"demand: {pools}\n{run.told()}"

    assert run.proc.returncode == 0, told()

    for record in records:  # the consumer contract holds for real output
        assert_valid(record)

    # the waiting replicas carry the scheduler's own word, their workload and their ask
    listed = [w for r in demand(records, GPU_POOL) for w in r["waiting"]]
    assert {w["pod"] for w in listed} == {FIRST, SECOND}
    for w in listed:
        assert w["reason"] == "Unschedulable"
        assert w["message"].startswith(MESSAGE), w
        assert w["workload"] == "Deployment/serve-mistral"
        assert w["gpus"] == 1
    # the alert names the waiting replicas and only idle holders: never the busy trainer, nor
    # the replicas once they hold a GPU
    fired = [a for a in demand_alerts(records) if a["demand"]["pool"] == GPU_POOL]
    for a in fired:
        assert holders(a) <= IDLE_HOLDERS, told()
        assert {w["pod"] for w in a["demand"]["waiting"]} <= {FIRST, SECOND}
        assert a["figures"]["pending_pods"] >= 1
        assert a["figures"]["idle_gpus"] >= 1
    first = fired[0]
    assert {w["pod"] for w in first["demand"]["waiting"]} == {FIRST, SECOND}
    assert first["figures"]["oldest_wait_s"] >= 20  # the demo's window
    # one episode: every firing record and the resolution share one id
    assert len({a["id"] for a in fired}) == 1, told()
    (resolved, *_) = demand_alerts(records, "resolved")
    assert resolved["id"] == first["id"]
    # the shared pool's waiters have no idle supply: nothing fires for them
    assert not [
        a
        for a in records
        if a["schema"] == "alert"
        and a["kind"] == "demand-while-idle"
        and a["demand"]["pool"] not in (GPU_POOL, A100_POOL)
    ], told()
    # Kueue's queued training Job: one waiter for quota in the A100 pool (no pods), with Kueue's
    # word, its queues and its job; the alert names the ClusterQueue beside the idle notebook
    queued = [w for r in demand(records, A100_POOL) for w in r["waiting"]]
    assert queued, told()
    for w in queued:
        assert (w["waits_for"], w["queue"], w["cluster_queue"]) == ("quota", "training", "team-ml")
        assert (w["namespace"], w["workload"], w["gpus"]) == ("ml", "Job/train-llm-ft", 4)
        assert w["message"].startswith("couldn't assign flavors to pod set main"), w
    a100 = demand(records, A100_POOL)[-1]
    assert (a100["pending_pods"], a100["queued_workloads"], a100["gpus_for_quota"]) == (0, 1, 4)
    (quota, *_) = [a for a in demand_alerts(records) if a["demand"]["pool"] == A100_POOL]
    assert quota["summary"].startswith(
        "ClusterQueue team-ml (queue ml/training) waits for quota for 4 GPUs (1 Workload: ml/"
    ), quota["summary"]
    assert "research/notebook-kim-0" in quota["summary"]
    assert quota["figures"]["queued_workloads"] == 1
    shared = demand(records, SHARED_POOL)[-1]
    assert (shared["resource"], shared["product"]) == ("nvidia.com/gpu.shared", "NVIDIA-L4-SHARED")
    assert shared["pending_pods"] == 2
    assert shared["allocated_gpus"] >= 2
    assert not shared["idle"]
    said = "0/3 nodes are available: 1 Insufficient nvidia.com/gpu.shared, 2 node(s) didn't match"
    assert all(w["message"].startswith(said) for w in shared["waiting"]), shared
