"""The agent's first samples wait for the records that identify their holders."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agents.selfmetrics import START_GATE_TIMEOUTS
from agents.startgate import StartGate
from agents.types import AgentRecord
from contract.inputs import DcgmSample, PodListSnapshot, PodResourcesSnapshot

LISTING = PodListSnapshot("n", 1, ("uid-1",))
SNAPSHOT = PodResourcesSnapshot("n", 1, ())
SAMPLE = DcgmSample("n", 2, "GPU-1", 0, "A100", "n")


async def test_wait_returns_once_every_needed_kind_was_published() -> None:
    published: list[AgentRecord] = []

    async def emit(record: AgentRecord) -> None:
        published.append(record)

    gate = StartGate(emit, (PodListSnapshot, PodResourcesSnapshot), wait_s=60)
    waiter = asyncio.create_task(gate.wait())
    await gate.emit(SNAPSHOT)
    await asyncio.sleep(0)  # let the waiter run: it must still be waiting for the pod list
    assert not waiter.done()
    assert gate.missing() == ["PodListSnapshot"]
    await gate.emit(LISTING)
    await asyncio.wait_for(waiter, timeout=5)
    await gate.emit(SAMPLE)
    assert published == [SNAPSHOT, LISTING, SAMPLE]  # everything passes through, in order


async def test_a_kind_counts_only_once_acknowledged() -> None:
    release = asyncio.Event()

    async def slow_emit(record: AgentRecord) -> None:
        await release.wait()

    gate = StartGate(slow_emit, (PodListSnapshot,), wait_s=60)
    sending = asyncio.create_task(gate.emit(LISTING))
    await asyncio.sleep(0)
    assert gate.missing() == ["PodListSnapshot"]  # handed over, not yet acknowledged
    release.set()
    await asyncio.wait_for(sending, timeout=5)
    assert gate.missing() == []


async def test_the_wait_is_bounded_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    async def emit(record: AgentRecord) -> None:
        return None

    before = START_GATE_TIMEOUTS._value.get()
    gate = StartGate(emit, (PodListSnapshot,), wait_s=0.01)
    with caplog.at_level(logging.WARNING, logger="agents.startgate"):
        await asyncio.wait_for(gate.wait(), timeout=5)
    assert START_GATE_TIMEOUTS._value.get() == before + 1
    assert "no PodListSnapshot published" in caplog.text
