"""No holder without its identity: from an agent's first record that names holders on, and
after it restarts.

The agent publishes the node's pod records and pod list before its first PodResources record,
and both before its first samples (agents/startgate.py); a node's inputs share one ordered
partition, so the worker knows every pod the API server has before it reports the first
allocation. The test makes the race certain: the API server answers the agent's pod list only
when the test lets it, after the agent has read the kubelet and published its status many times
over. An allocation or a sample published meanwhile would name holders without UIDs; none may
be, and on the input topic none comes before the pod list.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from contract.inputs import (
    AgentStatus,
    DcgmScrape,
    PodListSnapshot,
    PodResourcesDiff,
    PodResourcesSnapshot,
)
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
        f"{e.device_uuid}@{e.ts_ms} ({e.origin}): {h.pod} {h.uid_status}"
        for e in events
        for h in e.holders
        if h.uid is None or h.uid_status != "resolved"
    ]


def hold_pod_lists(sim: SimulatedCluster) -> None:
    assert sim.apiserver is not None
    sim.apiserver.hold_pod_lists()


async def hold_then_release(
    p: Pipeline, inputs: Collected, lists_before: int, polls_before: int
) -> None:
    """Keep the agent's pod list waiting while the agent runs — it has read the kubelet, and
    publishes its status ten times over (every 0.2 s: four scrape intervals) — then answer it.
    Meanwhile it must neither scrape the exporter nor publish what the kubelet said: either
    could only name holders without their UIDs."""
    api, kubelet, exporter = p.sim.apiserver, p.sim.kubelets[NODE], p.sim.exporters[NODE]
    assert api is not None
    scrapes = exporter.requests
    await wait_for(lambda: api.lists > lists_before, timeout_s=60, what=p.logs)  # list is held
    await wait_for(lambda: kubelet.list_calls > polls_before, timeout_s=60, what=p.logs)
    seen = len(inputs.records)

    def statuses() -> int:
        return sum(isinstance(r, AgentStatus) for r in inputs.records[seen:])

    await wait_for(lambda: statuses() >= 10, timeout_s=60, what=p.logs)
    assert exporter.requests == scrapes, "scraped before the pod identities were published"
    named = [r for r in inputs.records[seen:] if isinstance(r, NAMES_HOLDERS)]
    assert named == [], "published allocations before the pod identities"
    api.release_pod_lists()


#: input records that name holders (the pods they name must be known first)
NAMES_HOLDERS = (PodResourcesSnapshot, PodResourcesDiff, DcgmScrape)


def identities_first(inputs: Collected) -> None:
    """On the input topic, every agent run's pod list precedes its first record naming holders."""
    listed = False
    for record in inputs.records:
        if isinstance(record, PodListSnapshot):
            listed = True
        elif isinstance(record, AgentStatus) and all(s.state == "starting" for s in record.sources):
            listed = False  # a new agent run starts
        elif isinstance(record, NAMES_HOLDERS):
            assert listed, f"{type(record).__name__} before the pod list"


async def test_every_holder_carries_its_uid_from_the_start_and_after_a_restart(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    scenario = load("mps-subset")
    uids = {p.name: p.uid for p in scenario.pods}
    async with (
        pipeline(
            kafka_bootstrap,
            scenario,
            tmp_path,
            before_start=hold_pod_lists,
            agent_env={"GPUATTR_AGENT_STATUS_INTERVAL_S": "0.2"},
        ) as p,
        collect(p.kafka, "attribution") as ev,
        collect(p.kafka, "node-events") as inputs,
    ):
        p.clock.offset_s = 20.0
        await hold_then_release(p, inputs, 0, 0)

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
        lists, polls = p.sim.apiserver.lists, p.sim.kubelets[NODE].list_calls
        restarted_ms = int(time.time() * 1000)
        again = Child(f"{agent.name}-2", agent.args, agent.env, tmp_path / "agent-2.log")
        p.agents.append(again)
        await again.start()
        await hold_then_release(p, inputs, lists, polls)
        await wait_for(lambda: held_events(restarted_ms) >= 6, timeout_s=90, what=p.logs)

        assert holders_without_uid(attributions(ev)) == []  # before and after: 100 %
        identities_first(inputs)
        after = attributions(ev, restarted_ms)
        assert {h.pod: h.uid for e in after for h in e.holders} == uids
