"""``gpuattr demo --scenario tenants --json``: a noisy neighbour and an idle tenant on one
time-sliced GPU, end to end (the exporter double in virtual-GPU mode, real Kafka, agent, cluster
role, worker), as a user runs it. The test reads the demo's stdout while it runs, waits (bounded)
until both tenant alerts have fired, then stops the demo with SIGTERM (it exits 0):

- the shared GPU's events carry the device row as the device-wide figure and, on each holder,
  what the exporter measured for that pod's own processes — the scenario's figures, the
  trainer's two replicas counted once, the embedder's two pods with equal readings each
  credited its own;
- ``idle-tenant`` names the notebook alone, and the GPU as a whole is never ``idle``;
- ``memory-hog`` names the trainer once its memory is over half of the GPU for the window.

The demo keeps its own settings but for the hog window, shortened through the environment its
roles inherit (an operator's ``GPUATTR_ALERTS_MEMORY_HOG_WINDOW_S``) so the test needs about a
minute of scenario time instead of three; ``test_sim_tenants_scenario`` holds the demo's default
window to the same story in scenario time.
"""

from __future__ import annotations

from typing import Any

import pytest

from sim.scenario import PodSpec, gpu_uuid, load
from tests.contract import assert_valid
from tests.integration.demo_run import demo

pytestmark = pytest.mark.integration

SCENARIO = load("tenants")
SPECS = {p.name: p for p in SCENARIO.pods}
SHARED = gpu_uuid("tenants-a", 0)
WHOLE = gpu_uuid("tenants-a", 1)
TRAINER = "llm-finetune-7c9d8b6f5-k2x8q"
EMBEDDER = "embedder-5f8c7d9b4-q7w2m"
EMBEDDER_2 = "embedder-5f8c7d9b4-w3n6r"  # the same figures as EMBEDDER: two tenants, two credits
NOTEBOOK = "notebook-lin-0"
HOG_WINDOW_S = 20
Records = list[dict[str, Any]]


def alerts(records: Records, kind: str, status: str = "firing") -> Records:
    return [
        r for r in records if r["schema"] == "alert" and r["kind"] == kind and r["status"] == status
    ]


def holders(record: dict[str, Any]) -> set[str]:
    return {h["pod"] for h in record["holders"]}


def measured(records: Records, gpu: str) -> Records:
    """The GPU's events on which every holder carries a per-process reading."""
    return [
        r
        for r in records
        if r["schema"] == "attribution"
        and r["gpu_uuid"] == gpu
        and r["pods"]
        and all(p.get("measured") for p in r["pods"])
    ]


def own(event: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Each holder's measured (SM %, MiB)."""
    return {
        p["pod"]: (p["measured"]["sm_util_pct"], p["measured"]["fb_used_mib"])
        for p in event["pods"]
    }


def memory_steps(pod: PodSpec) -> set[float]:
    return {pod.memory_mib, *(mib for _, mib in pod.memory_steps)}


def trainer_at_full_memory(records: Records) -> bool:
    return any(own(e).get(TRAINER, (0, 0))[1] == 24576 for e in measured(records, SHARED))


def notebook_is_an_idle_tenant(records: Records) -> bool:
    return any(a["gpu_uuid"] == SHARED for a in alerts(records, "idle-tenant"))


def trainer_is_a_memory_hog(records: Records) -> bool:
    return any(a["gpu_uuid"] == SHARED for a in alerts(records, "memory-hog"))


async def test_tenants_demo_measures_each_tenant_and_names_the_hog_and_the_idle_one(
    kafka_bootstrap: str,
) -> None:
    hog = {"GPUATTR_ALERTS_MEMORY_HOG_WINDOW_S": str(HOG_WINDOW_S)}
    # an upper bound: the test stops it once both tenant alerts have fired
    async with demo(kafka_bootstrap, "tenants", duration_s=300, env=hog) as run:
        await run.until(notebook_is_an_idle_tenant, 150)  # the roles' start, then a 20 s window
        await run.until(trainer_at_full_memory, 60)  # its memory's last step is at 50 s
        await run.until(trainer_is_a_memory_hog, 60)  # over half of the GPU from 40 s
    records = run.records

    def told() -> str:
        said = [
            (a["kind"], a["status"], a["gpu_uuid"], sorted(holders(a)))
            for a in records
            if a["schema"] == "alert"
        ]
        return f"alerts: {said}\n{run.told()}"

    assert run.proc.returncode == 0, told()

    for record in records:  # the consumer contract holds for real output
        assert_valid(record)

    # the device row is the device-wide figure; each holder carries its own processes' figures
    shared = measured(records, SHARED)
    assert shared, told()
    trainer_memory = memory_steps(SPECS[TRAINER])
    for ev in shared:
        figures = own(ev)
        assert {p["measured"]["source"] for p in ev["pods"]} == {"exporter"}
        assert set(figures) == {TRAINER, EMBEDDER, EMBEDDER_2, NOTEBOOK}
        assert figures[TRAINER][0] == SPECS[TRAINER].util_pct
        assert figures[TRAINER][1] in trainer_memory  # once, never its two replicas' sum
        assert figures[EMBEDDER] == (SPECS[EMBEDDER].util_pct, SPECS[EMBEDDER].memory_mib)
        assert figures[EMBEDDER_2] == figures[EMBEDDER]
        assert figures[NOTEBOOK] == (SPECS[NOTEBOOK].util_pct, SPECS[NOTEBOOK].memory_mib)
        assert ev["usage"]["util_pct"] == min(100, sum(sm for sm, _ in figures.values()))
        assert ev["usage"]["fb_used_mib"] == sum(mib for _, mib in figures.values())
    (full, *_) = [e for e in shared if own(e)[TRAINER][1] == 24576]
    assert (full["usage"]["util_pct"], full["usage"]["fb_used_mib"]) == (100, 39936)
    assert {p["pod"]: p["share"] for p in full["pods"]} == pytest.approx(
        {
            TRAINER: 2 / 6,  # two replicas of six: its allocation, still not its usage
            EMBEDDER: 1 / 6,
            EMBEDDER_2: 1 / 6,
            NOTEBOOK: 1 / 6,
        },
        abs=1e-4,  # shares travel rounded to four places
    )
    (whole, *_) = measured(records, WHOLE)
    assert own(whole) == {"llm-eval-x4k9p": (80, 30720)}

    # the idle tenant is the notebook alone; the GPU as a whole works, so never a device idle
    idle_tenant = alerts(records, "idle-tenant")
    assert [holders(a) for a in idle_tenant] == [{NOTEBOOK}], told()
    assert idle_tenant[0]["device_wide"] is False
    assert not [r for r in records if r["schema"] == "alert" and r["kind"] == "idle"], told()

    # the noisy neighbour: the trainer's own memory, over half of the GPU's
    (hog,) = alerts(records, "memory-hog")
    assert holders(hog) == {TRAINER}
    assert hog["gpu_uuid"] == SHARED
    assert hog["figures"]["fb_used_mib"] >= 40960 / 2
    assert {a["kind"] for a in records if a["schema"] == "alert"} == {"idle-tenant", "memory-hog"}
