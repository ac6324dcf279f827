"""The flush before a commit covers the dead letters that a batch refused for its size queued
while that flush ran (:meth:`streams.worker.outbox.Outbox.settle`)."""

from __future__ import annotations

import asyncio

from aiokafka.errors import RecordTooLargeError

from tests.unit.test_outbox import dead_letters, outbox_over, producer


async def test_the_flush_covers_the_dead_letters_a_refused_batch_queued_meanwhile() -> None:
    prod = producer(dead={0})
    outbox = outbox_over(prod)
    outbox.add("c", b"k1", b"v" * 50, partition=2)
    flushes = 0

    async def flush() -> None:  # the producer's: the broker refuses the first batch for its size
        nonlocal flushes
        flushes += 1
        for fut in prod.futures:
            if not fut.done():
                if flushes == 1:
                    fut.set_exception(RecordTooLargeError())
                else:
                    fut.set_result(None)
        await asyncio.sleep(0)  # the futures' done callbacks run, as before a real flush returns

    await outbox.settle(flush)
    assert [(d.topic, d.key, d.cause) for d in dead_letters(prod)] == [
        ("c", "k1", "broker-refused")
    ]
    assert len(outbox) == 0  # nothing left behind for a later drain: the commit covers it
    assert flushes == 2


async def test_a_flush_with_nothing_refused_runs_once() -> None:
    prod = producer(out={0})
    outbox = outbox_over(prod)
    outbox.add("out", b"k", b"v", partition=0)
    flushes: list[int] = []

    async def flush() -> None:
        flushes.append(len(prod.sent))
        for fut in prod.futures:
            if not fut.done():
                fut.set_result(None)

    await outbox.settle(flush)
    assert flushes == [1]  # drained before the flush, once
