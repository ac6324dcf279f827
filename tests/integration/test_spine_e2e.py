"""The allocation spine end to end on the real local Kafka: agents (finding their node's exporter
pod through the API server's pod watch), the cluster role (node deletions, partition clocks) and
a worker, on the accounting scenario with the spine's clock shortened (a 2 s heartbeat, stale
after 6 s, gone after 12 s).

- blind-node's exporter pod does not answer: every held GPU is in (nearly) every heartbeat with
  every holder and UID, usage unknown with the reason; the report counts its GPU-hours held; no
  idle alert;
- ts-acct's agent is pointed at dra-acct's exporter: nothing of dra-acct's appears as ts-acct's;
  ts-acct's own held GPUs are still reported; the refusal is counted and flagged;
- a node deleted (its agent gone with it) and a node merely silent leave /metrics, the query API
  and the tables.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from contract.outputs import Alert, AttributionEvent, TelemetryRefused
from contract.records import replace
from gpuattr.localkafka.broker import free_port
from gpuattr.report import accumulate
from sim.runner import SimulatedCluster
from sim.scenario import gpu_uuid, load
from tests.helpers import wait_for, wait_for_async
from tests.integration.pipeline import API_AUTH, Collected, collect, pipeline

pytestmark = pytest.mark.integration

SCENARIO = load("accounting")
FAST_SPINE = {
    "GPUATTR_SPINE_HEARTBEAT_S": "2",
    "GPUATTR_SPINE_STALE_AFTER_S": "6",
    "GPUATTR_SPINE_NODE_TTL_S": "12",
}
AGENTS = {"GPUATTR_AGENT_STATUS_INTERVAL_S": "0.5"}
UIDS = {f"{p.namespace}/{p.name}": p.uid for p in SCENARIO.pods}


def of(events: Collected, node: str, origin: str | None = None) -> list[AttributionEvent]:
    return [
        e
        for e in events.records
        if isinstance(e, AttributionEvent)
        and e.node == node
        and (origin is None or e.origin == origin)
    ]


async def get(url: str) -> bytes:
    async with aiohttp.ClientSession() as session, session.get(url, headers=API_AUTH) as resp:
        assert resp.status == 200, url
        return await resp.read()


def series(text: bytes) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            out[s.name].append((s.labels, s.value))
    return out


async def test_a_node_whose_exporter_does_not_answer_reports_every_held_gpu(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    node = "blind-node"
    held = {
        gpu_uuid(node, 0): {"ml/trainer-0"},
        gpu_uuid(node, 1): {"inference/mps-a-0", "inference/mps-b-0"},
    }
    async with (
        pipeline(
            kafka_bootstrap,
            SCENARIO,
            tmp_path,
            worker_env=FAST_SPINE,
            agent_env=AGENTS,
            tick_s=0.5,
        ) as p,
        collect(p.kafka, "attribution") as events,
        collect(p.kafka, "alerts") as alerts,
    ):
        p.clock.offset_s = 10.0  # every pod holds its GPUs

        def beats() -> dict[int, dict[str, AttributionEvent]]:
            out: dict[int, dict[str, AttributionEvent]] = defaultdict(dict)
            for e in of(events, node, "heartbeat"):
                out[e.ts_ms][e.device_uuid] = e
            return out

        await wait_for(lambda: len(beats()) >= 22, timeout_s=120, what=p.logs)
        by_beat = beats()
        after_warmup = sorted(by_beat)[2:]
        complete = 0
        for ts in after_warmup:
            devices = by_beat[ts]
            reported = {
                uuid: {f"{h.namespace}/{h.pod}" for h in e.holders} for uuid, e in devices.items()
            }
            if reported != held:
                continue
            for e in devices.values():
                assert e.telemetry.status == "unknown"
                assert e.telemetry.cause == "exporter-unreachable", e.telemetry
                assert "connect" in (e.telemetry.reason or "").lower() or e.telemetry.reason
                assert e.usage.util_pct is None
                for h in e.holders:
                    assert h.uid == UIDS[f"{h.namespace}/{h.pod}"]
            complete += 1
        print(f"\nblind-node: {complete} of {len(after_warmup)} heartbeats after warm-up complete")
        assert complete >= 0.99 * len(after_warmup), (complete, len(after_warmup))
        # the report counts its GPU-hours held from allocation alone
        lines = accumulate(of(events, node), max_gap_s=4, idle_threshold_pct=5)
        trainer = next(x for x in lines if x.workload == "StatefulSet/trainer")
        span_s = (max(by_beat) - min(by_beat)) / 1000
        assert trainer.held_gpu_hours * 3600 >= 0.9 * span_s
        assert trainer.unmeasured_held_gpu_hours == pytest.approx(trainer.held_gpu_hours)
        assert trainer.busy_gpu_hours is None
        # and nothing calls it idle
        assert not [a for a in alerts.records if isinstance(a, Alert) and a.node == node]


async def test_another_nodes_exporter_is_refused_flagged_and_counted(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """ts-acct's agent scrapes dra-acct's exporter (what a cluster-routed Service can do)."""
    port = free_port()

    def misrouted(sim: SimulatedCluster) -> dict[str, dict[str, str]]:
        wrong = sim.exporters["dra-acct"].url
        return {"ts-acct": {"GPUATTR_DCGM_DISCOVER": "false", "GPUATTR_DCGM_URL": wrong}}

    async with (
        pipeline(
            kafka_bootstrap,
            SCENARIO,
            tmp_path,
            worker_env=FAST_SPINE,
            agent_env=AGENTS,
            agent_env_for=misrouted,
            web_ports=[port],
            tick_s=0.5,
        ) as p,
        collect(p.kafka, "attribution") as events,
        collect(p.kafka, "flags") as flags,
        collect(p.kafka, "alerts") as alerts,
    ):
        p.clock.offset_s = 10.0
        others = {gpu_uuid("dra-acct", i) for i in range(2)}
        own = {gpu_uuid("ts-acct", i) for i in range(2)}

        def refusals() -> list[TelemetryRefused]:
            return [
                r for r in flags.records if isinstance(r, TelemetryRefused) and r.node == "ts-acct"
            ]

        await wait_for(lambda: len(refusals()) >= 10, timeout_s=120, what=p.logs)
        await wait_for(
            lambda: {e.device_uuid for e in of(events, "ts-acct", "heartbeat")} >= own,
            timeout_s=60,
            what=p.logs,
        )
        assert {r.cause for r in refusals()} == {"hostname"}
        assert all(set(r.uuids) == others and "dra-acct" in r.reason for r in refusals())
        # nothing of dra-acct's appears as ts-acct's, anywhere
        assert not [e for e in of(events, "ts-acct") if e.gpu_uuid in others]
        assert not [
            a
            for a in alerts.records
            if isinstance(a, Alert) and a.gpu_uuid in others and a.node == "ts-acct"
        ]
        # ts-acct's own held GPUs: in the stream, with their holders, usage unknown and why
        beats = of(events, "ts-acct", "heartbeat")
        held = {e.device_uuid: e for e in beats if e.holders}
        assert set(held) == own
        assert {e.telemetry.cause for e in held.values()} == {"scrape-refused"}
        assert all("Hostname" in (e.telemetry.reason or "") for e in held.values())
        assert {h.pod for h in held[gpu_uuid("ts-acct", 1)].holders} == {"pair-0"}
        # counted by the worker
        metrics = series(await get(f"http://127.0.0.1:{port}/metrics"))
        counted = {
            labels["cause"]: value
            for labels, value in metrics["gpuattr_worker_scrapes_refused_total"]
        }
        print(
            f"\nts-acct: {len(refusals())} refusals flagged, {counted} counted; own held GPUs "
            f"in {len(beats)} heartbeat events, 0 of dra-acct's GPUs in its events"
        )
        assert counted.get("hostname", 0) >= 10


async def test_a_node_deleted_and_a_node_silent_leave_every_view_and_table(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deleted, silent = "ts-acct", "blind-node"
    scenario = replace(
        SCENARIO,
        nodes=tuple(replace(n, deleted_s=20.0) if n.name == deleted else n for n in SCENARIO.nodes),
    )
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with (
        pipeline(
            kafka_bootstrap,
            scenario,
            tmp_path,
            worker_env=FAST_SPINE,
            agent_env=AGENTS,
            web_ports=[port],
            tick_s=0.5,
        ) as p,
        collect(p.kafka, "attribution") as events,
    ):
        p.clock.offset_s = 10.0

        async def devices(node: str) -> list[dict[str, object]]:
            body = orjson.loads(await get(f"{base}/api/v1/nodes/{node}"))
            return list(body["devices"])

        async def table_keys() -> dict[str, float]:
            metrics = series(await get(f"{base}/metrics"))
            return {ls["table"]: v for ls, v in metrics["gpuattr_worker_table_keys"]}

        async def nodes_on_metrics() -> set[str]:
            metrics = series(await get(f"{base}/metrics"))
            return {ls["node"] for ls, _ in metrics["gpuattr_device_info"]}

        async def all_three() -> bool:
            try:
                keys = await table_keys()
            except aiohttp.ClientError:  # the worker's web server is not up yet
                return False
            return (
                await nodes_on_metrics() == {"ts-acct", "dra-acct", "blind-node"}
                and keys.get("node_state") == 3
            )

        await wait_for_async(all_three, timeout_s=120, what=p.logs)
        before = await table_keys()
        assert len(await devices(deleted)) == 2
        assert before["slot_holders"] >= 6
        assert before["pods"] >= 7
        # the node leaves the cluster (its agent with it); the other merely falls silent
        p.clock.offset_s = 25.0
        await p.agent(deleted).stop()
        await p.agent(silent).stop()
        await wait_for(
            lambda: (
                {e.device_uuid for e in of(events, deleted, "gone")}
                == {gpu_uuid(deleted, i) for i in range(2)}
            ),
            timeout_s=60,
            what=p.logs,
        )
        await wait_for(lambda: of(events, silent, "stale"), timeout_s=60, what=p.logs)
        await wait_for(
            lambda: (
                {e.device_uuid for e in of(events, silent, "gone")}
                == {gpu_uuid(silent, i) for i in range(2)}
            ),
            timeout_s=60,
            what=p.logs,
        )

        async def left() -> bool:
            keys = await table_keys()
            return await nodes_on_metrics() == {"dra-acct"} and keys.get("node_state") == 1

        await wait_for_async(left, timeout_s=60, what=p.logs)
        after = await table_keys()
        print(f"\ntable keys before: {before}\ntable keys after:  {after}")
        assert await devices(deleted) == []
        assert await devices(silent) == []
        for table in ("node_devices", "inventories", "node_pods", "nodes", "node_state"):
            assert after[table] == before[table] - 2, (table, before, after)
        # what is left is the one live node's: its holders, pods and claims
        assert after["slot_holders"] == 2  # dra-acct's two claimed devices
        assert after["pods"] == 2  # claimer-0 and twin-0
        assert after["alert_state"] <= 2
        assert after["dra_claims"] == before["dra_claims"]
