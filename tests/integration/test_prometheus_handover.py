"""Two workers scraped by one real Prometheus while partitions change hands, and the Grafana
dashboard's every query run against it.

The demo's `mixed` scenario (14 devices on three nodes: exclusive, MIG, time-slicing, MPS), with
the `accounting` scenario's blind node beside it (two H100s held, its dcgm-exporter never
answers: held GPUs without a reading, as on any real cluster with a broken exporter), the
`tenants` node (its exporter's per-pod rows: each tenant's measured use) and the `sick-gpu` node
(its kubelet writes each held device's health into the holder's status), runs through two
workers, each serving the devices of its own partitions on /metrics. One worker is
stopped — its devices' series must move to the other — and started again. Over the whole run,
including both rebalances, the recording rules never count a device twice, no rule evaluation
fails, and afterwards every device is served by exactly one worker. Then each panel query of the
committed dashboard (deploy/grafana/gpuattr.json), with Grafana's variables filled in as Grafana
would (all nodes, all namespaces, the run's range), returns data.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiokafka.partitioner import murmur2
from prometheus_client.parser import text_string_to_metric_families

from contract.records import replace
from gpuattr.localkafka import free_port
from sim.cluster import holds_at
from sim.scenario import Scenario, load, parse_slot
from tests.faults.harness import group_members
from tests.helpers import wait_for_async
from tests.integration.pipeline import pipeline
from tests.integration.test_prometheus import prometheus, query, query_range
from tests.unit.test_dashboard import PanelQuery, committed, queries, variables

pytestmark = pytest.mark.integration


def with_node_of(scenario: Scenario, other: str, node_name: str) -> Scenario:
    """``scenario`` plus one node of scenario ``other``, with its pods."""
    source = load(other)
    node = source.node(node_name)
    pods = tuple(p for p in source.pods if p.node == node.name)
    return replace(scenario, nodes=(*scenario.nodes, node), pods=(*scenario.pods, *pods))


#: beside the demo's mix, so that every dashboard panel has something to show: the accounting
#: scenario's node whose exporter does not answer (held GPUs without a reading), the tenants
#: scenario's node whose exporter prints per-pod rows (each tenant's measured use) and the
#: sick-gpu scenario's node whose kubelet writes device health into its holders' statuses
SCENARIO = with_node_of(
    with_node_of(with_node_of(load("mixed"), "accounting", "blind-node"), "tenants", "tenants-a"),
    "sick-gpu",
    "sick-a",
)
ALERTS = {
    "GPUATTR_ALERTS_IDLE_WINDOW_S": "2",
    "GPUATTR_ALERTS_COOLDOWN_S": "0",
    "GPUATTR_LOG_LEVEL": "info",
}


def device_count(scenario: Scenario) -> int:
    """GPUs, with a MIG-mode GPU counted as its instances (each a device of its own)."""
    return sum(
        len(n.mig.instances) if n.mig and gpu in n.mig.gpus else 1
        for n in scenario.nodes
        for gpu in range(n.gpus)
    )


def gpus_held(scenario: Scenario, t: float) -> dict[str, float]:
    """What the GPUs-held rule must give per workload (and MIG profile, MIG instances apart) at
    scenario time ``t``, worked out from the scenario itself: a replicated GPU's holder counts
    the replicas it holds over the GPU's replicas; a device handed out whole counts 1, split
    equally where several pods hold it."""
    pods = [p for p in scenario.pods if holds_at(p, t)]
    on: dict[tuple[str, int, int | None], dict[str, int]] = {}
    for pod in pods:
        for slot in map(parse_slot, pod.slots):
            held = on.setdefault((pod.node, slot.gpu, slot.gi), {})
            held[pod.name] = held.get(pod.name, 0) + 1
    by_name = {p.name: p for p in pods}
    held_by: dict[str, float] = {}
    for (node_name, gpu, gi), holders in on.items():
        node = scenario.node(node_name)
        replicas = node.replicas_of(gpu) if gi is None else 1
        profile = node.mig.profile if node.mig and gi is not None else ""
        for name, slots in holders.items():
            share = slots / replicas if replicas > 1 else 1 / len(holders)
            key = f"{by_name[name].workload_name} {profile}".strip()
            held_by[key] = held_by.get(key, 0.0) + share
    return held_by


def by_workload(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {
        f"{r['metric']['workload_name']} {r['metric'].get('mig_profile', '')}".strip(): float(
            r["value"][1]
        )
        for r in rows
    }


DEVICES = device_count(SCENARIO)
AT_S = 12.0  # every pod of the scenario placed but the rollout's last; scenario time stays put
HELD = gpus_held(SCENARIO, AT_S)
#: shares travel rounded to four places (a sixth is 0.1667): a workload's sum of two is off by
#: at most this much
ROUNDED = 2e-4


def grafana(expr: str, range_s: int) -> str:
    """The query as Grafana sends it with the dashboard's defaults: every node and namespace."""
    return (
        expr.replace("$node", ".*")
        .replace("$namespace", ".*")
        .replace("$__range", f"{range_s}s")
        .replace("$__rate_interval", "1m")
    )


