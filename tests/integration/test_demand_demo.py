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
  alert ever names that pool.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from tests.contract import assert_valid
from tests.helpers import wait_for

pytestmark = pytest.mark.integration

GPU_POOL = "nvidia.com/gpu"
SHARED_POOL = "nvidia.com/gpu.shared|product=NVIDIA-L4-SHARED"
FIRST = "serve-mistral-5d8f7c9b6-x7k2p"  # scheduled at 65 s
SECOND = "serve-mistral-5d8f7c9b6-r4n8w"  # scheduled at 95 s
CHATS = {"chat-6c8d9f7b5-z7x4c", "chat-6c8d9f7b5-k8q2w"}  # never scheduled
IDLE_HOLDERS = {"notebook-kim-0", "hparam-trial-17-b6x2m", "serve-mistral-canary-6f5d4c8b7-z8v3n"}
MESSAGE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
Records = list[dict[str, Any]]


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
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpuattr.cli",
        "--log-level",
        "WARNING",
        "--bootstrap",
        kafka_bootstrap,
        "demo",
        "--scenario",
        "demand",
        "--duration",
        "400",  # an upper bound: the test stops it once the last replica is scheduled
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ),
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    records: Records = []
    err: list[bytes] = []

    async def read_out() -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            if line.startswith(b"{"):
                records.append(orjson.loads(line))

    async def read_err() -> None:
        assert proc.stderr is not None
        async for line in proc.stderr:
            err.append(line)

    def told() -> str:
        pools = [
            (r["pool"], r["pending_pods"], sorted(waiting(r)), len(r["idle"]))
            for r in records
            if r["schema"] == "demand"
        ][-12:]
        said = [
            (
                a["kind"],
                a["status"],
                a.get("demand", {}) and a["demand"]["pool"],
                sorted(holders(a)),
            )
            for a in records
            if a["schema"] == "alert"
        ]
        logs = b"".join(err).decode(errors="replace")[-3000:]
        return f"demand: {pools}\nalerts: {said}\nstderr:\n{logs}"

    readers = [asyncio.create_task(read_out()), asyncio.create_task(read_err())]
    try:

        async def until(check: Callable[[Records], bool], timeout_s: float) -> None:
            await wait_for(
                lambda: check(records),
                timeout_s,
                every_s=0.2,
                what=lambda: f"{getattr(check, '__name__', 'check')}; {told()}",
            )

        await until(both_replicas_wait_while_gpus_idle, 180)
        await until(the_chats_wait_without_idle_supply, 60)
        await until(the_alert_names_the_idle_holders, 120)  # 20 s window from 5 s
        await until(the_first_replica_left_the_line, 120)  # scheduled at 65 s
        await until(nobody_waits_for_the_pool, 120)  # the second at 95 s
        await until(the_alert_resolved, 60)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)  # the demo stops cleanly, exit 0
        await asyncio.wait_for(proc.wait(), timeout=120)
        await asyncio.wait_for(asyncio.gather(*readers), timeout=30)
    assert proc.returncode == 0, told()

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
    fired = demand_alerts(records)
    for a in fired:
        assert a["demand"]["pool"] == GPU_POOL, told()
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
        and a["demand"]["pool"] != GPU_POOL
    ], told()
    shared = demand(records, SHARED_POOL)[-1]
    assert (shared["resource"], shared["product"]) == ("nvidia.com/gpu.shared", "NVIDIA-L4-SHARED")
    assert shared["pending_pods"] == 2
    assert shared["allocated_gpus"] >= 2
    assert not shared["idle"]
    said = "0/3 nodes are available: 1 Insufficient nvidia.com/gpu.shared, 2 node(s) didn't match"
    assert all(w["message"].startswith(said) for w in shared["waiting"]), shared
