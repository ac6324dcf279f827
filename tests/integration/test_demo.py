"""``gpuattr demo --json`` as a user runs it: a real process, its stdout, exit 0 by itself."""

from __future__ import annotations

import pytest

from sim.scenario import load
from tests.contract import assert_valid
from tests.integration.demo_run import demo

pytestmark = pytest.mark.integration


async def test_demo_json_covers_all_gpus_and_an_idle_alert_fires_and_resolves(
    kafka_bootstrap: str,
) -> None:
    async with demo(kafka_bootstrap, "mixed", duration_s=65) as run:
        await run.exited(240)  # it stops by itself once its duration is up
    assert run.proc.returncode == 0, run.told()
    records = run.records
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
