"""Faust's aiokafka transport with one fix: no input is skipped when partitions change hands.

What goes wrong without it (seen in ``bench.run`` with two workers on a preloaded topic, ~5 % of
the samples never attributed): a worker that is handed a partition nobody has committed yet
starts fetching it from the beginning while Faust still holds the partition paused for table
recovery. Records fetched in that window are dropped by Faust's ``getmany`` (the partition is not
"active"), and the fetch position moves past them. When recovery ends, Faust seeks "to the
committed offsets" — but aiokafka's ``seek_to_committed`` only seeks partitions whose committed
offset is above zero, so a partition without a commit keeps its advanced position and the
dropped records are never processed; later acks then commit past them.

A second window: Faust marks the stream partitions active (``resume_partitions``) *before* it
awaits that seek, and while recovery has the flow running, the fetcher hands out records read
from the stale position in between. Moving the position back inside ``resume_partitions`` is
not an option: it is synchronous, runs on the event loop, and aiokafka's ``seek`` deletes the
partition's entry from the fetched-records dict that the consumer thread iterates at the same
moment (``Drain messages raised: KeyError(TopicPartition(...))``, then ``Fetcher: Crashed``).

:class:`Consumer` therefore (1) completes the seek: every assigned stream partition (not a
changelog, which recovery positions itself) without a committed offset is sent back to its
beginning, on the consumer thread, as the worker's ``earliest`` reset policy promises; and
(2) holds stream partitions that Faust resumes inactive until that seek has returned, then
activates them in one step on the event loop. Every seek runs on the consumer thread. Both
places where Faust resumes stream partitions (``Recovery._resume_streams`` and
``Recovery.on_recovery_completed`` in faust-streaming 0.15) await ``perform_seek`` right after
the resume and before the flow resumes. The cost is duplicates after a rebalance (at-least-once),
never a gap. docs/RELIABILITY.md describes both upstream defects.

A third window, on the consumer thread: a fetch asked for before a rebalance can return after it.
aiokafka's ``fetched_records`` waits out a reassignment and then drains the partitions it was
asked for — the old generation's active set, standby changelogs included — from the *new*
assignment's positions, possibly after table recovery has sought them. Faust then drops the
records (the flow is stopped until recovery resumes it, or the generation has moved on) with
their positions already past them, and recovery waits for changelog records that will never
come ("No event received for active tp ... since recovery start", every table at once; a
hand-over fault test on CI). :class:`ConsumerThread` hands such a fetch back: when the
assignment changed while the fetch ran, or the flow is stopped when it returns, every drained
partition is sought back to its first drained record in the same step on the consumer thread,
and nothing is returned; the records are fetched again under the assignment that owns them.

A fourth, the cost of every hand-over: Faust's ``on_partitions_revoked`` forgets the revoked
partitions' acknowledged offsets before anything else, and its commits discard revoked
partitions, so what a worker processed since its last periodic commit was never committed and
the partition's next owner processed it again (a commit interval's worth of copies per
rebalance). :class:`Consumer` commits the revoked stream partitions' progress first, through
Faust's own commit (the outbox and the producer flushed before it): aiokafka calls the revoke
listener with the old assignment still in place, so the commit is still this member's. A commit
the group refuses (it has already moved on) is logged by Faust and leaves the records to be
processed again by the partition's next owner. Before that commit the consumer stops handing
messages on, the streams' queued events are dropped unprocessed (they are fetched again by whoever
owns their partitions) and an event being processed is waited for (Faust's own revoke handling does
all three next), so the commit covers everything processed: without that, the streams of a saturated
worker processed 61 to 172 more records while the commit was under way (tens of milliseconds;
``bench.run``'s two workers), and each was processed again by its next owner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence, Set
from typing import Any

import faust
from faust.transport.drivers import aiokafka as driver
from mode.services import WaitResults

from streams.worker import eager

log = logging.getLogger(__name__)


class ConsumerThread(driver.AIOKafkaConsumerThread):  # type: ignore[misc]
    async def _fetch_records(
        self,
        consumer: Any,
        active_partitions: Set[Any] | None,
        timeout: float | None = None,  # noqa: ASYNC109 (Faust's signature)
        max_records: int | None = None,
    ) -> Any:
        """Drain only partitions that are active when the drain begins.

        Faust hands over its live set of active partitions, which the event loop keeps changing
        while this thread reads it; and aiokafka reads an *empty* set as "every partition".
        So a fetch asked for while some partition was active, run after the last one was
        paused, drained every paused partition, and Faust then dropped those records with the
        positions already past them. A snapshot taken here (one step under the GIL) never
        drains a paused partition, so its position never moves without its records being
        processed. A drain that straddled a rebalance, or that returns to a stopped flow, is
        handed back (module doc, third window)."""
        if active_partitions is not None:
            active_partitions = frozenset(active_partitions)
            if not active_partitions:
                return {}
        before = current_assignment(consumer)
        records = await super()._fetch_records(
            consumer, active_partitions, timeout=timeout, max_records=max_records
        )
        if records and (
            current_assignment(consumer) is not before or not self.consumer.flow_active
        ):
            hand_back(consumer, records)
            return {}
        return records


def current_assignment(consumer: Any) -> object | None:
    """aiokafka's assignment object: a new one on every rebalance (None while one runs)."""
    subscription = consumer._fetcher._subscriptions.subscription
    return None if subscription is None else subscription.assignment


