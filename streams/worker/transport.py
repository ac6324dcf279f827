"""Faust's aiokafka transport with one fix: no input is skipped when partitions change hands.

What goes wrong without it (seen in ``bench.run`` with two workers on a preloaded topic, ~5 % of
the samples never attributed): a worker that is handed a partition nobody has committed yet
starts fetching it from the beginning while Faust still holds the partition paused for table
recovery. Records fetched in that window are dropped by Faust's ``getmany`` (the partition is not
"active"), and the fetch position moves past them. When recovery ends, Faust seeks "to the
committed offsets" — but aiokafka's ``seek_to_committed`` only seeks partitions whose committed
offset is above zero, so a partition without a commit keeps its advanced position and the
dropped records are never processed; later acks then commit past them.

:class:`Consumer` completes the seek: every assigned stream partition (not a changelog, which
recovery positions itself) without a committed offset is sent back to its beginning, as the
worker's ``earliest`` reset policy promises; and when recovery resumes the stream partitions,
they are moved back to their committed offsets once more, because records fetched between the
seek and the resume were dropped the same way (the fault suite caught that one). The cost is
duplicates after a rebalance (at-least-once), never a gap.
"""

from __future__ import annotations

import logging
from typing import Any

import faust
from faust.transport.drivers import aiokafka as driver

log = logging.getLogger(__name__)


class Consumer(driver.Consumer):  # type: ignore[misc]
    async def perform_seek(self) -> None:
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

    def resume_partitions(self, tps: Any) -> None:
        """Resume, first moving stream partitions back to their committed offsets (or start).

        Between Faust's seek and this resume the partitions are still paused, so anything the
        fetcher returned for them in that window was dropped while the position moved on.
        Seeking again here, where nothing of theirs has been processed since the seek, closes
        that window; at worst a record is read twice (at least once)."""
        tps = set(tps)
        assigned = self.assignment()
        for tp in tps:
            if tp in assigned and not self._is_changelog_tp(tp):
                offset = self._committed_offset.get(tp) or 0
                self._thread.seek(driver.ensure_aiokafka_TP(tp), offset)
                self._read_offset[tp] = offset or None
        super().resume_partitions(tps)


class Transport(driver.Transport):  # type: ignore[misc]
    Consumer = Consumer


class App(faust.App):  # type: ignore[misc]
    """A Faust app on :class:`Transport` (everything else is Faust's)."""

    def _new_transport(self) -> Any:
        return Transport(self.conf.broker_consumer, self)
