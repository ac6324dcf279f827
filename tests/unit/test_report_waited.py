"""GPU-hours waited, from hand-built pending-pod records: a pod waits from its creation (or the
range's start) until its bound or deleted record, a list that no longer has it, or the range's
end; each pod counts once per pool however many copies of its records there are."""

from __future__ import annotations

import io

import pytest

from contract.inputs import (
    GpuRequest,
    OwnerRef,
    PendingPod,
    PendingPodList,
    QueuedWorkload,
    QueuedWorkloadList,
)
from contract.records import replace
from gpuattr.report_cli import report_waits, write_waits_csv
from gpuattr.waited import WaitLine, accumulate_waits

H = 3_600_000
START, END = 10 * H, 20 * H
GPU = GpuRequest("nvidia.com/gpu", 2)
SHARED = GpuRequest("nvidia.com/gpu.shared", 1)
A100 = GpuRequest("nvidia.com/gpu", 1, product="NVIDIA-A100-SXM4-80GB")
INFER = OwnerRef("Deployment", "infer")


def pod(
    name: str,
    created_h: float,
    ts_h: float,
    *requests: GpuRequest,
    state: str = "pending",
    workload: OwnerRef | None = INFER,
    ns: str = "serve",
) -> PendingPod:
    return PendingPod(
        ts_ms=int(ts_h * H),
        namespace=ns,
        name=name,
        uid=f"uid-{name}",
        created_ms=int(created_h * H),
        requests=requests or (GPU,),
        state=state,  # type: ignore[arg-type]
        workload=workload,
    )


def waits(*records: PendingPod | PendingPodList) -> dict[tuple[str, str, str], WaitLine]:
    return {
        (w.namespace, w.workload, w.pool): w
        for w in accumulate_waits(records, start_ms=START, end_ms=END)
    }


def test_a_pod_waits_from_creation_until_bound_times_its_gpus() -> None:
    got = waits(pod("a", 11, 11), pod("a", 11, 14, state="bound"))
    line = got[("serve", "Deployment/infer", "nvidia.com/gpu")]
    assert (line.pods, line.gpu_hours_waited, line.longest_wait_h, line.waiting_at_end) == (
        1,
        6.0,  # 3 h x 2 GPUs
        3.0,
        0,
    )


def test_a_wait_begun_before_the_range_counts_from_its_start_and_still_waits_at_its_end() -> None:
    got = waits(pod("old", 2, 12))  # created 8 h before the range, still pending
    line = got[("serve", "Deployment/infer", "nvidia.com/gpu")]
    assert (line.gpu_hours_waited, line.longest_wait_h, line.waiting_at_end) == (20.0, 10.0, 1)


def test_copies_of_a_pod_s_records_count_once_per_pool() -> None:
    """One record per resource it asks for (two partitions), each with every request; a list in
    every partition; the bound record twice: one wait per pool."""
    both = pod("b", 12, 12, GPU, SHARED)
    bound = pod("b", 12, 13, GPU, SHARED, state="bound")
    listed = PendingPodList(int(12.5 * H), (both,))
    got = waits(both, both, listed, listed, bound, bound)
    assert got[("serve", "Deployment/infer", "nvidia.com/gpu")].gpu_hours_waited == 2.0
    assert got[("serve", "Deployment/infer", "nvidia.com/gpu.shared")].gpu_hours_waited == 1.0
    assert {w.pods for w in got.values()} == {1}


def test_a_deleted_pod_stops_waiting_and_a_bare_bound_record_counts_its_wait() -> None:
    got = waits(
        pod("d", 15, 15), pod("d", 15, 16, state="deleted"), pod("e", 18, 19, state="bound")
    )
    line = got[("serve", "Deployment/infer", "nvidia.com/gpu")]
    assert (line.pods, line.gpu_hours_waited, line.waiting_at_end) == (2, 4.0, 0)


def test_a_pod_seen_only_in_a_list_counts_and_a_pod_missing_from_a_later_list_is_gone() -> None:
    seen = pod("listed", 9, 9)
    gone = pod("vanished", 12, 12)
    got = waits(gone, PendingPodList(14 * H, (seen,)))
    line = got[("serve", "Deployment/infer", "nvidia.com/gpu")]
    # listed: 10 h (range start) to 20 h x 2; vanished: 12 h to the list at 14 h x 2
    assert (line.pods, line.gpu_hours_waited, line.waiting_at_end) == (2, 24.0, 1)


def test_a_pod_created_after_a_list_is_not_ended_by_it() -> None:
    got = waits(PendingPodList(14 * H, ()), pod("late", 14.5, 15))
    assert got[("serve", "Deployment/infer", "nvidia.com/gpu")].gpu_hours_waited == 11.0


