"""The worker's per-record loop: decode, process, publish, dead-letter — without Faust.

:func:`streams.worker.app.build_app` wires it to a Faust stream, the producer and the
dead-letter topic; tests drive it with a plain async generator of small fake events.
The events only need the shape in :class:`Event`.

Failure policy: bad *input* — a payload the codec cannot read, a clock tick or ClusterPolicy
not signed with the cluster role's key (:func:`unsigned`), a record whose Kafka key is not the
node its payload names (:func:`foreign_node`), a record too far ahead of its partition's event
time, or a record that has no place on the input topic — is dead-lettered with its reason,
counted, and the loop goes on. Any other
exception is a defect in our own code: dead-lettering it would drop a node's data silently. The
loop counts it (``gpuattr_worker_errors_total{kind="defect"}``), logs it with its traceback,
stops the worker (``stop``) and ends without acknowledging the record, so its offset is never
committed: the restarted worker meets the same record again, and the defect stays visible
until it is fixed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from typing import Protocol

from contract import codec, signature
from contract.outputs import AttributionEvent, TelemetryRefused, UsageUncredited
from streams.core.flow.processor import ClockJump, Output, Processor, UnusableRecord
from streams.worker import selfmetrics
from streams.worker.live import LiveDevices

log = logging.getLogger(__name__)
REFUSAL_LOG_EVERY_S = 600.0


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
    @property
    def headers(self) -> signature.Headers: ...


class Event(Protocol):
    """One input record and its message (a Faust ``Event``)."""

    @property
    def value(self) -> bytes: ...
    @property
    def message(self) -> Message: ...


PublishAll = Callable[[Sequence[Output]], Awaitable[None]]
DeadLetterFn = Callable[[Event, str], Awaitable[None]]
Stop = Callable[[BaseException], None]


def foreign_node(key: bytes | None, record: object) -> str | None:
    """Why a record may not be processed under its key, or None when key and payload agree.

    The input topic is keyed by node, and a node's state lives in the partition of its key: a
    record whose payload names a node other than its key (or that has no key) would write that
    node's state into the wrong partition.
    Records without a ``node`` are left to the processor (it refuses what it does not handle)."""
    node = getattr(record, "node", None)
    if not isinstance(node, str):
        return None
    if key is None:
        return f"record of node {node!r} without a key"
    if key != node.encode():
        return f"key {key.decode(errors='replace')!r} but payload of node {node!r}"
    return None


def unsigned(key: bytes | None, record: object, event: Event) -> str | None:
    """Why a record of the cluster role's kinds is not honoured as its own (bad or no
    signature: :mod:`contract.signature`); ``None`` when it is, or this worker has no key."""
    if key is None:
        return None
    return signature.refusal(key, record, event.value, event.message.headers)


class ProcessingDefect(RuntimeError):
    """Our own code failed on a record: the worker stops rather than skip it."""


def defect(record: object, msg: Message, exc: Exception, stop: Stop) -> ProcessingDefect:
    """Our own code failed on ``record``: counted, logged critical, the worker stopped without
    committing it (never dead-lettered). Returns the error to raise."""
    selfmetrics.ERRORS.labels("defect").inc()
    log.critical(
        "processing %s from %s[%d]@%d failed: a defect, stopping the worker without committing it",
        type(record).__name__,
        msg.topic,
        msg.partition,
        msg.offset,
        exc_info=exc,
    )
    stop(exc)
    return ProcessingDefect(f"{type(record).__name__} at {msg.offset}: {exc!r}")


class RecordLoop:
    """Decodes each event, hands the record to the processor and publishes its outputs (all of
    a record's in one call, :mod:`streams.worker.publisher`).

    Bad input is dead-lettered and the loop goes on; a defect stops it (module docstring).
    Attribution events are also kept in ``live`` (for the query API), under the partition the
    input came from.
    """

    def __init__(
        self,
        processor: Processor,
        publish_all: PublishAll,
        dead_letter: DeadLetterFn,
        live: LiveDevices,
        stop: Stop,
        cluster_key: bytes | None = None,
    ) -> None:
        """``cluster_key``: the cluster role's signing key; with it, a clock tick or
        ClusterPolicy is honoured only signed with it."""
        self.processor = processor
        self.cluster_key = cluster_key
        self.publish_all = publish_all
        self.dead_letter = dead_letter
        self.live = live
        self.stop = stop
        self._refusals: dict[str, tuple[str, float]] = {}

    def _log_refusal(self, refused: TelemetryRefused) -> None:
        """A refusal is logged when it starts or changes, and again every ten minutes while it
        lasts (each refused scrape is counted and flagged all the same)."""
        now = time.monotonic()
        last = self._refusals.get(refused.node)
        if last is not None and last[0] == refused.reason and now - last[1] < REFUSAL_LOG_EVERY_S:
            return
        if len(self._refusals) > 10_000:  # bounded: forget the oldest
            self._refusals.pop(next(iter(self._refusals)))
        self._refusals[refused.node] = (refused.reason, now)
        log.warning("node %s: dcgm-exporter answer refused: %s", refused.node, refused.reason)

    async def run(self, events: AsyncIterable[Event]) -> None:
        async for event in events:
            await self.handle_event(event)

    async def handle_event(self, event: Event) -> None:
        selfmetrics.child(selfmetrics.EVENTS_IN, event.message.topic).inc()
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
        if (mismatch := foreign_node(event.message.key, record)) is not None:
            selfmetrics.ERRORS.labels("key-mismatch").inc()
            await self.dead_letter(event, f"refused: {mismatch}")
            return  # checked before the processor: no table changes
        try:
            outputs = self.processor.handle(record, event.message.partition)
        except ClockJump as exc:
            selfmetrics.ERRORS.labels("clock-jump").inc()
            await self.dead_letter(event, f"refused: {exc}")
            return
        except UnusableRecord as exc:
            selfmetrics.ERRORS.labels("unusable").inc()
            await self.dead_letter(event, f"unusable: {exc}")
            return
        except Exception as exc:
            raise defect(record, event.message, exc, self.stop) from exc
        await self.publish_all(outputs)  # the record's outputs together, in order
        verdicts: dict[str, int] = {}
        origins: dict[str, int] = {}
        partition = event.message.partition
        for out in outputs:
            if isinstance(out, AttributionEvent):
                self.live.update(partition, out)
                if out.origin == "sample":
                    verdict = out.exporter.verdict
                    verdicts[verdict] = verdicts.get(verdict, 0) + 1
                else:
                    origins[out.origin] = origins.get(out.origin, 0) + 1
            elif isinstance(out, TelemetryRefused):
                selfmetrics.child(selfmetrics.SCRAPES_REFUSED, out.cause).inc()
                self._log_refusal(out)
            elif isinstance(out, UsageUncredited):
                selfmetrics.child(selfmetrics.USAGE_UNCREDITED, out.reading.reason).inc()
        for said, n in verdicts.items():  # per record, not per output
            selfmetrics.child(selfmetrics.EXPORTER_VERDICTS, said).inc(n)
        for made_by, n in origins.items():
            selfmetrics.child(selfmetrics.SPINE_EVENTS, made_by).inc(n)
