"""No holder without its identity: from an agent's first sample on, and after it restarts.

The agent publishes the node's pod records and pod list, and a PodResources snapshot, before its
first samples (agents/startgate.py); a node's inputs share one ordered partition, so the worker
knows every pod the API server has before it joins the first sample. The test makes the race
certain: the API server answers the agent's pod list only when the test lets it, after the kubelet
has been polled for several scrape intervals. A sample published meanwhile would name its holders
without UIDs; none may be.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from contract.outputs import AttributionEvent
from gpuattr.procs import Child
from sim.runner import SimulatedCluster
from sim.scenario import load
from tests.helpers import wait_for
from tests.integration.pipeline import Collected, Pipeline, collect, pipeline

pytestmark = pytest.mark.integration

NODE = "h100-mps"


def attributions(events: Collected, since_ms: int = 0) -> list[AttributionEvent]:
    return [e for e in events.records if isinstance(e, AttributionEvent) and e.ts_ms >= since_ms]


def holders_without_uid(events: list[AttributionEvent]) -> list[str]:
    return [
        f"{e.device_uuid}@{e.ts_ms}: {h.pod} {h.uid_status}"
        for e in events
        for h in e.holders
        if h.uid is None or h.uid_status != "resolved"
    ]


def hold_pod_lists(sim: SimulatedCluster) -> None:
    assert sim.apiserver is not None
    sim.apiserver.hold_pod_lists()


async def hold_then_release(p: Pipeline, lists_before: int) -> None:
    """Keep the agent's pod list waiting through several scrape intervals, then answer it.

    Meanwhile the agent runs: it polls the kubelet, and it must not scrape the exporter (a sample
    now could only name holders without their UIDs)."""
    api, kubelet, exporter = p.sim.apiserver, p.sim.kubelets[NODE], p.sim.exporters[NODE]
    assert api is not None
    scrapes = exporter.requests
    await wait_for(lambda: api.lists > lists_before, timeout_s=60, what=p.logs)  # list is held
    polls = kubelet.list_calls
    # 10 polls at 0.2 s: about four scrape intervals with the pod list unanswered
    await wait_for(lambda: kubelet.list_calls >= polls + 10, timeout_s=60, what=p.logs)
    assert exporter.requests == scrapes, "scraped before the pod identities were published"
    api.release_pod_lists()


async def test_every_holder_carries_its_uid_from_the_start_and_after_a_restart(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    scenario = load("mps-subset")
    uids = {p.name: p.uid for p in scenario.pods}
    async with (
        pipeline(kafka_bootstrap, scenario, tmp_path, before_start=hold_pod_lists) as p,
        collect(p.kafka, "attribution") as ev,
    ):
        p.clock.offset_s = 20.0
        await hold_then_release(p, 0)

        def held_events(since_ms: int) -> int:
            return sum(1 for e in attributions(ev, since_ms) if e.holders)

        await wait_for(lambda: held_events(0) >= 6, timeout_s=90, what=p.logs)
        assert holders_without_uid(attributions(ev)) == []

        (agent,) = p.agents
        agent.kill()  # SIGKILL mid-run, as a rollout or a node reboot would
        assert agent.proc is not None
        await agent.proc.wait()
        assert p.sim.apiserver is not None
        p.sim.apiserver.hold_pod_lists()
        lists = p.sim.apiserver.lists
        restarted_ms = int(time.time() * 1000)
        again = Child(f"{agent.name}-2", agent.args, agent.env, tmp_path / "agent-2.log")
        p.agents.append(again)
        await again.start()
        await hold_then_release(p, lists)
        await wait_for(lambda: held_events(restarted_ms) >= 6, timeout_s=90, what=p.logs)

        assert holders_without_uid(attributions(ev)) == []  # before and after: 100 %
        after = attributions(ev, restarted_ms)
        assert {h.pod: h.uid for e in after for h in e.holders} == uids
