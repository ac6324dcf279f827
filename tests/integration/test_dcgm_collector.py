"""The DCGM collector against the real HTTP exporter double: faults are counted, never fatal."""

from __future__ import annotations

import aiohttp

from agents.dcgm.collect import DcgmCollector
from agents.selfmetrics import REJECTED_LINES, SOURCE_ERRORS
from agents.types import AgentRecord
from contract.inputs import DcgmScrape
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
