"""``gpuattr demo --scenario dra-stack --json``: the GPU Operator's DRA stack under its GPUCluster,
end to end (the API-server double serving the GPUCluster and the DRA operands' pods, real Kafka,
agent, cluster role, worker), as a user runs it:

- dra-a's ``node-status`` is ready (once its inputs have arrived) while the DRA driver's
  kubelet plugin runs, then broken at the DRA driver once it crash loops, with the GPUCluster's
  own word (notReady, waiting on operand pods) and its intent (DCGM off by the controller's
  default, the host's driver);
- a ``stack-broken`` alert names dra-a's holders with their UIDs;
- dra-b stays ready; the DRA stack's dcgm-exporter (``nvidia-dcgm-exporter-dra``) is found and
  trusted on both nodes: their held GPUs' usage is measured.
"""

from __future__ import annotations

from typing import Any

import pytest

from sim.scenario import gpu_uuid, load
from tests.contract import assert_valid
from tests.integration.demo_run import Records, demo

pytestmark = pytest.mark.integration

SCENARIO = load("dra-stack")
HOLDERS = {(p.namespace, p.name, p.uid) for p in SCENARIO.pods if p.node == "dra-a"}
SPEED = 3.0  # the plugin crash loops from 10 s of wall time


def statuses(records: Records, node: str) -> Records:
    return [r for r in records if r["schema"] == "node-status" and r["node"] == node]


def broken_at_dra_driver(records: Records) -> dict[str, Any] | None:
    found = [s for s in statuses(records, "dra-a") if s["first_broken"] == "dra-driver"]
    return found[0] if found else None


def stack_alert(records: Records) -> dict[str, Any] | None:
    found = [r for r in records if r["schema"] == "alert" and r["kind"] == "stack-broken"]
    return found[0] if found else None


def measured(records: Records, node: str) -> bool:
    return any(
        r["schema"] == "attribution"
        and r["node"] == node
        and r["pods"]
        and r["usage"]["util_pct"] is not None
        for r in records
    )


async def test_dra_stack_demo_judges_the_dra_nodes_under_the_gpucluster(
    kafka_bootstrap: str,
) -> None:
    async with demo(kafka_bootstrap, "dra-stack", speed=SPEED, duration_s=240) as run:
        broken = await run.until(broken_at_dra_driver, 150)
        alert = await run.until(stack_alert, 60)
        await run.until(lambda r: measured(r, "dra-a") and measured(r, "dra-b"), 60)
    assert run.proc.returncode == 0, run.told()
    for record in run.records:  # the consumer contract holds for real output
        assert_valid(record)

    assert broken["state"] == "broken"
    assert broken["summary"].startswith("DRA driver not ready on dra-a (CrashLoopBackOff")
    assert broken["policy"]["kind"] == "GPUCluster"
    assert (broken["policy"]["state"], broken["policy"]["ready"]) == ("notReady", False)
    planes = {p["name"]: p for p in broken["planes"]}
    assert (planes["dcgm"]["state"], planes["dcgm"]["intent"]["decided_by"]) == (
        "disabled",
        "operator-default",
    )
    assert planes["driver"]["intent"]["kind"] == "host"
    assert planes["dcgm-exporter"]["state"] == "ready"
    said = [s["state"] for s in statuses(run.records, "dra-a")]
    # the plugin ran until 30 s of scenario time (before the inputs all arrived: unknown)
    assert "ready" in said[: said.index("broken")], said

    assert {(h["namespace"], h["pod"], h["uid"]) for h in alert["holders"]} == HOLDERS
    assert alert["node"] == "dra-a"
    said_b = [(s["state"], s["summary"]) for s in statuses(run.records, "dra-b")]
    assert said_b[-1][0] == "ready", said_b
    assert "broken" not in {state for state, _ in said_b}, said_b
    held = {r["gpu_uuid"] for r in run.records if r["schema"] == "attribution" and r["pods"]}
    assert {gpu_uuid("dra-a", 0), gpu_uuid("dra-a", 1), gpu_uuid("dra-b", 0)} <= held
