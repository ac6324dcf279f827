"""The simulator's Kueue objects (sim/kueue.py, scenario ``demand``) are shaped as Kueue v0.19
writes them at ``v1beta2``: the cluster role's own translators read them back into the queued
Workload the scenario describes, and its admitted and finished steps as Kueue writes those."""

from __future__ import annotations

from typing import Any

from agents.kube.kueue import (
    Queues,
    cluster_queue,
    local_queue,
    queued_workload,
    read_workload,
    resource_flavor,
)
from contract.inputs import GpuRequest, OwnerRef
from contract.records import replace
from sim.kueue import kueue_objects, workload_name
from sim.scenario import KueueStep, load

EPOCH = 1_780_000_000.0
DEMAND = load("demand")


def queues(objs: list[dict[str, Any]]) -> Queues:
    local = dict(q for o in objs if o["kind"] == "LocalQueue" and (q := local_queue(o)))
    cluster = dict(c for o in objs if o["kind"] == "ClusterQueue" and (c := cluster_queue(o)))
    flavors = dict(f for o in objs if o["kind"] == "ResourceFlavor" and (f := resource_flavor(o)))
    return Queues(local, cluster, flavors)


def workload_at(scenario: Any, t: float) -> Any:
    objs = kueue_objects(scenario, t, EPOCH)
    (wl,) = [o for o in objs if o["kind"] == "Workload"]
    facts = read_workload(wl)
    assert facts is not None
    record, problems = queued_workload(facts, queues(objs), ts_ms=1)
    assert problems == ()
    return record


def test_no_workload_before_its_job_is_created() -> None:
    kinds = [o["kind"] for o in kueue_objects(DEMAND, 5, EPOCH)]
    assert kinds == ["ResourceFlavor", "ClusterQueue", "LocalQueue"]


def test_the_queued_training_job_reads_back_as_the_scenario_says() -> None:
    record = workload_at(DEMAND, 10)
    assert record is not None
    assert (record.namespace, record.state, record.queue, record.cluster_queue) == (
        "ml",
        "queued",
        "training",
        "team-ml",
    )
    assert record.requests == (GpuRequest("nvidia.com/gpu", 4, "NVIDIA-A100-SXM4-80GB"),)
    assert record.owner == OwnerRef("Job", "train-llm-ft")
    assert record.reason == "Pending"
    assert record.message.startswith("couldn't assign flavors to pod set main")
    assert record.created_ms == int((EPOCH + 8) * 1000)
    (spec,) = DEMAND.kueue.workloads if DEMAND.kueue else ()
    assert record.name == workload_name(spec)


def test_admitted_and_finished_as_kueue_writes_them() -> None:
    assert DEMAND.kueue is not None
    (spec,) = DEMAND.kueue.workloads
    steps = (*spec.steps, KueueStep(20, "admitted"), KueueStep(30, "finished"))
    later = replace(DEMAND, kueue=replace(DEMAND.kueue, workloads=(replace(spec, steps=steps),)))
    assert workload_at(later, 25).state == "admitted"
    assert workload_at(later, 35).state == "finished"
