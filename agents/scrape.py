"""Scrape dcgm-exporter's ``/metrics`` every interval and publish one sample per device."""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp

from agents.dcgm import parse_exposition
from agents.events import DcgmSample
from agents.selfmetrics import REJECTED_LINES, SOURCE_ERRORS, SOURCE_UP
from agents.types import Emit, NowMs

log = logging.getLogger(__name__)


class DcgmCollector:
    def __init__(
        self,
        *,
        node: str,
        url: str,
        interval_s: float,
        timeout_s: float,
        emit: Emit,
        now_ms: NowMs,
        emit_retries: int = 5,
    ) -> None:
        self.node = node
        self.url = url
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.emit = emit
        self.now_ms = now_ms
        self.emit_retries = emit_retries
        self._down_since: float | None = None
        self._reasons_logged: dict[str, float] = {}

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                started = time.monotonic()
                await self.scrape_once(session)
                await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))

    async def scrape_once(self, session: aiohttp.ClientSession) -> int:
        """One scrape; returns the number of samples published."""
        ts_ms = self.now_ms()
        try:
            async with session.get(self.url) as resp:
                if resp.status != 200:
                    self._down(f"http_{resp.status}", f"HTTP {resp.status}")
                    return 0
                text = await resp.text()
        except TimeoutError:
            self._down("timeout", f"no answer within {self.timeout_s}s")
            return 0
        except aiohttp.ClientError as exc:
            self._down("unreachable", str(exc) or type(exc).__name__)
            return 0
        self._up()
        result = parse_exposition(text, node=self.node, ts_ms=ts_ms)
        for bad in result.rejected:
            REJECTED_LINES.inc()
            self._log_rejected(bad.line_no, bad.reason, bad.line)
        for sample in result.samples:
            await self._emit_with_retry(sample)
        return len(result.samples)

    async def _emit_with_retry(self, sample: DcgmSample) -> None:
        delay = 0.1
        for attempt in range(1, self.emit_retries + 1):
            try:
                await self.emit(sample)
                return
            except (OSError, RuntimeError) as exc:
                SOURCE_ERRORS.labels("dcgm", "emit").inc()
                if attempt == self.emit_retries:
                    raise
                log.warning("publishing a sample failed (%s); retry %d", exc, attempt)
                await asyncio.sleep(delay)
                delay *= 2

    def _log_rejected(self, line_no: int, reason: str, line: str) -> None:
        now = time.monotonic()
        key = reason.split(":")[0]
        if now - self._reasons_logged.get(key, -1e9) >= 60:
            self._reasons_logged[key] = now
            log.warning(
                "rejected dcgm-exporter line %d from %s: %s: %r", line_no, self.url, reason, line
            )

    def _down(self, reason: str, details: str) -> None:
        SOURCE_ERRORS.labels("dcgm", reason).inc()
        SOURCE_UP.labels("dcgm").set(0)
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning("dcgm-exporter at %s failing (%s); will keep scraping", self.url, details)

    def _up(self) -> None:
        SOURCE_UP.labels("dcgm").set(1)
        if self._down_since is not None:
            log.info(
                "dcgm-exporter at %s answering again after %.1fs",
                self.url,
                time.monotonic() - self._down_since,
            )
            self._down_since = None
