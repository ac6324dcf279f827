"""The latest demand record of each pool whose demand-events partition this worker owns, for the
query API, ``gpuattr top`` and the Prometheus series.

Like :mod:`streams.worker.live`, a cache of the output stream, not state: the demand stage's
tables are the state. After a restart or rebalance a pool reappears with its next demand record
(every change, and the stage's re-emission on a pending-pod list or a clock tick).
"""

from __future__ import annotations

from collections.abc import Collection

from contract.outputs import PoolDemand


class LiveDemand:
    def __init__(self) -> None:
        self._latest: dict[str, tuple[int, PoolDemand]] = {}

    def put(self, partition: int, record: PoolDemand) -> None:
        """Keep the pool's newest record (an older one, processed again after a crash, is not)."""
        current = self._latest.get(record.pool)
        if current is None or record.ts_ms >= current[1].ts_ms:
            self._latest[record.pool] = (partition, record)

    def retire(self, pool: str) -> None:
        """The pool's tombstone: nobody waits and nothing of it is allocated."""
        self._latest.pop(pool, None)

    def records(self, owned: Collection[int]) -> list[PoolDemand]:
        """The pools of partitions this worker owns now (others are dropped), oldest wait first."""
        for pool in [k for k, (p, _) in self._latest.items() if p not in owned]:
            del self._latest[pool]
        return sorted(
            (r for _, r in self._latest.values()),
            key=lambda r: (r.oldest_since_ms is None, r.oldest_since_ms or 0, r.pool),
        )

    def __len__(self) -> int:
        return len(self._latest)
