"""The clock of every input partition: a ``clock.tick`` into each, every interval — of the
node-events topic and of the demand-events topic (the demand stage's windows run on it too).

A node's records carry its own time; a node that falls silent says nothing, so nothing of its
own tells the worker time has passed. The ticks do, per partition, in event time (this role's
clock), and they are data in the log like every other record: a worker that processes them
again after a crash comes to the same decisions (:mod:`streams.core.lifetimes`).
"""

from __future__ import annotations

import asyncio
import logging

from agents.publish import DEMAND_ROLE, INPUT_ROLE, Publisher
from agents.types import NowMs
from contract.inputs import ClockTick

log = logging.getLogger(__name__)


async def tick(publisher: Publisher, interval_s: float, now_ms: NowMs) -> None:
    loop = asyncio.get_running_loop()
    next_at = loop.time()
    while True:
        ts_ms = now_ms()
        for role in (INPUT_ROLE, DEMAND_ROLE):
            partitions = await publisher.partitions(role)
            for partition in range(partitions):
                await publisher.publish_tick(ClockTick(partition, ts_ms), role)
            log.debug("ticked %d partitions of %s at %d", partitions, role, ts_ms)
        next_at = max(next_at + interval_s, loop.time())
        await asyncio.sleep(next_at - loop.time())