async def served(session: aiohttp.ClientSession, base: str) -> dict[str, set[str]]:
    """Which worker (instance) serves which device, now."""
    rows = await query(session, base, "gpuattr_device_info")
    by: dict[str, set[str]] = {}
    for r in rows:
        m = r["metric"]
        by.setdefault(f"{m['node']}/{m['device_uuid']}", set()).add(m["instance"])
    return by


async def owners(session: aiohttp.ClientSession, targets: list[str]) -> dict[str, set[str]]:
    """Which worker serves which device, read from the workers' own /metrics (a worker that is
    down serves nothing)."""
    by: dict[str, set[str]] = {}
    for target in targets:
        try:
            async with session.get(f"http://{target}/metrics") as resp:
                assert resp.status == 200, f"{target}/metrics: {resp.status}"  # never a 500
                text = await resp.text()
        except aiohttp.ClientError:
            continue
        for family in text_string_to_metric_families(text):
            if family.name == "gpuattr_device_info":
                for s in family.samples:
                    key = f"{s.labels['node']}/{s.labels['device_uuid']}"
                    by.setdefault(key, set()).add(target)
    return by


async def partitions(session: aiohttp.ClientSession, target: str) -> set[int] | None:
    """The input partitions a worker owns (its /readyz), None while it is not ready."""
    try:
        async with session.get(f"http://{target}/readyz") as resp:
            body = await resp.json()
            return set(body["partitions"]) if resp.status == 200 else None
    except aiohttp.ClientError:
        return None


def node_partition(node: str, count: int) -> int:
    """Where the agents' producer puts a node's records (keyed by node; Kafka's murmur2)."""
    return (murmur2(node.encode()) & 0x7FFFFFFF) % count


async def rule_failures(session: aiohttp.ClientSession, base: str) -> float:
    async with session.get(f"{base}/metrics") as resp:
        text = await resp.text()
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        if f.name == "prometheus_rule_evaluation_failures"
        for s in f.samples
        if s.name.endswith("_total")
    )


