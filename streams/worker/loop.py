"""The worker's per-record loop: decode, process, publish, dead-letter — without Faust.

:func:`streams.worker.app.build_app` wires it to a Faust stream, the producer and the
dead-letter topic; tests drive it with a plain async generator of small fake events.
The events only need the shape in :class:`Event`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Protocol

from contract import codec
from contract.outputs import AttributionEvent
from streams.core.processor import Output, Processor
from streams.worker import selfmetrics
from streams.worker.live import LiveDevices

log = logging.getLogger(__name__)


class Message(Protocol):
    """Where an input record came from (a Faust ``Message``)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


class Event(Protocol):
    """One input record and its message (a Faust ``Event``)."""

    @property
    def value(self) -> bytes: ...
    @property
    def message(self) -> Message: ...


Publish = Callable[[Output], Awaitable[None]]
DeadLetterFn = Callable[[Event, str], Awaitable[None]]


class RecordLoop:
    """Decodes each event, hands the record to the processor and publishes its outputs.

    An undecodable record, or one the processor raises on, is dead-lettered and the loop goes
    on with the next event. Attribution events are also kept in ``live`` (for the query API),
    under the partition the input came from.
    """

    def __init__(
        self, processor: Processor, publish: Publish, dead_letter: DeadLetterFn, live: LiveDevices
    ) -> None:
        self.processor = processor
        self.publish = publish
        self.dead_letter = dead_letter
        self.live = live

    async def run(self, events: AsyncIterable[Event]) -> None:
        async for event in events:
            await self.handle_event(event)

    async def handle_event(self, event: Event) -> None:
        selfmetrics.EVENTS_IN.labels(event.message.topic).inc()
        try:
            record = codec.decode(event.value)
        except codec.DecodeError as exc:
            selfmetrics.ERRORS.labels("decode").inc()
            await self.dead_letter(event, f"undecodable: {exc}")
            return
        try:
            outputs = self.processor.handle(record)
        except Exception as exc:
            selfmetrics.ERRORS.labels("process").inc()
            log.exception("processing %s failed", type(record).__name__)
            await self.dead_letter(event, f"{type(exc).__name__}: {exc}")
            return
        for out in outputs:
            await self.publish(out)
            if isinstance(out, AttributionEvent):
                self.live.update(event.message.partition, out)
