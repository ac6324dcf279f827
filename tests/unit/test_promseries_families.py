"""Each Prometheus family is one pure function of the rows: one case per family, on a measured
device held by one pod through a claim, a device nobody speaks for, and a stale one (its info
series only); two nodes' stacks; two pools."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from contract.records import replace
from streams.present.noderows import NodeRow, PlaneRow
from streams.present.poolrows import PoolRow
from streams.present.promseries import (
    DEVICE_FAMILIES,
    HEALTH_MARKS,
    NODE_FAMILIES,
    POOL_FAMILIES,
    WORK_KINDS,
    Family,
    Labels,
    families,
)
from streams.present.views import DeviceRow, HolderRow, PodShareRow

LIVE = DeviceRow(
    node="n1",
    device_uuid="GPU-a",
    gpu_uuid="GPU-a",
    gpu_index=0,
    mig_instance=None,
    mig_profile=None,
    model="A100",
    state="exclusive",
    sharing="none",
    tenant_count=1,
    holders=(HolderRow("ml", "p", "c", "Job/train", "uid-p", "uid-", 1, 1.0, "ml/claim"),),
    usage_scope="device",
    util_pct=50.0,
    fb_used_mib=2.0,
    fb_free_mib=1.0,
    idle_since_ms=None,
    idle_s=30.0,
    open_alerts=("idle",),
    ts_ms=1,
    summary="",
    allocation="dra",
    exporter_verdict="trusted",
    exporter_mode="pod",
    pods=(PodShareRow("ml", "p", "uid-p", "Job/train", 1.0, "whole", 2.0, 40.0, "exporter"),),
    effective_pct=25.0,
    effective_source="DCGM_FI_PROF_SM_ACTIVE",
    work="compute",
    health_marks=("hot",),
    health_watched=("throttled",),
    health_verdict="unhealthy",
    health_sources=(
        ("kubelet", "healthy", "ml/p: nvidia.com/gpu GPU-a: Healthy"),
        ("kubelet", "unhealthy", "ml/q: XID 79"),
        ("dra-taint", "unknown", ""),
        ("dcgm", "healthy", "no memory fault in the reading"),
    ),
)
UNKNOWN = replace(
    LIVE,
    device_uuid="GPU-u",
    gpu_uuid="GPU-u",
    gpu_index=None,
    holders=(),
    pods=(),
    tenant_count=0,
    util_pct=None,
    fb_used_mib=None,
    idle_s=None,
    open_alerts=(),
    effective_pct=None,
    telemetry="unknown",
    telemetry_cause="unreachable",
)
STALE = replace(LIVE, device_uuid="GPU-s", gpu_uuid="GPU-s", origin="stale")
ROWS = [LIVE, UNKNOWN, STALE]


def dev(uuid: str, *more: tuple[str, str]) -> Labels:
    return (("node", "n1"), ("device_uuid", uuid), *more)


def info(uuid: str, index: str, stale: str) -> Labels:
    return dev(
        uuid,
        ("gpu_uuid", uuid),
        ("gpu_index", index),
        ("mig_instance", ""),
        ("mig_profile", ""),
        ("model", "A100"),
        ("sharing", "none"),
        ("state", "exclusive"),
        ("allocation", "dra"),
        ("stale", stale),
    )


WHO = (("namespace", "ml"), ("pod", "p"))
JOB = (("workload_kind", "Job"), ("workload_name", "train"))
SCOPE = ("scope", "device")

PLANES = (PlaneRow("driver", "ready", "deploy", ""), PlaneRow("toolkit", "refused", "deploy", "x"))
NODES = [
    NodeRow("n1", "broken", "", "toolkit", None, (), PLANES, None, False, "stack-broken/n1", 1),
    NodeRow("n2", "ready", "", None, None, (), (), None, False, None, 1),
]
POOL = PoolRow("gpu", "nvidia.com/gpu", "", "", 1, 3, 6, 0, 60.0, (), 4, 2, None, (), 0)
POOLS = [POOL, replace(POOL, pool="mig", oldest_wait_s=None)]
P = (("pool", "gpu"), ("resource", "nvidia.com/gpu"), ("product", ""), ("mig_profile", ""))
M = (("pool", "mig"), *P[1:])


def work(uuid: str) -> list[tuple[Labels, float]]:
    return [(dev(uuid, ("work", k)), float(k == "compute")) for k in WORK_KINDS]


CASES: list[tuple[Callable[[Sequence[Any]], Family], list[Any], str, list[tuple[Labels, float]]]]
CASES = [
    (DEVICE_FAMILIES[0], ROWS, "gpuattr_device_info",
     [(info("GPU-a", "0", "false"), 1.0), (info("GPU-u", "", "false"), 1.0),
      (info("GPU-s", "0", "true"), 1.0)]),
    (DEVICE_FAMILIES[1], ROWS, "gpuattr_device_holder_info",
     [(dev("GPU-a", *WHO, ("container", "c"), ("pod_uid", "uid-p"), *JOB, ("claim", "ml/claim")),
       1.0)]),
    (DEVICE_FAMILIES[2], ROWS, "gpuattr_pod_device_share",
     [(dev("GPU-a", *WHO, ("pod_uid", "uid-p"), *JOB, ("basis", "whole")), 1.0)]),
    (DEVICE_FAMILIES[3], ROWS, "gpuattr_device_telemetry_unknown",
     [(dev("GPU-u", ("cause", "unreachable")), 1.0)]),
    (DEVICE_FAMILIES[4], ROWS, "gpuattr_device_tenants",
     [(dev("GPU-a"), 1.0), (dev("GPU-u"), 0.0)]),
    (DEVICE_FAMILIES[5], ROWS, "gpuattr_device_utilization_ratio", [(dev("GPU-a", SCOPE), 0.5)]),
    (DEVICE_FAMILIES[6], ROWS, "gpuattr_device_memory_used_bytes",
     [(dev("GPU-a", SCOPE), 2.0 * 2**20)]),
    (DEVICE_FAMILIES[7], ROWS, "gpuattr_device_idle_seconds", [(dev("GPU-a"), 30.0)]),
    (DEVICE_FAMILIES[8], ROWS, "gpuattr_device_open_alerts",
     [(dev("GPU-a", ("alert", "idle")), 1.0)]),
    (DEVICE_FAMILIES[9], ROWS, "gpuattr_device_exporter_verdict",
     [(dev(u, ("verdict", "trusted"), ("mode", "pod")), 1.0) for u in ("GPU-a", "GPU-u")]),
    (DEVICE_FAMILIES[10], ROWS, "gpuattr_device_effective_ratio",
     [(dev("GPU-a", SCOPE, ("source", "DCGM_FI_PROF_SM_ACTIVE")), 0.25)]),
    (DEVICE_FAMILIES[11], ROWS, "gpuattr_device_work", work("GPU-a")),
    (DEVICE_FAMILIES[12], ROWS, "gpuattr_device_health",
     [(dev("GPU-a", ("mark", m)), float(m == "hot")) for m in HEALTH_MARKS
      if m in ("hot", "throttled")]),
    (DEVICE_FAMILIES[13], ROWS, "gpuattr_pod_device_memory_used_bytes",
     [(dev("GPU-a", *WHO, ("pod_uid", "uid-p"), ("source", "exporter")), 2.0 * 2**20)]),
    (DEVICE_FAMILIES[14], ROWS, "gpuattr_pod_device_sm_utilization_ratio",
     [(dev("GPU-a", *WHO, ("pod_uid", "uid-p"), ("source", "exporter")), 0.4)]),
    (DEVICE_FAMILIES[15], ROWS, "gpuattr_device_source_unhealthy",
     [(dev(u, ("source", s)), v) for u in ("GPU-a", "GPU-u")  # the kubelet speaks without DCGM
      for s, v in (("dcgm", 0.0), ("kubelet", 1.0))]),
    (NODE_FAMILIES[0], NODES, "gpuattr_node_stack_state",
     [((("node", n), ("state", s)), float(s == st))
      for n, st in (("n1", "broken"), ("n2", "ready"))
      for s in ("broken", "conflict", "unknown", "reconciling", "disabled", "ready")]),
    (NODE_FAMILIES[1], NODES, "gpuattr_node_plane_broken",
     [((("node", "n1"), ("plane", "driver")), 0.0), ((("node", "n1"), ("plane", "toolkit")), 1.0)]),
    (NODE_FAMILIES[2], NODES, "gpuattr_node_stack_alert_open",
     [((("node", "n1"),), 1.0), ((("node", "n2"),), 0.0)]),
    (POOL_FAMILIES[0], POOLS, "gpuattr_pool_pending_pods", [(P, 3.0), (M, 3.0)]),
    (POOL_FAMILIES[1], POOLS, "gpuattr_pool_queued_workloads", [(P, 0.0), (M, 0.0)]),
    (POOL_FAMILIES[2], POOLS, "gpuattr_pool_gpus_requested", [(P, 6.0), (M, 6.0)]),
    (POOL_FAMILIES[3], POOLS, "gpuattr_pool_gpus_for_quota", [(P, 0.0), (M, 0.0)]),
    (POOL_FAMILIES[4], POOLS, "gpuattr_pool_oldest_wait_seconds", [(P, 60.0)]),
    (POOL_FAMILIES[5], POOLS, "gpuattr_pool_allocated_gpus", [(P, 4.0), (M, 4.0)]),
    (POOL_FAMILIES[6], POOLS, "gpuattr_pool_idle_gpus", [(P, 2.0), (M, 2.0)]),
]  # fmt: skip


@pytest.mark.parametrize(("family", "rows", "name", "samples"), CASES, ids=[c[2] for c in CASES])
def test_each_family_is_its_rows_samples(
    family: Callable[[Sequence[Any]], Family],
    rows: list[Any],
    name: str,
    samples: list[tuple[Labels, float]],
) -> None:
    got = family(rows)
    assert (got.name, got.type, got.samples) == (name, "gauge", samples)
    assert got.help


def test_every_family_has_a_case_and_families_lists_them_in_order() -> None:
    assert [c[0] for c in CASES] == [*DEVICE_FAMILIES, *NODE_FAMILIES, *POOL_FAMILIES]
    assert [f.name for f in families(ROWS, NODES, POOLS)] == [c[2] for c in CASES]


def test_no_rows_no_samples() -> None:
    assert all(f.samples == [] for f in families([], [], []))
