"""End to end on the real node, through the real local Kafka: ``gpuattr agent`` reads the real
kubelet's PodResources socket and the real API server, ``gpuattr worker`` joins; every
attribution event's holders and UIDs must equal what the kubelet lists and the API server says.

* a mixed node — whole GPUs, replicas renamed and not (beside whole GPUs under one resource
  name), a MIG device, a DRA claim from a template and one claim shared by two pods — at every
  sample after warm-up;
* ten kubelet restarts during that steady workload, and one more with the API server down
  15 s: no holder change in the attribution stream, no alert fired or resolved by them (an idle
  alert fired before them stays open);
* the DRA duplicates a kubelet restart followed by a sandbox re-creation produces
  (kubernetes/kubernetes#140471), reproduced: one holder per claim device in every event.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from contract.outputs import AttributionEvent
from gpuattr.localkube.cluster import LocalCluster
from tests.helpers import wait_for, wait_for_async
from tests.kube_fixture import Rest
from tests.realnode.node import (
    DeviceMap,
    agent_pod,
    kubelet_list,
    kubelet_rows,
    uids,
    workload,
)
from tests.realnode.pipeline import RealPipeline, real_pipeline

pytestmark = pytest.mark.integration

View = dict[str, frozenset[tuple[str, str]]]  # device key → {(namespace/pod, uid)}
IDLE_WINDOW_S = 10


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def expected(cluster: LocalCluster, rest: Rest, devices: set[str]) -> View:
    """The kubelet's rows, named by device key, with the API server's UIDs."""
    rows = await kubelet_rows(cluster.node.podresources_socket)
    uid = await uids(rest)
    names = DeviceMap.of(cluster)
    out: dict[str, set[tuple[str, str]]] = {d: set() for d in devices}
    for row in rows:
        pod = f"{row.namespace}/{row.pod}"
        out[names.key(row)].add((pod, uid[pod]))
    return {d: frozenset(h) for d, h in out.items()}


def seen(event: AttributionEvent) -> frozenset[tuple[str, str]]:
    return frozenset((f"{h.namespace}/{h.pod}", h.uid or "") for h in event.holders)


def latest(p: RealPipeline) -> dict[str, AttributionEvent]:
    return {e.device_uuid: e for e in p.attribution()}


async def warm(p: RealPipeline, want: View) -> None:
    """Every device's latest event names exactly the expected holders and UIDs."""

    def done() -> bool:
        last = latest(p)
        return all(d in last and seen(last[d]) == h for d, h in want.items())

    def why() -> str:
        last = latest(p)
        lines = [
            f"{d}: want {sorted(h)} got {sorted(seen(last[d])) if d in last else 'no event'}"
            for d, h in sorted(want.items())
            if d not in last or seen(last[d]) != h
        ]
        return "\n".join(lines) + "\n" + p.logs()

    await wait_for(done, timeout_s=120, every_s=0.2, what=why)


async def events_after(p: RealPipeline, since: int, devices: set[str], n: int = 4) -> None:
    def enough() -> bool:
        counts = Counter(e.device_uuid for e in p.attribution(since))
        return all(counts[d] >= n for d in devices)

    await wait_for(enough, timeout_s=90, every_s=0.2, what=lambda: f"{n} events\n{p.logs()}")


def check_every_event(events: list[AttributionEvent], want: View) -> int:
    """Every event names exactly the expected holders with their UIDs, each pod once (a DRA
    claim device listed twice by the kubelet is still one holder). Returns the count."""
    for e in events:
        assert seen(e) == want[e.device_uuid], (
            f"{e.device_uuid} at {e.ts_ms}: {sorted(seen(e))} != {sorted(want[e.device_uuid])}"
        )
        pods = [f"{h.namespace}/{h.pod}" for h in e.holders]
        assert len(pods) == len(set(pods)), f"a holder twice in one event: {pods}"
        assert (e.state == "unallocated") == (not want[e.device_uuid]), e.summary
        assert all(h.uid_status == "resolved" for h in e.holders), e.holders
    return len(events)


async def test_every_sample_names_the_kubelets_holders_and_the_apis_uids(
    real_node: LocalCluster, kafka_bootstrap: str, tmp_path: Path
) -> None:
    rest = Rest.admin(real_node.kube)
    own = await agent_pod(rest)
    async with (
        workload(rest, "rn-e2e"),
        real_pipeline(kafka_bootstrap, real_node, tmp_path, own_pod=own) as p,
    ):
        devices = p.telemetry.devices()
        want = await expected(real_node, rest, devices)
        free = {d for d, h in want.items() if not h}
        assert len(free) == 1, f"every device held but one MIG instance: {sorted(free)}"
        await warm(p, want)
        since = now_ms()
        await events_after(p, since, devices)
        assert await expected(real_node, rest, devices) == want, "the workload stayed put"
        checked = check_every_event(p.attribution(since), want)
        assert checked >= 4 * len(devices)
        shared = [e for e in p.attribution(since) if len(e.holders) > 1]
        assert shared, "a shared device (replicas or a shared claim) was among them"
        assert all(e.credit == "device-wide" for e in shared)