def hand_back(consumer: Any, records: Mapping[Any, Sequence[Any]]) -> None:
    """Undo a drain: every still-assigned partition is sought back to its first drained record
    (synchronously, so no other seek on the consumer thread comes in between)."""
    assigned = consumer.assignment()
    back = {tp: batch[0].offset for tp, batch in records.items() if batch and tp in assigned}
    for tp, offset in back.items():
        consumer.seek(tp, offset)
    log.info(
        "a fetch straddled a rebalance or a stopped flow: %d records of %d partitions handed back",
        sum(len(batch) for batch in records.values()),
        len(back),
    )


class Consumer(driver.Consumer):  # type: ignore[misc]
    async def wait_first(self, *coros: Any, timeout: Any = None) -> WaitResults:  # noqa: ASYNC109
        """``Service.wait_first`` whose first coroutine (Faust's fetcher: the message's handler)
        first runs one step at once (:mod:`streams.worker.eager`). Ended there, the result is
        what Faust's own would give (its other waits were not needed: closed unstarted);
        otherwise the handler continues where it stopped, under Faust's own wait_first with
        the others. Started in a task of its own, the handler's first step would
        have run before any of the others all the same (the first task created runs first)."""
        first = coros[0] if coros else None
        if timeout is not None or not asyncio.iscoroutine(first):
            return await super().wait_first(*coros, timeout=timeout)
        try:
            started = eager.first_step(first)
        except BaseException:
            _close(coros[1:])
            raise
        if started.done:
            _close(coros[1:])
            # one turn of the loop, as Faust's tasks gave: the stream's agent takes the event
            # before the fetcher hands over the next. Without it the fetcher filled the stream's
            # buffer up to its high-water mark, Faust paused the partition, and a fetch already
            # under way without it waited out its timeout (1 s stalls, several a minute)
            await asyncio.sleep(0)
            if self._stopped.is_set() or self._crashed.is_set():
                return WaitResults([], [], True)
            return WaitResults([first], [started.result], False)
        return await super().wait_first(started.rest, *coros[1:])

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # stream partitions Faust has resumed, held inactive until the next seek has returned
        self._held: set[Any] = set()
        self._revocations = 0  # a seek begun before a revocation releases nothing

    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def perform_seek(self) -> None:
        held = set(self._held)  # resumed before this seek began: the seek covers them
        revocations = self._revocations
        await super().perform_seek()
        uncommitted = [
            tp
            for tp in self.assignment()
            if not self._is_changelog_tp(tp) and not self._committed_offset.get(tp)
        ]
        if uncommitted:
            log.info("rewinding %d uncommitted stream partitions to their start", len(uncommitted))
            await self._thread.seek_to_beginning(*map(driver.ensure_aiokafka_TP, uncommitted))
            for tp in uncommitted:
                self._read_offset[tp] = None
        if revocations == self._revocations:
            self._release(held)

    def resume_partitions(self, tps: Any) -> None:
        """Resume changelog partitions now; stream partitions only after the seek that Faust
        awaits next (see the module doc)."""
        tps = set(tps)
        streams = {tp for tp in tps if not self._is_changelog_tp(tp)}
        self._held |= streams
        super().resume_partitions(tps - streams)

    def pause_partitions(self, tps: Any) -> None:
        tps = set(tps)
        self._held -= tps
        super().pause_partitions(tps)

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self._held -= set(revoked)
        self._revocations += 1
        streams = {tp for tp in revoked if not self._is_changelog_tp(tp)}
        # the module doc: commit what was processed of them while still ours (as Faust's own
        # revoke handling, nothing once the worker is stopping)
        if streams and not self.app.should_stop:
            # what the commit covers is all that was processed (the module doc; Faust's own
            # handling does the same next): no message handed on, the queued ones dropped, the
            # one in progress acknowledged
            self.stop_flow()
            self.app.flow_control.suspend()
            self.app.flow_control.clear()
            await self.wait_empty()
            await self.commit(streams)
        await super().on_partitions_revoked(revoked)

    def _release(self, held: set[Any]) -> None:
        """Activate the held partitions that are still held and still assigned."""
        ready = held & self._held & self.assignment()
        self._held -= held
        if ready:
            super().resume_partitions(ready)


def _close(waits: Sequence[Any]) -> None:
    """Close the coroutines among ``waits`` that were never started (``Event.wait()``)."""
    for wait in waits:
        if asyncio.iscoroutine(wait):
            wait.close()


class Producer(driver.Producer):  # type: ignore[misc]
    """Faust's aiokafka producer whose flush first drains the app's outbox
    (:mod:`streams.worker.outbox`): Faust flushes the producer before every offset commit and on
    a rebalance, so no input is committed before the records it caused are handed over and
    written."""

    async def flush(self) -> None:
        outbox = getattr(self.app, "outbox", None)
        if outbox is not None and self._producer is not None:
            await outbox.settle(super().flush)
        else:
            await super().flush()


class Transport(driver.Transport):  # type: ignore[misc]
    Consumer = Consumer
    Producer = Producer


class Worker(faust.Worker):  # type: ignore[misc]
    """Faust's worker without its terminal spinner.

    At a log level of WARN or above Faust installs a spinner that turns on every log record,
    and for that sets the *root* logger to DEBUG: every aiokafka send then builds a debug
    record nobody prints (8.7 % of a saturated worker's time, measured with bench.where), and
    the spinner's escape codes end up in the log files."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spinner = None


class App(faust.App):  # type: ignore[misc]
    """A Faust app on :class:`Transport` (everything else is Faust's). ``outbox``: where the
    worker's outputs and its tables' changelog records are queued; ``demand_stage``: the demand
    agent's stage (both set by ``build_app``)."""

    outbox: Any = None
    demand_stage: Any = None  # the demand agent's stage (set by ``build_app``)

    def _new_transport(self) -> Any:
        return Transport(self.conf.broker_consumer, self)
