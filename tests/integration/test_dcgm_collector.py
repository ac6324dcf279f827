"""The DCGM collector against the real HTTP exporter double: faults are counted, never fatal."""

from __future__ import annotations

import aiohttp

from agents.dcgm.collect import DcgmCollector
from agents.selfmetrics import REJECTED_LINES, SOURCE_ERRORS
from agents.types import AgentRecord
from contract.inputs import DcgmScrape, SinceLast
from sim.exporter_rows import ExporterRow
from sim.exporter_server import ExporterDouble

ROWS = [
    ExporterRow(
        i,
        f"GPU-{i}",
        "L4",
        "node-1",
        values=(("DCGM_FI_DEV_GPU_UTIL", 10.0 * i), ("DCGM_FI_DEV_FB_USED", 100.0)),
    )
    for i in range(3)
]


def counter(source: str, reason: str) -> float:
    return float(SOURCE_ERRORS.labels(source, reason)._value.get())


async def test_scrapes_every_gpu_and_survives_faults() -> None:
    out: list[AgentRecord] = []

    async def emit(record: AgentRecord) -> None:
        out.append(record)

    async with (
        ExporterDouble(lambda: ROWS) as exporter,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.3)) as session,
    ):
        collector = DcgmCollector(
            node="node-1",
            url=exporter.url,
            interval_s=0.05,
            timeout_s=0.3,
            emit=emit,
            now_ms=lambda: 7,
        )
        assert await collector.scrape_once(session) == 3
        (scrape,) = out  # one record per scrape, every device in it
        assert isinstance(scrape, DcgmScrape)
        assert [(s.uuid, s.util_pct) for s in scrape.samples] == [
            ("GPU-0", 0),
            ("GPU-1", 10),
            ("GPU-2", 20),
        ]

        before_500 = counter("dcgm", "http_500")
        exporter.fail_next(1)
        assert await collector.scrape_once(session) == 0
        assert counter("dcgm", "http_500") == before_500 + 1

        before_timeout = counter("dcgm", "timeout")
        exporter.delay_next(1, 1.0)
        assert await collector.scrape_once(session) == 0
        assert counter("dcgm", "timeout") == before_timeout + 1

        rejected = REJECTED_LINES._value.get()
        exporter.garbage_lines(1)
        assert await collector.scrape_once(session) == 3  # the other GPUs still publish
        assert REJECTED_LINES._value.get() == rejected + 1

        exporter.truncate_next(1)
        assert await collector.scrape_once(session) >= 1  # what arrived whole still counts
        assert await collector.scrape_once(session) == 3  # and it recovers fully


def _replays(total: float, gpus: int = 1) -> list[ExporterRow]:
    values = (("DCGM_FI_DEV_GPU_UTIL", 50.0), ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", total))
    return [ExporterRow(i, f"GPU-{i}", "L4", "node-1", values=values) for i in range(gpus)]


async def test_counters_publish_increases_and_a_restart_publishes_a_reset() -> None:
    """Two scrapes with a rising counter publish its increase; a failed scrape or a refused
    publish leaves the baseline alone; a restarted exporter (the total falls) is a reset."""
    rows = _replays(2)
    now = [0]  # the injected clock: each scrape 15 s after the last
    refuse = False
    out: list[DcgmScrape] = []

    async def emit(record: AgentRecord) -> None:
        if refuse:
            raise RuntimeError("broker refused")
        assert isinstance(record, DcgmScrape)
        out.append(record)

    def published() -> SinceLast | None:
        return out[-1].samples[0].since_last

    async with (
        ExporterDouble(lambda: rows) as exporter,
        aiohttp.ClientSession() as session,
    ):
        collector = DcgmCollector(
            node="node-1",
            url=exporter.url,
            interval_s=15,
            timeout_s=1,
            emit=emit,
            now_ms=lambda: now[0],
            emit_attempts=1,
        )

        async def scrape() -> int:
            count = await collector.scrape_once(session)
            now[0] += 15_000
            return count

        assert await scrape() == 1  # t=0
        assert published() is None  # first sight: no increase yet

        rows = _replays(5)
        assert await scrape() == 1  # t=15 s
        assert published() == SinceLast(15_000, pcie_replays=3)

        rows = _replays(9)
        exporter.fail_next(1)
        assert await scrape() == 0  # t=30 s: HTTP 500
        refuse = True
        assert await scrape() == 0  # t=45 s: the publisher refuses
        refuse = False
        assert await scrape() == 1  # t=60 s: since the last published
        assert published() == SinceLast(45_000, pcie_replays=4)

        rows = _replays(1)  # the exporter restarted: its total starts again
        assert await scrape() == 1
        assert published() == SinceLast(15_000, resets=("pcie_replays",))
        rows = _replays(3)
        assert await scrape() == 1
        assert published() == SinceLast(15_000, pcie_replays=2)

        # the baseline holds the devices of the last published scrape only
        rows = _replays(3, gpus=2)
        assert await scrape() == 2
        assert [s.since_last for s in out[-1].samples] == [SinceLast(15_000, pcie_replays=0), None]
        rows = _replays(3, gpus=1)
        assert await scrape() == 1
        rows = _replays(3, gpus=2)
        assert await scrape() == 2
        assert out[-1].samples[1].since_last is None  # GPU-1 went away: first sight again