async def test_kubelet_restarts_change_no_holder_and_fire_no_alert(
    real_node: LocalCluster, kafka_bootstrap: str, tmp_path: Path
) -> None:
    rest = Rest.admin(real_node.kube)
    own = await agent_pod(rest)
    env = {
        "GPUATTR_ALERTS_IDLE_WINDOW_S": str(IDLE_WINDOW_S),
        "GPUATTR_ALERTS_COOLDOWN_S": "3600",
    }
    node = real_node.node
    async with (
        workload(rest, "rn-restarts"),
        real_pipeline(kafka_bootstrap, real_node, tmp_path, own_pod=own, worker_env=env) as p,
    ):
        devices = p.telemetry.devices()
        want = await expected(real_node, rest, devices)
        idle = next(d for d, h in want.items() if any(pod.endswith("/train") for pod, _ in h))
        p.telemetry.util[idle] = 0.0  # held by train, idle from now on: an idle alert fires
        await warm(p, want)
        await wait_for(
            lambda: [a for a in p.alert_records() if a.device_uuid == idle],
            timeout_s=IDLE_WINDOW_S + 60,
            what=lambda: f"the idle alert\n{p.logs()}",
        )
        assert [(a.kind, a.status) for a in p.alert_records()] == [("idle", "firing")]
        mark, alerts_before = now_ms(), len(p.alert_records())

        snapshots = "gpuattr_agent_records_published_total"
        kind = {"kind": "podresources.snapshot"}
        held_total = "gpuattr_agent_kubelet_answers_held_total"
        for _ in range(10):
            before = await p.agent_metric(snapshots, kind)
            await node.restart_kubelet()
            await wait_for_async(
                lambda: _more(p, snapshots, kind, before),  # noqa: B023
                timeout_s=60,
                what=lambda: f"the agent's snapshot after a restart\n{p.logs()}",
            )
        await events_after(p, now_ms(), devices)
        after_ten = p.attribution(mark)
        assert _holder_changes(after_ten) == 0, "ten restarts changed a holder"
        check_every_event(after_ten, want)
        assert len(p.alert_records()) == alerts_before, "ten restarts fired or resolved an alert"
        # once more, with the API server down: the kubelet lists nothing until well after
        # it is back; the outage lasts while the agent holds 30 answers (15 s at 2 polls/s)
        held_before = await p.agent_metric(held_total)
        before = await p.agent_metric(snapshots, kind)
        real_node.kube.stop_apiserver(kill=True)
        try:
            await node.restart_kubelet()
            await wait_for_async(
                lambda: _more(p, held_total, None, held_before + 30),
                timeout_s=60,
                what=lambda: f"15 s of held answers\n{p.logs()}",
            )
        finally:
            await real_node.kube.start_apiserver()
        await wait_for_async(
            lambda: _more(p, snapshots, kind, before),
            timeout_s=120,
            what=lambda: f"the agent's snapshot after the outage\n{p.logs()}",
        )
        assert node.kubelet_starts >= 12
        settled = now_ms()
        await events_after(p, settled, devices)
        assert await expected(real_node, rest, devices) == want, "the workload stayed put"

        events = p.attribution(mark)
        checked = check_every_event(events, want)
        changes = _holder_changes(events)
        assert changes == 0
        assert len(p.alert_records()) == alerts_before, [
            (a.kind, a.status, a.device_uuid) for a in p.alert_records()[alerts_before:]
        ]
        print(
            f"\nkubelet restarts: {node.kubelet_starts - 1} (one with the API server down); "
            f"events checked {checked}, holder changes {changes}, alerts fired or resolved 0, "
            f"answers held by the agent {await p.agent_metric(held_total):.0f}"
        )


async def test_dra_duplicates_after_a_restart_and_a_new_sandbox_are_one_holder(
    real_node: LocalCluster, kafka_bootstrap: str, tmp_path: Path
) -> None:
    rest = Rest.admin(real_node.kube)
    own = await agent_pod(rest)
    ns = "rn-dup"
    node = real_node.node
    async with (
        workload(rest, ns),
        real_pipeline(kafka_bootstrap, real_node, tmp_path, own_pod=own) as p,
    ):
        devices = p.telemetry.devices()
        want = await expected(real_node, rest, devices)
        await warm(p, want)
        mark = now_ms()
        await node.restart_kubelet()
        for name in ("claimed", "shared-a"):
            node.kill_sandbox(ns, name)

        async def duplicated() -> bool:
            reply = await kubelet_list(node.podresources_socket)
            copies = [
                len(d.claim_resources)
                for pod in reply.pod_resources
                if pod.namespace == ns
                for c in pod.containers
                for d in c.dynamic_resources
            ]
            return bool(copies) and max(copies) > 1

        await wait_for_async(
            duplicated, timeout_s=60, every_s=0.5, what="the kubelet listing a claim twice"
        )
        since = now_ms()
        await events_after(p, since, devices)
        assert await duplicated(), "still listed twice while the events were checked"
        assert await expected(real_node, rest, devices) == want
        check_every_event(p.attribution(mark), want)


async def _more(p: RealPipeline, name: str, labels: dict[str, str] | None, than: float) -> bool:
    return await p.agent_metric(name, labels) > than


def _holder_changes(events: list[AttributionEvent]) -> int:
    last: dict[str, frozenset[tuple[str, str]]] = {}
    changes = 0
    for e in sorted(events, key=lambda e: e.ts_ms):
        now = seen(e)
        if e.device_uuid in last and last[e.device_uuid] != now:
            changes += 1
        last[e.device_uuid] = now
    return changes
