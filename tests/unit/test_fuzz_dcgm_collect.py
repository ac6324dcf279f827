"""Fuzz the dcgm-exporter collector with mutated captures: rejections counted and logged.

The collector counts each rejected line in ``gpuattr_agent_rejected_metric_lines_total`` and logs
it with its line number, reason and the exporter URL; it publishes exactly the samples
``parse_exposition`` reads; a body with invalid UTF-8 is counted and read anyway.
"""

from __future__ import annotations

import logging
import re

from hypothesis import HealthCheck, given, settings
from prometheus_client import REGISTRY

from agents.dcgm.collect import DcgmCollector
from agents.types import AgentRecord
from contract.inputs import DcgmScrape
from tests.dcgm_mutations import CAPTURES, NODE, REASONS, TS, Line, mutated_captures, parse
from tests.fuzz_strategies import captured
from tests.helpers import BodySession

# --- the collector: rejections are counted and logged with their context ---------------------


def rejected_total() -> float:
    return REGISTRY.get_sample_value("gpuattr_agent_rejected_metric_lines_total") or 0.0


URL = "http://dcgm-exporter.test:9400/metrics"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutated_captures())
async def test_collector_counts_and_logs_every_rejected_line(
    case: tuple[str, str, list[Line], set[str], bool],
) -> None:
    _, text, _, _, _ = case
    expected = parse(text)
    published: list[AgentRecord] = []

    async def emit(record: AgentRecord) -> None:
        published.append(record)

    collector = DcgmCollector(
        node=NODE, url=URL, interval_s=5, timeout_s=1, emit=emit, now_ms=lambda: TS
    )
    before = rejected_total()
    with captured("agents.dcgm.collect") as logs:
        count = await collector.scrape_once(BodySession(text.encode()))  # type: ignore[arg-type]
    assert rejected_total() - before == len(expected.rejected)
    assert count == len(expected.samples)
    # one record per scrape, every device's sample in it; nothing published for no device
    scrape = DcgmScrape(NODE, TS, expected.samples, URL)
    assert published == ([scrape] if expected.samples else [])
    lines = [r for r in logs.records if "rejected dcgm-exporter line" in r.getMessage()]
    assert len(lines) == len(expected.rejected)  # every one, at WARNING or DEBUG
    warned = [r.getMessage() for r in lines if r.levelno == logging.WARNING]
    assert {r.reason for r in expected.rejected} == {
        reason for reason in REASONS if any(f": {reason}: " in m for m in warned)
    }
    for message in warned:
        assert URL in message
        assert re.search(r"line \d+ ", message)


async def test_invalid_utf8_is_counted_and_read_anyway() -> None:
    published: list[AgentRecord] = []

    async def emit(record: AgentRecord) -> None:
        published.append(record)

    text = CAPTURES[sorted(CAPTURES)[0]]
    body = text.encode().replace(b'modelName="', b'modelName="\xff\xfe', 1)
    collector = DcgmCollector(
        node=NODE, url=URL, interval_s=5, timeout_s=1, emit=emit, now_ms=lambda: TS
    )
    labels = {"source": "dcgm", "error": "encoding"}
    before = REGISTRY.get_sample_value("gpuattr_agent_source_errors_total", labels) or 0.0
    with captured("agents.dcgm.collect") as logs:
        assert await collector.scrape_once(BodySession(body)) == 1  # type: ignore[arg-type]
    after = REGISTRY.get_sample_value("gpuattr_agent_source_errors_total", labels)
    assert after == before + 1
    assert any("invalid UTF-8" in m and URL in m for m in logs.messages(logging.WARNING))
    (scrape,) = published
    assert isinstance(scrape, DcgmScrape)
    (sample,) = scrape.samples
    assert "\ufffd" in sample.model