def test_pools_namespaces_and_bare_pods_apart() -> None:
    got = waits(
        pod("p", 12, 12, A100),
        pod("q", 12, 12, ns="lab", workload=None),
        pod("r", 21, 21),  # after the range: not read
    )
    assert set(got) == {
        ("serve", "Deployment/infer", "nvidia.com/gpu|product=NVIDIA-A100-SXM4-80GB"),
        ("lab", "Pod/q", "nvidia.com/gpu"),
    }
    assert got[("lab", "Pod/q", "nvidia.com/gpu")].gpu_hours_waited == 16.0


def test_two_claims_of_one_class_add_up() -> None:
    claim = GpuRequest("dra:gpu.nvidia.com", 1, claim="serve/a")
    got = waits(pod("c", 18, 18, claim, replace(claim, claim="serve/b")))
    assert got[("serve", "Deployment/infer", "dra:gpu.nvidia.com")].gpu_hours_waited == 4.0


def test_the_waited_table_and_csv(capsys: pytest.CaptureFixture[str]) -> None:
    records: list[PendingPod | PendingPodList] = [pod("a", 11, 11), pod("a", 11, 14, state="bound")]
    lines = report_waits(records, "10h", start_ms=START, end_ms=END, csv_path=None)
    out = capsys.readouterr().out
    assert "GPU-hours waited" in out
    assert "6.000" in out
    buffer = io.StringIO()
    write_waits_csv(lines, buffer)
    assert buffer.getvalue().splitlines() == [
        "namespace,workload,pool,pods,gpu_hours_waited,longest_wait_h,waiting_at_end,workloads,"
        "quota_gpu_hours",
        "serve,Deployment/infer,nvidia.com/gpu,1,6.0000,3.0000,0,0,0.0000",
    ]
    assert report_waits(None, "10h", start_ms=START, end_ms=END, csv_path=None) == []


def test_pods_sharing_a_claim_wait_for_its_devices_once_while_any_of_them_waits() -> None:
    claim = GpuRequest("dra:gpu.nvidia.com", 1, claim="serve/shared-gpu")
    own = GpuRequest("dra:gpu.nvidia.com", 1)  # a template's claim: each pod's own
    got = waits(
        pod("a", 11, 11, claim),
        pod("b", 12, 12, claim),
        pod("a", 11, 14, claim, state="bound"),
        pod("b", 12, 16, claim, state="bound"),
        pod("c", 11, 11, replace(claim, claim="other/shared-gpu"), ns="other"),  # another's
        pod("t1", 11, 11, own),
        pod("t2", 11, 11, own),
        pod("t1", 11, 12, own, state="bound"),
        pod("t2", 11, 12, own, state="bound"),
    )
    line = got[("serve", "Deployment/infer", "dra:gpu.nvidia.com")]
    # shared: 11 h to 16 h, one GPU (not 3 h + 4 h); each template pod: 1 h x 1 GPU
    assert (line.pods, line.gpu_hours_waited, line.longest_wait_h) == (4, 5.0 + 2.0, 4.0)
    assert got[("other", "Deployment/infer", "dra:gpu.nvidia.com")].gpu_hours_waited == 9.0


def test_a_queued_workload_waits_for_quota_on_its_jobs_line_until_admitted() -> None:
    """2 h queued for quota (8 GPUs), then admitted; its pod waits 1 h more for the scheduler."""
    owner = OwnerRef("Job", "train-llm")
    queued = QueuedWorkload(
        START,
        "ml",
        "job-train-llm-1",
        "uid-w",
        START,
        (GpuRequest("nvidia.com/gpu", 8),),
        owner=owner,
    )
    admitted = replace(queued, ts_ms=START + 2 * H, state="admitted")
    pod = PendingPod(
        START + 2 * H,
        "ml",
        "train-llm-0",
        "uid-p",
        START + 2 * H,
        (GpuRequest("nvidia.com/gpu", 8),),
        workload=owner,
    )
    bound = replace(pod, ts_ms=START + 3 * H, state="bound")
    # a pending-pod list does not end the Workload's wait; a Workload list after admission
    # does not bring it back
    lists = [PendingPodList(START + H, ()), QueuedWorkloadList(START + 3 * H, ())]
    (line,) = accumulate_waits([queued, *lists, admitted, pod, bound], start_ms=START, end_ms=END)
    assert (line.workload, line.pods, line.workloads) == ("Job/train-llm", 1, 1)
    assert line.gpu_hours_waited == pytest.approx(8 * 2 + 8 * 1)
    assert line.quota_gpu_hours == pytest.approx(16)
    assert line.waiting_at_end == 0
