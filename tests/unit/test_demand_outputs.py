"""A pool's demand where people look: its row (waits and idle times as of the record), the line
``gpuattr top`` prints, the rows gathered from several workers, and its Prometheus series — from
hand-built demand records."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from contract.outputs import Holder, IdleGpu, PoolDemand, WaitingPod
from gpuattr.top import render
from streams.present.poolrows import POOL_ROWS, merge_pools, pool_line, pool_row, span_text
from streams.worker.promexport import exposition

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
NOW = 40 * DAY_MS
MESSAGE = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."


def holder(ns: str, pod: str) -> Holder:
    return Holder(ns, pod, "main", "nvidia.com/gpu", ("GPU-x",), 1)


def waiting(i: int, since_ms: int) -> WaitingPod:
    return WaitingPod(
        "serve",
        f"infer-{i}",
        f"uid-{i}",
        2,
        since_ms,
        workload="Deployment/infer",
        reason="Unschedulable",
        message=MESSAGE,
    )


def idle(i: int, idle_h: float) -> IdleGpu:
    return IdleGpu(f"node-{i}", f"GPU-{i}", NOW - int(idle_h * HOUR_MS), (holder("ml", f"nb-{i}"),))


#: the seed's stall: 12 replicas of 2 GPUs wait (the oldest 28 days) while 5 of the pool's 8
#: allocated GPUs have idled for 2 to 6 hours; one allocated GPU's usage is unknown
STALL = PoolDemand(
    ts_ms=NOW,
    pool="nvidia.com/gpu",
    resource="nvidia.com/gpu",
    product="",
    mig_profile="",
    pending_pods=12,
    gpus_requested=24,
    oldest_since_ms=NOW - 28 * DAY_MS,
    waiting=tuple(waiting(i, NOW - (28 - i) * DAY_MS) for i in range(12)),
    allocated_gpus=8,
    idle=tuple(idle(i, 2 + i) for i in range(5)),
    unmeasured_gpus=1,
)
#: a product pool: one pod waits for an A100, no A100 allocated
A100 = PoolDemand(
    ts_ms=NOW,
    pool="nvidia.com/gpu|product=NVIDIA-A100-SXM4-80GB",
    resource="nvidia.com/gpu",
    product="NVIDIA-A100-SXM4-80GB",
    mig_profile="",
    pending_pods=1,
    gpus_requested=1,
    oldest_since_ms=NOW - 90_000,
    waiting=(WaitingPod("lab", "solo", "uid-solo", 1, NOW - 90_000),),
    allocated_gpus=0,
    idle=(),
)
#: supply only: nobody waits for the MIG pool
MIG = PoolDemand(
    ts_ms=NOW,
    pool="nvidia.com/mig-1g.10gb|mig=1g.10gb",
    resource="nvidia.com/mig-1g.10gb",
    product="",
    mig_profile="1g.10gb",
    pending_pods=0,
    gpus_requested=0,
    oldest_since_ms=None,
    waiting=(),
    allocated_gpus=3,
    idle=(),
)


def test_row_waits_and_idle_times_are_as_of_the_record() -> None:
    row = pool_row(STALL)
    assert row.oldest_wait_s == 28 * 86400
    assert row.waiting[0].wait_s == 28 * 86400
    assert row.waiting[0].message == MESSAGE
    assert (row.allocated_gpus, row.idle_gpus, row.unmeasured_gpus) == (8, 5, 1)
    assert row.idle_for_s == 2 * 3600  # all five have idled at least this long
    assert row.idle[0].holders == ("ml/nb-0",)
    assert pool_row(MIG).oldest_wait_s is None
    assert pool_row(MIG).idle_for_s is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (59.9, "59 s"), (60, "1 min"), (7199, "1 h"), (7200, "2 h"), (28 * 86400, "28 d")],
)
def test_span_text(seconds: float, text: str) -> None:
    assert span_text(seconds) == text


def test_the_line_says_who_waits_how_long_why_and_who_idles() -> None:
    assert pool_line(pool_row(STALL)) == (
        f'nvidia.com/gpu  12 pods wait (24 GPUs, oldest 28 d: "{MESSAGE}") · 5 allocated idle '
        "≥ 2 h: ml/nb-0, ml/nb-1, ml/nb-2, ml/nb-3, … (of 8 allocated), 1 unmeasured"
    )
    assert pool_line(pool_row(A100)) == (
        "nvidia.com/gpu|product=NVIDIA-A100-SXM4-80GB  1 pod waits (1 GPU, oldest 1 min) · "
        "0 allocated"
    )
    assert pool_line(pool_row(MIG)) == (
        "nvidia.com/mig-1g.10gb|mig=1g.10gb  nobody waits · 3 allocated"
    )


def test_rows_survive_json_and_merge_keeps_the_latest_per_pool_oldest_wait_first() -> None:
    older = pool_row(PoolDemand(**{**_fields(STALL), "ts_ms": NOW - 1, "pending_pods": 99}))
    parts = [
        POOL_ROWS.validate_python(orjson.loads(orjson.dumps([pool_row(MIG), older]))),
        POOL_ROWS.validate_python(orjson.loads(orjson.dumps([pool_row(A100), pool_row(STALL)]))),
    ]
    merged = merge_pools(parts)
    assert [r.pool for r in merged] == [STALL.pool, A100.pool, MIG.pool]
    assert merged[0] == pool_row(STALL)  # the other worker's older copy lost


def _fields(record: PoolDemand) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__slots__}


def series(pools: list[PoolDemand]) -> dict[str, dict[str, float]]:
    text = exposition([], [], [pool_row(p) for p in pools]).decode()
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[s.labels["pool"]] = s.value
            assert set(s.labels) == {"pool", "resource", "product", "mig_profile"}  # no pod
    return out


def test_pool_series_carry_the_record_s_figures_and_no_pod() -> None:
    got = series([STALL, A100, MIG])
    assert got["gpuattr_pool_pending_pods"] == {STALL.pool: 12, A100.pool: 1, MIG.pool: 0}
    assert got["gpuattr_pool_gpus_requested"] == {STALL.pool: 24, A100.pool: 1, MIG.pool: 0}
    # nobody waits for the MIG pool: no oldest wait, never a 0
    assert got["gpuattr_pool_oldest_wait_seconds"] == {STALL.pool: 28 * 86400, A100.pool: 90}
    assert got["gpuattr_pool_allocated_gpus"] == {STALL.pool: 8, A100.pool: 0, MIG.pool: 3}
    assert got["gpuattr_pool_idle_gpus"] == {STALL.pool: 5, A100.pool: 0, MIG.pool: 0}


def test_a_retired_pool_leaves_the_series() -> None:
    assert series([]) == {}


def test_top_prints_the_waiting_lines_above_the_devices() -> None:
    body = {"nodes": [], "pools": orjson.loads(orjson.dumps([pool_row(STALL), pool_row(MIG)]))}
    console = Console(width=400, record=True)
    console.print(render(body, [], "test"))
    text = console.export_text()
    first, second = text.splitlines()[:2]
    assert first.startswith("nvidia.com/gpu  12 pods wait (24 GPUs, oldest 28 d:")
    assert "5 allocated idle ≥ 2 h: ml/nb-0" in first
    assert second.startswith("nvidia.com/mig-1g.10gb|mig=1g.10gb  nobody waits")
    assert text.index("nobody waits") < text.index("NODE")  # above the devices' table


def test_top_without_pools_shows_no_demand_line() -> None:
    console = Console(width=200, record=True)
    console.print(render({"nodes": []}, [], "test"))
    assert "wait" not in console.export_text()
