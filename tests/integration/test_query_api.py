"""The query API on two real workers: only callers with the token are answered, routing to the
key's owner, cluster-wide gathering (peers send their token), and ``gpuattr top --once --json``
(with ``--token-file``) equal to the state behind it."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from contract.outputs import AttributionEvent
from gpuattr.localkafka.broker import free_port
from gpuattr.procs import Child, settings_env
from sim.cluster import Cluster
from sim.scenario import load
from streams.present.views import device_row
from tests.helpers import wait_for, wait_for_async
from tests.integration.pipeline import API_AUTH, API_TOKEN, collect, pipeline

pytestmark = pytest.mark.integration

#: what a row shares with the event behind it (idle and alerts come from the alert table)
SAME = (
    "node",
    "device_uuid",
    "state",
    "sharing",
    "tenant_count",
    "holders",
    "util_pct",
    "ts_ms",
    "busy_pct",
    "effective_pct",
    "effective_reason",
    "work",
    "health_marks",
)


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    try:
        async with session.get(url) as resp:
            return resp.status, orjson.loads(await resp.read())
    except (aiohttp.ClientError, orjson.JSONDecodeError):
        return 0, None


async def test_api_routes_gathers_and_top_matches_state(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    scenario = load("mixed")
    t = 20.0
    cluster = Cluster(scenario, lambda: t)
    expected_rows = sum(len(list(cluster.exporter_rows(n.name, 0))) for n in scenario.nodes)
    nodes = {n.name for n in scenario.nodes}
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    async with (
        pipeline(kafka_bootstrap, scenario, tmp_path, workers=2, web_ports=ports) as p,
        collect(p.kafka, "attribution") as events,
        aiohttp.ClientSession(headers=API_AUTH) as session,
        aiohttp.ClientSession() as stranger,
    ):
        p.clock.offset_s = t

        async def both_workers_serve_everything() -> dict[str, Any] | None:
            locals_ = [await get(session, f"{u}/api/v1/local/devices") for u in urls]
            if any(status != 200 or not body["partitions"] for status, body in locals_):
                return None  # both must own partitions
            status, body = await get(session, f"{urls[0]}/api/v1/devices")
            if status != 200 or body["unavailable"] or len(body["workers"]) != 2:
                return None
            rows = body["devices"]
            known = [r for r in rows if r["state"] != "unknown" and r["sharing"] != "unknown"]
            complete = {r["node"] for r in known} == nodes and len(known) == expected_rows
            return body if complete else None

        await wait_for_async(
            both_workers_serve_everything, timeout_s=120, what="both workers serving all devices"
        )

        # Without the token, or with another, nothing is listed; the probes need none.
        wrong = {"Authorization": "Bearer another-token-0123456789abcdef"}
        for u in urls:
            for path in ("/api/v1/devices", "/api/v1/local/devices", f"/api/v1/nodes/{min(nodes)}"):
                for headers in ({}, wrong):
                    async with stranger.get(f"{u}{path}", headers=headers) as resp:
                        assert resp.status == 401, (u, path, headers)
                        assert "devices" not in orjson.loads(await resp.read())
            for path in ("/healthz", "/readyz", "/metrics"):
                async with stranger.get(f"{u}{path}") as resp:
                    assert resp.status == 200, (u, path)

        # Every node, asked of the worker that does NOT own it, is answered by its owner.
        owners: dict[str, str] = {}
        for u in urls:
            _, body = await get(session, f"{u}/api/v1/local/devices")
            owners.update({r["node"]: body["worker"] for r in body["devices"]})
        assert set(owners) == nodes
        for node, owner in owners.items():
            elsewhere = next(u for u in urls if u != owner)
            status, body = await get(session, f"{elsewhere}/api/v1/nodes/{node}")
            assert status == 200, body
            assert body["worker"] == owner  # routed by Faust to the owner of the key
            assert body["labels"]["nvidia.com/gpu.product"]
            assert body["devices"]
            assert {r["node"] for r in body["devices"]} == {node}
            # its GPU stack, answered by the owner too: no GPU Operator manages the scenario's
            # nodes (no deploy label, no ClusterPolicy), so no status and no alert — not a 404
            status, stack = await get(session, f"{elsewhere}/api/v1/nodes/{node}/status")
            assert status == 200, stack
            assert (stack["node"], stack["worker"]) == (node, owner)
            assert (stack["status"], stack["alert"]) == (None, None)

        # Filters: namespace, workload, sharing; the shared MPS GPU lists all its tenants.
        _, ns = await get(session, f"{urls[1]}/api/v1/namespaces/serving")
        assert ns["count"] >= 1
        assert all(any(h["namespace"] == "serving" for h in r["holders"]) for r in ns["devices"])
        _, wl = await get(session, f"{urls[1]}/api/v1/workloads/ml/Deployment/train-llama")
        assert wl["count"] >= 1
        _, mps = await get(session, f"{urls[0]}/api/v1/devices?sharing=mps&sort=tenants")
        top_mps = mps["devices"][0]
        assert top_mps["state"] == "shared"
        assert top_mps["tenant_count"] == 3
        assert {h["pod"] for h in top_mps["holders"]} == {
            "asr-5c7d9f8b6-q1w2e",
            "asr-5c7d9f8b6-r3t4y",
            "tts-6d8e7f9c5-u5i6o",
        }
        assert top_mps["usage_scope"] == "device"  # one device-wide figure, no per-pod usage
        status, bad = await get(session, f"{urls[0]}/api/v1/devices?sort=nonsense")
        assert status == 400
        assert "sort by" in bad["error"]

        # top --once --json, through the CLI, equals the latest event of each device.
        token_file = tmp_path / "api-token"
        token_file.write_text(API_TOKEN)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUATTR_API_")}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gpuattr.cli",
            "top",
            "--url",
            urls[1],
            "--once",
            "--json",
            "--token-file",
            str(token_file),
            stdout=asyncio.subprocess.PIPE,
            env={**env, "PYTHONPATH": str(Path(__file__).parents[2])},
        )
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
        assert proc.returncode == 0
        shown = orjson.loads(out)["devices"]

        def seen_all() -> bool:
            stamps = {(e.device_uuid, e.ts_ms) for e in events.records if hasattr(e, "ts_ms")}
            return all((r["device_uuid"], r["ts_ms"]) in stamps for r in shown)

        await wait_for(seen_all, timeout_s=30, what="the shown events on the topic")
        by_stamp = {
            (e.device_uuid, e.ts_ms): e for e in events.records if isinstance(e, AttributionEvent)
        }
        for row in shown:
            expected = orjson.loads(
                orjson.dumps(device_row(by_stamp[row["device_uuid"], row["ts_ms"]], None))
            )
            assert {k: row[k] for k in SAME} == {k: expected[k] for k in SAME}
            if row["state"] == "shared":
                assert "util_pct" not in str(row["holders"])  # no per-pod usage anywhere


@dataclass
class Listener:
    """A TCP listener the test owns: counts every connection anything makes to it."""

    connections: int = 0

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.close()


async def test_a_member_advertising_a_foreign_address_is_never_called(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A group member that writes ``http://127.0.0.1:<port of a listener the test owns>`` into
    the group's metadata (here: a real worker advertising that address) takes partitions; the
    query API names it as unverified, answers 503 for the nodes it owns — and never connects to
    it, whatever is asked. Faust's own views are not served."""
    listener = Listener()
    server = await asyncio.start_server(listener.accept, "127.0.0.1", 0)
    trap = server.sockets[0].getsockname()[1]
    trap_url = f"http://127.0.0.1:{trap}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    nodes = {n.name for n in load("mixed").nodes}
    try:
        async with (
            pipeline(kafka_bootstrap, load("mixed"), tmp_path, workers=1, web_ports=[port]) as p,
            aiohttp.ClientSession(headers=API_AUTH) as session,
        ):
            rogue_env = {
                **p.worker_child(0).env,
                **settings_env(
                    WORKER_DATA_DIR=tmp_path / "rogue",
                    WORKER_WEB_ENABLED="false",  # it serves nothing: it only advertises
                    WORKER_ADVERTISED_HOST="127.0.0.1",
                    WORKER_WEB_PORT=trap,
                ),
            }
            rogue = Child("rogue", ["worker"], rogue_env, tmp_path / "rogue.log")
            await rogue.start()
            try:

                async def rogue_owns_partitions() -> dict[str, Any] | None:
                    status, body = await get(session, f"{url}/api/v1/devices")
                    seen = status == 200 and body["unverified"] == [trap_url]
                    return body if seen and body["workers"] == [url] else None

                await wait_for_async(
                    rogue_owns_partitions, timeout_s=120, what=lambda: f"the rogue\n{p.logs()}"
                )
                # the scenario's nodes and made-up ones (a node's owner is its key's partition):
                # some land on the rogue's partitions
                answered: dict[str, int] = {}
                for node in [*sorted(nodes), *(f"node-{i}" for i in range(40))]:
                    status, body = await get(session, f"{url}/api/v1/nodes/{node}")
                    answered[node] = status
                    if status == 503:
                        assert body["unverified"] == [trap_url], body
                assert 503 in answered.values(), answered  # the rogue owns some nodes
                assert 200 in answered.values(), answered  # and the worker the others
                for path in ("/api/v1/devices", "/api/v1/alerts", "/api/v1/namespaces/ml"):
                    status, body = await get(session, f"{url}{path}")
                    assert status == 200
                    assert body["unverified"] == [trap_url]
                # Faust's views (tables, routing, topology) are off
                for path in ("/table/", "/table/nodes/", "/router/", "/graph/", "/assignment/"):
                    async with session.get(f"{url}{path}") as resp:
                        assert resp.status == 404, path
            finally:
                await rogue.stop()
        assert listener.connections == 0
    finally:
        server.close()
        await server.wait_closed()
