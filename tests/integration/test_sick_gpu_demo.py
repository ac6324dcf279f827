"""``gpuattr demo --scenario sick-gpu --json``: a GPU turns unhealthy through the kubelet while
its exporter is down, end to end (the API-server double serving the trainer's
``allocatedResourcesStatus``, real Kafka, agent, cluster role, worker), as a user runs it. The
test reads the demo's stdout while it runs, waits (bounded) until the ``device-unhealthy``
alert has fired and resolved, then stops the demo with SIGTERM (it exits 0):

- the alert names the trainer with its UID and the kubelet's word, while GPU 0's events say its
  usage is unknown (the exporter is unreachable: never 0) and the kubelet says it is unhealthy;
- it resolves, the same episode, when the kubelet says Healthy again;
- GPU 1, healthy throughout, has no alert.

The scenario runs :data:`SPEED` times faster than wall time (the demo's ``--speed``: the doubles'
clock only; the roles keep the demo's own intervals), so its 150 s take under a minute;
``test_sim_sick_gpu`` holds the story to scenario time on the demo's settings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sim.scenario import gpu_uuid, load
from tests.contract import assert_valid
from tests.integration.demo_run import demo

pytestmark = pytest.mark.integration

SCENARIO = load("sick-gpu")
NODE = "sick-a"
SICK = gpu_uuid(NODE, 0)
WELL = gpu_uuid(NODE, 1)
TRAINER = next(p for p in SCENARIO.pods if p.name == "llm-pretrain-0")
KIND = "device-unhealthy"
SPEED = 4.0  # exporter down at 10 s of wall time, GPU 0 unhealthy at 15 s, healthy at 37.5 s
Records = list[dict[str, Any]]


def alerts(records: Records, status: str | None = None) -> Records:
    return [
        r for r in records if r["schema"] == "alert" and (status is None or r["status"] == status)
    ]


def unhealthy_alert(status: str) -> Callable[[Records], dict[str, Any] | None]:
    def check(records: Records) -> dict[str, Any] | None:
        found = [a for a in alerts(records, status) if (a["kind"], a["gpu_uuid"]) == (KIND, SICK)]
        return found[0] if found else None

    check.__name__ = f"{KIND} {status} on GPU 0"
    return check


def sick_while_unreachable(event: dict[str, Any]) -> bool:
    """GPU 0's event while the exporter is down and the kubelet says it is unhealthy."""
    return bool(
        event["schema"] == "attribution"
        and event["gpu_uuid"] == SICK
        and event["telemetry"]["status"] == "unknown"
        and event["telemetry"]["cause"] == "exporter-unreachable"
        and event["health"].get("verdict") == "unhealthy"
    )


async def test_sick_gpu_demo_names_the_trainer_from_the_kubelets_word_while_the_exporter_is_down(
    kafka_bootstrap: str,
) -> None:
    # an upper bound: the test stops it once the alert has resolved
    async with demo(kafka_bootstrap, "sick-gpu", duration_s=240, speed=SPEED) as run:
        # the roles' start (up to ~30 s here), then 15 s of wall time and one spine heartbeat
        firing = await run.until(unhealthy_alert("firing"), 120)
        resolved = await run.until(unhealthy_alert("resolved"), 60)  # healthy 22.5 s later
    records = run.records

    def told() -> str:
        said = [(a["kind"], a["status"], a["gpu_uuid"]) for a in alerts(records)]
        return f"alerts: {said}\n{run.told()}"

    assert run.proc.returncode == 0, told()

    for record in records:  # the consumer contract holds for real output
        assert_valid(record)

    # the trainer, named with its UID, from the kubelet's word in its pod status
    holders = [(h["namespace"], h["pod"], h["uid"]) for h in firing["holders"]]
    assert holders == [(TRAINER.namespace, TRAINER.name, TRAINER.uid)], firing
    assert f"uid {TRAINER.uid}" in firing["summary"]
    kubelet = [w for w in firing["figures"]["health"] if w["source"] == "kubelet"]
    assert [(w["state"], w["holder"]) for w in kubelet] == [
        ("unhealthy", f"{TRAINER.namespace}/{TRAINER.name}")
    ], firing["figures"]["health"]

    # meanwhile GPU 0's events: usage unknown (never 0), the kubelet's unhealthy
    sick = [r for r in records if sick_while_unreachable(r)]
    assert sick, told()
    for event in sick:
        assert event["usage"]["util_pct"] is None
        words = {(w["source"], w["state"]) for w in event["health"]["sources"]}
        assert ("kubelet", "unhealthy") in words
        assert [p["pod"] for p in event["pods"]] == [TRAINER.name]

    # one episode, resolved when the kubelet says Healthy again; nothing for GPU 1
    assert resolved["id"] == firing["id"]
    assert "healthy again" in resolved["summary"]
    assert [(a["kind"], a["status"], a["gpu_uuid"]) for a in alerts(records)] == [
        (KIND, "firing", SICK),
        (KIND, "resolved", SICK),
    ], told()
    well = [r for r in records if r["schema"] == "attribution" and r["gpu_uuid"] == WELL]
    assert well
    assert "unhealthy" not in {r["health"].get("verdict") for r in well}
