"""``gpuattr demo --json`` as a user runs it: a real process, its stdout, exit 0 by itself."""

from __future__ import annotations

import asyncio
import os
import sys

import orjson
import pytest

from sim.scenario import load
from tests.contract import assert_valid

pytestmark = pytest.mark.integration


async def test_demo_json_covers_all_gpus_and_an_idle_alert_fires_and_resolves(
    kafka_bootstrap: str,
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpuattr.cli",
        "--log-level",
        "WARNING",
        "--bootstrap",
        kafka_bootstrap,
        "demo",
        "--scenario",
        "mixed",
        "--duration",
        "65",
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ),
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=240)
    assert proc.returncode == 0, err.decode()[-3000:]
    records = [orjson.loads(line) for line in out.splitlines() if line.startswith(b"{")]
    for record in records:  # the consumer contract holds for real output
        assert_valid(record)
    events = [r for r in records if r["schema"] == "attribution"]
    alerts = [r for r in records if r["schema"] == "alert"]

    scenario = load("mixed")
    assert len({(e["node"], e["gpu_uuid"]) for e in events}) == 8
    # every holder the scenario ever defines shows up, with its UID and workload
    seen = {(h["namespace"], h["pod"]): h for e in events for h in e["holders"]}
    assert {(p.namespace, p.name) for p in scenario.pods} == set(seen)
    for p in scenario.pods:
        h = seen[(p.namespace, p.name)]
        assert h["uid"] == p.uid
        assert (h["workload"]["kind"], h["workload"]["name"]) == (p.workload_kind, p.workload_name)
    # the idle notebook fires, and resolves once it gets busy at 45 s
    notebook = [
        a
        for a in alerts
        if a["kind"] == "idle" and any(h["pod"] == "notebook-0" for h in a["holders"])
    ]
    assert [a["status"] for a in notebook] == ["firing", "resolved"], notebook
    assert notebook[0]["id"] == notebook[1]["id"]
