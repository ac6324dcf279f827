"""Pod and node watchers against the real HTTP API-server double, through 410s, cuts and outages."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from agents.kube.watch import NodeWatcher, PodWatcher, make_api_client
from agents.selfmetrics import SOURCE_ERRORS
from agents.types import AgentRecord
from contract.inputs import NodeRecord, PodListSnapshot, PodRecord
from infra.settings import KubeSettings
from sim.apiserver import ApiServerDouble
from sim.kube_objects import node_objects, pod_objects
from sim.scenario import load
from tests.helpers import wait_for

SCENARIO = load("exclusive")


def errors() -> float:
    """Every apiserver error the agent counted so far."""
    samples = SOURCE_ERRORS.collect()[0].samples
    return sum(
        s.value
        for s in samples
        if s.labels.get("source") == "apiserver" and s.name.endswith("_total")
    )


class Clock:
    def __init__(self) -> None:
        self.t = 0.0


def final_pods(out: list[AgentRecord]) -> dict[str, bool]:
    """uid → deleted, folding the records in order (what a consumer ends up believing)."""
    state: dict[str, bool] = {}
    for rec in out:
        if isinstance(rec, PodListSnapshot):
            state = {uid: deleted for uid, deleted in state.items() if uid in rec.uids}
        elif isinstance(rec, PodRecord):
            state[rec.uid] = rec.deleted
    return {uid: d for uid, d in state.items() if not d}


def truth(t: float) -> dict[str, bool]:
    return {
        o["metadata"]["uid"]: False
        for o in pod_objects(SCENARIO, t, 0)
        if o["spec"]["nodeName"] == "gpu-a"
    }


@contextlib.asynccontextmanager
async def watching(api_url: str, out: list[AgentRecord]) -> AsyncIterator[None]:
    settings = KubeSettings(api_url=api_url, watch_timeout_s=30, max_backoff_s=0.2)
    api = await make_api_client(settings)

    async def emit(rec: AgentRecord) -> None:
        out.append(rec)

    kw = dict(node="gpu-a", api=api, emit=emit, now_ms=lambda: 1, settings=settings)
    tasks = [
        asyncio.create_task(PodWatcher(**kw).run()),  # type: ignore[arg-type]
        asyncio.create_task(NodeWatcher(**kw).run()),
    ]  # type: ignore[arg-type]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await api.close()


async def test_rollout_410_cuts_and_outages_lose_nothing() -> None:
    clock = Clock()
    out: list[AgentRecord] = []
    provider = lambda: (pod_objects(SCENARIO, clock.t, 0), node_objects(SCENARIO))  # noqa: E731
    async with (
        ApiServerDouble(provider, tick_s=0.02, bookmark_s=0.2) as api,
        watching(api.url, out),
    ):
        await wait_for(lambda: final_pods(out) == truth(0), what="initial list")
        nodes = await wait_for(
            lambda: [r for r in out if isinstance(r, NodeRecord)], what="the node record"
        )
        assert dict(nodes[0].labels)["nvidia.com/gpu.sharing-strategy"] == "none"
        assert ("nvidia.com/gpu", "4") in nodes[0].allocatable

        clock.t = 30  # rollout: the old pod is terminating, still there through its grace
        old = next(
            r for r in reversed(out) if isinstance(r, PodRecord) and r.name.endswith("p8r2n")
        )
        await wait_for(
            lambda: any(
                isinstance(r, PodRecord) and r.name.endswith("p8r2n") and r.deletion_ts_ms
                for r in out
            ),
            what="deletionTimestamp",
        )
        assert old.workload is not None
        assert (old.workload.kind, old.workload.name) == ("Deployment", "train-llama")

        api.expire_all()  # every version the watcher holds is now 410 Gone ...
        api.cut_streams()  # ... and the open watches drop, so they must come back with it
        clock.t = 40  # old pod gone, replacement added — while the watcher must relist
        # both watchers come back with an expired version, get 410 and relist
        await wait_for(
            lambda: api.lists >= 4 and final_pods(out) == truth(40),
            what="relist and state after 410",
        )

        api.cut_streams()
        api.fail_next(3)
        clock.t = 60
        await wait_for(lambda: final_pods(out) == truth(60), what="state after cut + 5xx")

        failures = errors()
        api.cut_streams()
        await api.down()
        clock.t = 70
        await wait_for(lambda: errors() > failures, what="the watchers to notice the outage")
        await api.up()
        await wait_for(lambda: final_pods(out) == truth(70), what="state after outage")
        uids = [r.uid for r in out if isinstance(r, PodRecord)]
        assert len(set(uids)) == len(
            {p.uid for p in SCENARIO.pods if p.node == "gpu-a" and p.start_s <= 70}
        )


async def test_kubeconfig_reaches_the_api_server(tmp_path: Path) -> None:
    provider = lambda: (pod_objects(SCENARIO, 10, 0), node_objects(SCENARIO))  # noqa: E731
    async with ApiServerDouble(provider) as api:
        kubeconfig = tmp_path / "config"
        kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: sim, cluster: {{server: "{api.url}"}}}}]
users: [{{name: dev, user: {{token: not-a-real-token}}}}]
contexts: [{{name: sim, context: {{cluster: sim, user: dev}}}}]
current-context: sim
""")
        settings = KubeSettings(kubeconfig=kubeconfig, context="sim")
        client = await make_api_client(settings)
        out: list[AgentRecord] = []

        async def emit(rec: AgentRecord) -> None:
            out.append(rec)

        try:
            watcher = PodWatcher(
                node="gpu-a", api=client, emit=emit, now_ms=lambda: 1, settings=settings
            )
            await watcher.relist()
        finally:
            await client.close()
    assert {r.name for r in out if isinstance(r, PodRecord)} == {
        p.name for p in SCENARIO.pods if p.node == "gpu-a" and p.start_s <= 10
    }