async def test_series_move_cleanly_and_every_dashboard_query_returns_data(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    assert DEVICES == 20
    ports = [free_port(), free_port()]
    async with pipeline(
        kafka_bootstrap, SCENARIO, tmp_path, workers=2, web_ports=ports, worker_env=ALERTS
    ) as p:
        p.clock.offset_s = AT_S
        targets = [f"127.0.0.1:{port}" for port in ports]
        with prometheus(tmp_path, *targets) as base:
            async with aiohttp.ClientSession() as session:
                started = time.time()

                async def settled() -> dict[str, set[str]]:
                    """Every device served by one worker, and Prometheus has seen just that."""
                    by = await owners(session, targets)
                    once = len(by) == DEVICES and all(len(i) == 1 for i in by.values())
                    return by if once and await served(session, base) == by else {}

                before = await wait_for_async(
                    settled, timeout_s=120, what=lambda: f"all devices served\n{p.logs()}"
                )

                async def held() -> dict[str, float]:
                    got = await query(session, base, "namespace_workload:gpuattr_gpus_held:sum")
                    by = by_workload(got)
                    return by if by == pytest.approx(HELD, abs=ROUNDED) else {}

                await wait_for_async(held, timeout_s=60, what="every holder in GPUs held")
                steady_since = time.time()

                # the worker serving more devices goes away: its devices move to the other
                counts = {t: sum(t in i for i in before.values()) for t in targets}
                victim = max(targets, key=lambda t: counts[t])
                survivor = next(t for t in targets if t != victim)
                await p.workers[targets.index(victim)].stop()

                last: dict[str, set[str]] = {}

                async def moved() -> dict[str, set[str]]:
                    nonlocal last
                    last = await served(session, base)
                    on_survivor = all(i == {survivor} for i in last.values())
                    return last if len(last) == DEVICES and on_survivor else {}

                await wait_for_async(
                    moved,
                    timeout_s=120,
                    what=lambda: f"series on the survivor {survivor}: {last}\n{p.logs(60)}",
                )
                assert (
                    await query(session, base, f'gpuattr_device_info{{instance="{victim}"}}') == []
                )

                # and comes back: partitions are balanced again across two members
                await p.workers[targets.index(victim)].start()
                group = p.kafka.topic_prefix + "worker"

                async def rebalanced() -> dict[str, set[str]]:
                    """Two members, each ready and serving exactly the devices of the nodes on
                    the partitions it owns; Prometheus has seen just that."""
                    state, members = await group_members(p.kafka.bootstrap, group)
                    if (state, members) != ("Stable", 2):
                        return {}
                    owned = {t: await partitions(session, t) for t in targets}
                    by = await settled()
                    if not by or any(o is None for o in owned.values()):
                        return {}
                    count = p.kafka.partitions
                    for device, served_by in by.items():
                        part = node_partition(device.split("/")[0], count)
                        if not any(part in (owned[t] or set()) for t in served_by):
                            return {}
                    return by

                await wait_for_async(
                    rebalanced, timeout_s=120, what=lambda: f"two workers again\n{p.logs()}"
                )
                # from the steady state on, both hand-overs included: each device counted once
                window = f"[{int(time.time() - steady_since)}s:1s]"
                (most,) = await query(
                    session, base, f"max_over_time(gpuattr:devices:count{window})"
                )
                assert float(most["value"][1]) == DEVICES
                highest = by_workload(
                    await query(
                        session,
                        base,
                        f"max_over_time(namespace_workload:gpuattr_gpus_held:sum{window})",
                    )
                )
                assert highest == pytest.approx(HELD, abs=ROUNDED)
                assert await rule_failures(session, base) == 0

                # the exporter's labels, judged: MPS stamps one tenant (gpu-c), the renamed
                # time-slicing resource leaves its rows without a pod (gpu-b)
                async def misattributed() -> set[str]:
                    got = await query(
                        session, base, "verdict:gpuattr_devices_exporter_misattributed:count"
                    )
                    verdicts = {r["metric"]["verdict"] for r in got}
                    return verdicts if {"shared-device", "uncredited"} <= verdicts else set()

                # (the rule's next evaluation after the hand-over sees the devices again)
                await wait_for_async(misattributed, timeout_s=30, what="misattribution counts")

                # every query of the committed dashboard returns data, once the GPU-hours rule
                # has integrated a 15 s step of every holder
                async def integrated() -> bool:
                    got = await query(session, base, "namespace_workload:gpuattr_gpu_hours_held:1h")
                    return len(got) == len(HELD)

                await wait_for_async(integrated, timeout_s=60, what="GPU-hours of every holder")
                elapsed = int(time.time() - started) + 1
                dashboard = committed()
                for name, label_query in variables(dashboard).items():
                    metric, label = (
                        label_query.removeprefix("label_values(").rstrip(")").split(", ")
                    )
                    values = await _label_values(session, base, label, metric)
                    assert values, f"variable {name}: {label_query} has no values"
                for q in queries(dashboard):
                    expr = grafana(q.expr, elapsed)

                    async def answered(q: PanelQuery = q, expr: str = expr) -> bool:
                        if q.instant:
                            return bool(await query(session, base, expr))
                        return bool(await query_range(session, base, expr, started, time.time()))

                    # a recording rule's first sample may land after a range's last step
                    await wait_for_async(answered, timeout_s=30, what=f"{q.panel}/{q.ref}: {expr}")


async def _label_values(
    session: aiohttp.ClientSession, base: str, label: str, metric: str
) -> list[Any]:
    async with session.get(
        f"{base}/api/v1/label/{label}/values", params={"match[]": metric}
    ) as resp:
        body = await resp.json()
    assert body["status"] == "success", body
    values: list[Any] = body["data"]
    return values
