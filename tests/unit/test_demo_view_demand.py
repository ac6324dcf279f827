"""The demo's waiting line per pool, from a demand record as the worker writes it."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from contract import codec
from contract.outputs import Holder, IdleGpu, PoolDemand, WaitingPod
from gpuattr.demo_view import render, waiting_line

NOW = 1_700_000_100_000
MESSAGE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def written(record: PoolDemand) -> dict[str, Any]:
    """The record as the demo reads it off the demand topic."""
    return codec.to_dict(codec.decode(codec.encode(record)))


def notebook() -> Holder:
    return Holder("research", "notebook-kim-0", "jupyter", "nvidia.com/gpu", ("GPU-1",), 1)


def pool(pending: int, idle: tuple[IdleGpu, ...]) -> dict[str, Any]:
    waiting = tuple(
        WaitingPod(
            "inference",
            f"serve-mistral-5d8f7c9b6-{i}",
            f"uid-{i}",
            1,
            NOW - 40_000,
            workload="Deployment/serve-mistral",
            reason="Unschedulable",
            message=MESSAGE,
        )
        for i in range(pending)
    )
    return written(
        PoolDemand(
            ts_ms=NOW,
            pool="nvidia.com/gpu",
            resource="nvidia.com/gpu",
            product="",
            mig_profile="",
            pending_pods=pending,
            gpus_requested=pending,
            oldest_since_ms=NOW - 40_000 if pending else None,
            waiting=waiting,
            allocated_gpus=4,
            idle=idle,
        )
    )


def test_the_line_says_who_waits_how_long_and_which_gpus_idle_meanwhile() -> None:
    idle = (IdleGpu("dem-a", "GPU-1234567890ab", NOW - 95_000, (notebook(),)),)
    line = waiting_line(pool(2, idle))
    assert "2 pods wait for 2 GPUs" in line
    assert "(oldest 40 s)" in line
    assert "inference/serve-mistral-5d8f7c9b6-0" in line
    assert MESSAGE in line
    assert "4 allocated" in line
    assert "1 idle" in line
    assert "research/notebook-kim-0" in line
    assert "idle 95 s" in line


def test_nobody_waiting_says_so() -> None:
    line = waiting_line(pool(0, ()))
    assert line.startswith("nobody waits")
    assert "4 allocated" in line
    assert "idle" not in line


def test_the_view_shows_the_pools() -> None:
    console = Console(width=200, record=True)
    console.print(render({}, [], "demo", None, {"nvidia.com/gpu": pool(1, ())}))
    text = console.export_text()
    assert "GPU demand per pool" in text
    assert "1 pod waits for 1 GPU" in text


def test_a_queued_workload_has_its_own_line_with_its_clusterqueue_and_kueues_word() -> None:
    quota = (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
        "in flavor a100, 4 more needed"
    )
    queued = WaitingPod(
        "ml",
        "job-train-llm-ft-1bc83",
        "uid-w",
        4,
        NOW - 60_000,
        workload="Job/train-llm-ft",
        reason="Pending",
        message=quota,
        waits_for="quota",
        queue="training",
        cluster_queue="team-ml",
    )
    record = written(
        PoolDemand(
            ts_ms=NOW,
            pool="nvidia.com/gpu|product=NVIDIA-A100-SXM4-80GB",
            resource="nvidia.com/gpu",
            product="NVIDIA-A100-SXM4-80GB",
            mig_profile="",
            pending_pods=0,
            gpus_requested=4,
            oldest_since_ms=NOW - 60_000,
            waiting=(queued,),
            allocated_gpus=4,
            idle=(IdleGpu("dem-a", "GPU-1234567890ab", NOW - 95_000, (notebook(),)),),
            queued_workloads=1,
            gpus_for_quota=4,
        )
    )
    line = waiting_line(record)
    assert "pods wait" not in line  # no pod waits: the Workload has none
    assert "1 Workload waits for quota for 4 GPUs[/] in ClusterQueue team-ml" in line
    assert "ml/job-train-llm-ft-1bc83 (Job/train-llm-ft)" in line
    assert f"Kueue: {quota}" in line
    assert "[red]1 idle[/]" in line
