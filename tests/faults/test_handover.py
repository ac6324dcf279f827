"""Partitions changing hands, over and over, while alerts fire and resolve.

Two cases beyond test_faults.py's three SIGKILLs, on an alert-heavy scenario built here: sixteen
GPUs on four nodes whose pods go idle and busy in turn every few seconds, with a 2 s idle window
and no cool-down, so idle alerts fire and resolve throughout the run.

- twenty rounds of adding a worker and taking it away again (a rollout, an autoscaler): every
  round moves partitions twice, and every hand-over runs Faust's table recovery and our seek;
- twenty SIGKILLs at random moments, of either of two workers, each restarted at once (what a
  Deployment does), including kills in the middle of a rebalance or a recovery.

Each run is then compared with its no-fault reference (harness.py): 0 reference events or alerts
missing, equal final tables, nothing dead-lettered, no crashed service in any worker log.
Duplicates are counted and printed; each is identifiable (an event by device and sample time,
an alert by its idempotency key).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sim.scenario import Scenario, parse
from tests.faults.harness import (
    RESULTS,
    compare,
    crashes,
    end_input_and_drain,
    group_members,
    more_records,
    reference,
)
from tests.helpers import wait_for_async
from tests.integration.pipeline import Pipeline, pipeline

pytestmark = [pytest.mark.integration, pytest.mark.faults]

ROUNDS = 20
ALERTS = {  # every idle stretch (6 s) outlasts the window: each fires, then resolves
    "GPUATTR_ALERTS_IDLE_WINDOW_S": "2",
    "GPUATTR_ALERTS_COOLDOWN_S": "0",
    "GPUATTR_ALERTS_ORPHAN_WINDOW_S": "600",
}


def flapping(
    nodes: int = 4, gpus: int = 4, period_s: float = 12.0, until_s: float = 3600
) -> Scenario:
    """One pod per GPU, each idle and busy for half a period, phases spread over the period."""
    doc: dict[str, Any] = {"name": "flapping", "nodes": [], "pods": []}
    for n in range(nodes):
        node = f"flap-{n}"
        doc["nodes"].append({"name": node, "model": "NVIDIA L4", "gpus": gpus})
        for g in range(gpus):
            phase = period_s * (n * gpus + g) / (nodes * gpus)
            steps, t, busy = [], phase, True
            while t < until_s:
                steps.append([t, 80.0 if busy else 0.0])
                t, busy = t + period_s / 2, not busy
            doc["pods"].append(
                {
                    "namespace": "batch",
                    "name": f"job-{n}-{g}",
                    "workload": f"Job/job-{n}-{g}",
                    "node": node,
                    "slots": [str(g)],
                    "util_pct": 0.0,
                    "util_steps": steps,
                    "memory_mib": 2000,
                }
            )
    return parse(doc)


SCENARIO = flapping()
Fault = Callable[[Pipeline, random.Random], Awaitable[str]]


async def more_alerts(p: Pipeline, n: int, timeout_s: float = 60) -> None:
    topic = p.kafka.topic("alerts")
    await more_records(p.kafka.bootstrap or "", topic, n, timeout_s, "alerts")


async def group_is(p: Pipeline, members: int, timeout_s: float = 60) -> None:
    group = p.kafka.topic_prefix + "worker"
    seen: list[tuple[str, int]] = []

    async def settled() -> bool:
        seen.append(await group_members(p.kafka.bootstrap or "", group))
        return seen[-1] == ("Stable", members)

    def what() -> str:  # on a timeout: what the group was, and what each worker last logged
        return f"{group} stable with {members} (last seen {seen[-1:]})\n{p.logs(60)}"

    await wait_for_async(settled, timeout_s=timeout_s, every_s=0.25, what=what)


async def alert_heavy_run(name: str, bootstrap: str, workdir: Path, fault: Fault) -> None:
    rng = random.Random(name)
    async with pipeline(bootstrap, SCENARIO, workdir, workers=2, worker_env=ALERTS) as p:
        p.clock.speed = 1.0  # the pods flap in real time
        await more_alerts(p, 4)  # warmed up: alerts fire
        detail = await fault(p, rng)
        await more_alerts(p, 8)  # the pipeline still works after the faults
        run = await end_input_and_drain(p)
        crashed = crashes(workdir)  # every worker log, the removed workers' included
    ref = await reference(p.kafka, workdir, ALERTS)
    figures = compare(name, ref, run)
    RESULTS.append(f"{'':<22} {detail}")
    assert figures["alerts_reference"] >= 40, f"not alert-heavy: {figures['alerts_reference']}"
    assert not crashed, f"{name}: crashed services {crashed}"


@pytest.mark.timeout(900)
async def test_a_worker_added_and_removed_twenty_times(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    async def rounds(p: Pipeline, rng: random.Random) -> str:
        await p.workers[1].stop()  # one worker serves everything to begin with
        await group_is(p, 1)
        stops: list[int | None] = []
        for r in range(ROUNDS):
            extra = p.worker_child(2 + r % 2)  # a new process (and data dir) every other round
            p.workers.append(extra)
            await extra.start()
            await group_is(p, 2)
            await more_alerts(p, rng.randint(1, 3))  # both workers serve under load
            stops.append(await extra.stop())  # SIGTERM: leaves the group, hands partitions back
            p.workers.remove(extra)
            await group_is(p, 1)
        assert stops == [0] * ROUNDS, f"exit codes of the removed worker: {stops}"
        return f"rounds={ROUNDS} removed_worker_exit_codes=0"

    await alert_heavy_run("add/remove x20", kafka_bootstrap, tmp_path, rounds)


@pytest.mark.timeout(900)
async def test_twenty_sigkills_at_random_moments(kafka_bootstrap: str, tmp_path: Path) -> None:
    async def kills(p: Pipeline, rng: random.Random) -> str:
        waits = []
        for _ in range(ROUNDS):
            wait_s = rng.uniform(0.0, 6.0)  # from mid-rebalance to well after it
            waits.append(wait_s)
            # not a wait for a condition: the fault's moment is chosen at random on purpose, so
            # that kills land mid-rebalance, mid-recovery and mid-processing alike
            await asyncio.sleep(wait_s)
            victim = rng.choice(p.workers)
            victim.kill()  # SIGKILL: no commit, no flush, no goodbye
            if victim.proc is not None:
                await victim.proc.wait()
            await victim.start()  # what the Deployment does
        await group_is(p, 2, timeout_s=120)
        return f"sigkills={ROUNDS} mean_gap_s={sum(waits) / len(waits):.1f}"

    await alert_heavy_run("sigkill x20", kafka_bootstrap, tmp_path, kills)
