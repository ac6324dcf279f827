"""The worker's consumer lag on its input topic, per partition it owns (for /metrics).

A rebalance can take a partition away while the lag is read: the position is read with an await
(the consumer thread answers), and the partitions can change hands in that time. aiokafka's
``highwater`` *asserts* that the partition is assigned, so reading it for a partition revoked
meanwhile raised ``AssertionError`` in the gauge timer, and Faust stopped the whole worker for it
(a hand-over fault test on CI: the remaining worker crashed just as a rebalance gave it every
partition again). So every partition is checked again after the await, and skipped when it moved:
its new owner reports it.
"""

from __future__ import annotations

from typing import Any

from aiokafka.errors import IllegalStateError

from streams.worker.api import assignment


async def consumer_lags(app: Any, topic: str) -> dict[str, int]:
    """Records not yet read, per partition of ``topic`` that this worker owns before and after
    reading its position (a partition whose high watermark is not known yet is left out)."""
    lags: dict[str, int] = {}
    for tp in assignment(app):
        if tp.topic != topic:
            continue
        try:
            position = await app.consumer.position(tp)
        except IllegalStateError:  # revoked while we looked: its new owner reports it
            continue
        if tp not in assignment(app):  # revoked during the await: highwater() would assert
            continue
        highwater = app.consumer.highwater(tp)  # None until the first fetch returns
        if position is not None and highwater is not None:
            lags[str(tp.partition)] = max(0, highwater - position)
    return lags
