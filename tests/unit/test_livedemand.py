"""The worker's cache of demand records: newest per pool, tombstones remove, partitions it no
longer owns drop out."""

from __future__ import annotations

from contract.outputs import PoolDemand
from streams.worker.livedemand import LiveDemand


def demand(pool: str, ts_ms: int, oldest: int | None, pending: int = 1) -> PoolDemand:
    return PoolDemand(ts_ms, pool, pool, "", "", pending, pending, oldest, (), 0, ())


def test_newest_per_pool_tombstone_and_ownership() -> None:
    live = LiveDemand()
    live.put(0, demand("nvidia.com/gpu", 2_000, 100, pending=3))
    live.put(0, demand("nvidia.com/gpu", 1_000, 100, pending=9))  # older: processed again
    live.put(1, demand("nvidia.com/gpu.shared", 1_500, 50))
    live.put(1, demand("nvidia.com/mig-1g.10gb", 1_500, None, pending=0))
    records = live.records({0, 1})
    assert [r.pool for r in records] == [
        "nvidia.com/gpu.shared",
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
    ]
    assert records[1].pending_pods == 3
    live.retire("nvidia.com/gpu.shared")
    assert [r.pool for r in live.records({0})] == ["nvidia.com/gpu"]  # partition 1 not owned
    assert len(live) == 1
