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
def prometheus(workdir: Path, *targets: str) -> Iterator[str]:
    """Debian's Prometheus scraping ``targets`` every second with the shipped rules, evaluated
    every second too (the groups' own intervals dropped: no expression depends on them)."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is required (Debian's prometheus package; .ci/run installs it)"
    port = free_port()
    rules = rules_file(workdir, every_evaluation=True)
    config = workdir / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules)],
                "scrape_configs": [
                    {"job_name": "gpuattr-worker", "static_configs": [{"targets": list(targets)}]}
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


async def query(
    session: aiohttp.ClientSession, base: str, promql: str, **params: str
) -> list[dict[str, Any]]:
    """An instant query (``time=`` in params to pin it); [] while Prometheus is not up yet."""
    return await _api(session, f"{base}/api/v1/query", {"query": promql, **params})


async def query_range(
    session: aiohttp.ClientSession, base: str, promql: str, start: float, end: float
) -> list[dict[str, Any]]:
    params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "1s"}
    return await _api(session, f"{base}/api/v1/query_range", params)


async def _api(session: aiohttp.ClientSession, url: str, params: dict[str, str]) -> list[Any]:
    try:
        async with session.get(url, params=params) as resp:
            if resp.status == 503:
                return []  # starting: not ready for queries yet
            body = await resp.json(content_type=None)
    except aiohttp.ClientError:
        return []  # not listening yet
    assert body["status"] == "success", body  # a bad query is a failure, not "no data"
    result: list[Any] = body["data"]["result"] if "result" in body["data"] else body["data"]
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

        # GPU-hours held in the trailing hour: each workload's quarter GPU, integrated at 15 s
        # steps. Pinned to the rule's own evaluation time, it equals the steps seen * 0.25 / 240
        # (two steps at least, so the first GPUs-held sample was long written when it ran).
        async def hours() -> list[tuple[float, float]]:
            stamps = await query(
                session, base, "timestamp(namespace_workload:gpuattr_gpu_hours_held:1h)"
            )
            got = []
            for stamp in stamps:
                workload = f'workload_name="{stamp["metric"]["workload_name"]}"'
                at = stamp["value"][1]
                (value,) = await query(
                    session,
                    base,
                    f"namespace_workload:gpuattr_gpu_hours_held:1h{{{workload}}}",
                    time=at,
                )
                (steps,) = await query(
                    session,
                    base,
                    "count_over_time("
                    f"namespace_workload:gpuattr_gpus_held:sum{{{workload}}}[1h:15s])",
                    time=at,
                )
                got.append((float(value["value"][1]), float(steps["value"][1])))
            return got if len(got) == len(uids) and all(n >= 2 for _, n in got) else []

        integrated = await wait_for_async(hours, timeout_s=90, what="two steps of GPU-hours")
        for held, steps in integrated:
            assert held == pytest.approx(steps * 0.25 / 240, rel=1e-12)
