"""The demand stage's per-record loop: decode, process, publish, dead-letter — without Faust.

The same failure policy as :mod:`streams.worker.loop`: bad input (undecodable, a record whose
key is not its resource, a record with no place on demand-events) is dead-lettered with its
reason and counted; any other exception is a defect that stops the worker without committing
the record. Demand records also go to ``live`` (the worker's cache for the API), and a clock tick
refreshes it from the stage's tables, so a pool shows again soon after a restart.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Awaitable, Callable

from contract import codec
from contract.inputs import (
    ClockTick,
    NodeSupply,
    PendingPod,
    PendingPodList,
    QueuedWorkload,
    QueuedWorkloadList,
)
from contract.outputs import PoolDemand, PoolDemandRetired
from streams.core.flow.demandstage import (
    DemandClockJump,
    DemandOutput,
    DemandStage,
    UnusableDemandRecord,
)
from streams.worker import selfmetrics
from streams.worker.livedemand import LiveDemand
from streams.worker.loop import DeadLetterFn, Event, Stop, defect, unsigned

log = logging.getLogger(__name__)

PublishDemand = Callable[[DemandOutput], Awaitable[None]]
DEMAND_INPUTS = (
    PendingPod,
    PendingPodList,
    QueuedWorkload,
    QueuedWorkloadList,
    NodeSupply,
    ClockTick,
)


class DemandLoop:
    def __init__(
        self,
        stage: DemandStage,
        publish: PublishDemand,
        dead_letter: DeadLetterFn,
        live: LiveDemand,
        stop: Stop,
        cluster_key: bytes | None = None,
    ) -> None:
        self.stage = stage
        self.cluster_key = cluster_key  # with it, ticks and pending-pod lists must be signed
        self.publish = publish
        self.dead_letter = dead_letter
        self.live = live
        self.stop = stop

    async def run(self, events: AsyncIterable[Event]) -> None:
        async for event in events:
            await self.handle_event(event)

    async def handle_event(self, event: Event) -> None:
        msg = event.message
        selfmetrics.child(selfmetrics.EVENTS_IN, msg.topic).inc()
        try:
            record = codec.decode(event.value)
        except codec.DecodeError as exc:
            selfmetrics.ERRORS.labels("decode").inc()
            await self.dead_letter(event, f"undecodable: {exc}")
            return
        if (why := unsigned(self.cluster_key, record, event)) is not None:
            selfmetrics.ERRORS.labels("unsigned").inc()
            await self.dead_letter(event, f"refused: {why}")
            return
        if not isinstance(record, DEMAND_INPUTS):
            selfmetrics.ERRORS.labels("unusable").inc()
            await self.dead_letter(event, f"unusable: {type(record).__name__} on demand-events")
            return
        try:
            outputs = self.stage.handle(record, msg.partition, msg.key)
        except DemandClockJump as exc:
            selfmetrics.ERRORS.labels("clock-jump").inc()
            await self.dead_letter(event, f"refused: {exc}")
            return
        except UnusableDemandRecord as exc:
            selfmetrics.ERRORS.labels("unusable").inc()
            await self.dead_letter(event, f"unusable: {exc}")
            return
        except Exception as exc:
            raise defect(record, msg, exc, self.stop) from exc
        for out in outputs:
            await self.publish(out)
            if isinstance(out, PoolDemand):
                self.live.put(msg.partition, out)
            elif isinstance(out, PoolDemandRetired):
                self.live.retire(out.pool)
        if isinstance(record, ClockTick):
            for pool in self.stage.pools(msg.partition):
                self.live.put(msg.partition, pool)
