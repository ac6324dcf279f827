"""A real Prometheus (Debian's package) scrapes a running pipeline's worker and evaluates the
shipped rules: PromQL returns the shared device's holders with their UIDs, no per-pod usage
series exists, and the GPUs-held recording rule splits the shared GPU by tenants."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from gpuattr.localkafka import free_port
from sim.scenario import gpu_uuid, load
from tests.helpers import wait_for_async
from tests.integration.pipeline import pipeline
from tests.unit.test_prometheus_rules import rules_file

pytestmark = pytest.mark.integration

SCENARIO = load("mps-lab")
NODE = SCENARIO.nodes[0].name
SHARED = gpu_uuid(NODE, 0)


@contextlib.contextmanager
def prometheus(workdir: Path, target: str) -> Iterator[str]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus is required (Debian's prometheus package; .ci/run installs it)"
    port = free_port()
    rules = rules_file(workdir)
    config = workdir / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules)],
                "scrape_configs": [
                    {"job_name": "gpuattr-worker", "static_configs": [{"targets": [target]}]}
                ],
            }
        )
    )
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def query(session: aiohttp.ClientSession, base: str, promql: str) -> list[dict[str, Any]]:
    try:
        async with session.get(f"{base}/api/v1/query", params={"query": promql}) as resp:
            if resp.status != 200:
                return []
            body = await resp.json()
    except aiohttp.ClientError:
        return []
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


@contextlib.asynccontextmanager
async def scraped(
    tmp_path: Path, bootstrap: str
) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    port = free_port()
    env = {"GPUATTR_WORKER_WEB_ENABLED": "true", "GPUATTR_WORKER_WEB_PORT": str(port)}
    async with pipeline(bootstrap, SCENARIO, tmp_path, worker_env=env) as p:
        p.clock.offset_s = 20.0
        with prometheus(tmp_path, f"127.0.0.1:{port}") as base:
            async with aiohttp.ClientSession() as session:
                yield session, base


async def test_promql_on_the_attribution_series(kafka_bootstrap: str, tmp_path: Path) -> None:
    uids = {p.name: p.uid for p in SCENARIO.pods}
    async with scraped(tmp_path, kafka_bootstrap) as (session, base):

        async def holders() -> list[dict[str, Any]]:
            got = await query(
                session, base, f'gpuattr_device_holder_info{{device_uuid="{SHARED}"}}'
            )
            return got if len(got) == len(uids) else []

        series = await wait_for_async(holders, timeout_s=90, what="the shared GPU's holders")
        assert {s["metric"]["pod"]: s["metric"]["pod_uid"] for s in series} == uids

        # no usage series names a pod: usage is the device's
        per_pod = await query(
            session,
            base,
            '{__name__=~"gpuattr_device_(utilization_ratio|memory_used_bytes)", pod!=""}',
        )
        assert per_pod == []
        util = await query(
            session, base, f'gpuattr_device_utilization_ratio{{device_uuid="{SHARED}"}}'
        )
        assert [s["metric"]["scope"] for s in util] == ["device"]

        async def held() -> list[dict[str, Any]]:
            got = await query(session, base, "namespace_workload:gpuattr_gpus_held:sum")
            return got if len(got) == len(uids) else []

        rows = await wait_for_async(held, timeout_s=60, what="the GPUs-held recording rule")
        assert {r["metric"]["workload_name"]: float(r["value"][1]) for r in rows} == {
            p.workload_name: 0.25 for p in SCENARIO.pods
        }
        funnel = await query(session, base, "gpuattr:devices_allocated:count")
        assert [float(r["value"][1]) for r in funnel] == [1.0]
