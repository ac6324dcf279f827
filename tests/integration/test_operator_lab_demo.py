"""``gpuattr demo --scenario operator-lab --json``: the GPU Operator's lab end to end (simulated
cluster, real Kafka, agents, cluster role, worker), as a user runs it. Its stdout carries the
node-status records (``schema: node-status``) beside attribution events and alerts; the test
reads it while the demo runs, waits (bounded) until every node's story has been told, then
stops the demo with SIGTERM (it cleans up and exits 0):

- lab-a (the seed's lab): the container toolkit is the first broken boundary, the device plugin,
  dcgm-exporter, GFD and the validator wait on it — one boundary, not four operands;
- lab-b: dcgm-exporter off by its deploy label: each held GPU in the attribution events with its
  holders and "disabled by intent"; its stack says the exporter is off on purpose;
- lab-c: broken at dcgm-exporter (CrashLoopBackOff, with restarts), then ready;
- lab-d: MIG reconciling (pending), then broken at the MIG manager (failed).

The ClusterPolicy (standalone DCGM off, among others) reaches the worker through the cluster
role's watcher (``agents.kube.policywatch``), which reads it from the simulated API server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.contract import assert_valid
from tests.integration.demo_run import Records, demo

pytestmark = pytest.mark.integration

TOOLKIT_BLOCKS = {"device-plugin", "dcgm-exporter", "gpu-feature-discovery", "operator-validator"}
HELD_ON_B = {("serving", "chat-7c9f8d6b5-x2k4p"), ("serving", "chat-7c9f8d6b5-m8q7r")}


def statuses(records: list[dict[str, Any]], node: str) -> list[dict[str, Any]]:
    return [r for r in records if r["schema"] == "node-status" and r["node"] == node]


def toolkit_is_the_boundary(records: list[dict[str, Any]]) -> bool:
    return any(
        s["state"] == "broken"
        and s["first_broken"] == "container-toolkit"
        and set(s["blocked"]) == TOOLKIT_BLOCKS
        for s in statuses(records, "lab-a")
    )


def disabled_by_intent(records: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """The holders of lab-b's GPUs seen in events whose usage is unknown "disabled by intent"."""
    return {
        (h["namespace"], h["pod"])
        for e in records
        if e["schema"] == "attribution" and e["node"] == "lab-b" and e["holders"]
        if "disabled by intent" in ((e.get("telemetry") or {}).get("reason") or "")
        for h in e["holders"]
    }


def exporter_off_on_purpose(records: list[dict[str, Any]]) -> bool:
    return any(
        s["state"] == "ready"
        and s["telemetry_disabled"]
        and "nvidia.com/gpu.deploy.dcgm-exporter=false" in (s["telemetry_reason"] or "")
        for s in statuses(records, "lab-b")
    )


def in_order(seq: list[dict[str, Any]], *checks: Any) -> bool:
    """Each check holds for some status, each after the one before."""
    it: Iterator[dict[str, Any]] = iter(seq)
    return all(any(check(s) for s in it) for check in checks)


def crashloop_then_ready(records: list[dict[str, Any]]) -> bool:
    return in_order(
        statuses(records, "lab-c"),
        lambda s: s["first_broken"] == "dcgm-exporter" and "restarts" in s["summary"],
        lambda s: s["state"] == "ready",
    )


def mig_pending_then_failed(records: list[dict[str, Any]]) -> bool:
    return in_order(
        statuses(records, "lab-d"),
        lambda s: s["state"] == "reconciling" and s["mig"]["state"] == "pending",
        lambda s: (
            s["state"] == "broken"
            and s["first_broken"] == "mig-manager"
            and s["mig"]["state"] == "failed"
        ),
    )


def node_statuses_said(records: Records) -> str:
    said = [(s["node"], s["state"], s["summary"]) for s in records if s["schema"] == "node-status"]
    return f"node statuses: {said}"


async def test_operator_lab_demo_tells_each_nodes_stack(kafka_bootstrap: str) -> None:
    # an upper bound: the test stops it once every story has been told
    async with demo(
        kafka_bootstrap, "operator-lab", duration_s=400, said=node_statuses_said
    ) as run:
        await run.until(toolkit_is_the_boundary, 180)
        await run.until(exporter_off_on_purpose, 60)
        await run.until(lambda r: disabled_by_intent(r) >= HELD_ON_B, 60)
        await run.until(crashloop_then_ready, 240)  # ready from 105 s of scenario time
        await run.until(mig_pending_then_failed, 240)  # failed from 120 s
    records = run.records
    assert run.proc.returncode == 0, run.told()

    for record in records:  # the consumer contract holds for real output, node-status included
        assert_valid(record)
    schemas = {r["schema"] for r in records}
    assert {"attribution", "node-status"} <= schemas
    # the nodes the operator manages, and only those, have a stack
    assert {r["node"] for r in records if r["schema"] == "node-status"} == {
        "lab-a",
        "lab-b",
        "lab-c",
        "lab-d",
    }
    # every GPU held on lab-b is reported with its holders
    held = [
        e for e in records if e["schema"] == "attribution" and e["node"] == "lab-b" and e["holders"]
    ]
    assert {e["gpu_uuid"] for e in held} == {
        e["gpu_uuid"] for e in records if e["schema"] == "attribution" and e["node"] == "lab-b"
    }
    assert len({e["gpu_uuid"] for e in held}) == 2
    assert (
        "dcgm-exporter"
        in next(
            p
            for s in statuses(records, "lab-b")
            for p in s["planes"]
            if p["name"] == "dcgm-exporter"
        )["reason"]
    )
