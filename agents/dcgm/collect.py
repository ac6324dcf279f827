"""Scrape dcgm-exporter's ``/metrics`` every interval and publish one record per scrape.

The record (``dcgm.scrape``) carries one sample per GPU or MIG instance of the node: the agent
reads the whole node at once, and one record instead of one per device spares the broker and
the worker a per-record cost for every device.

The collector never stops on a bad source: an exporter that is down, slow or answers an error
status is counted (``SOURCE_ERRORS{source="dcgm"}``, ``SOURCE_UP``), logged once when it starts
failing and once when it answers again, and scraped again at the next interval. Malformed lines
are rejected one by one by :func:`agents.dcgm.translate.parse_exposition` (counted in
``REJECTED_LINES``, a warning per distinct reason at most once a minute); every other GPU is
still published.
A scrape the publisher refuses is retried with backoff before the next one; one that still
fails is logged as an error and its samples counted as dropped, never lost silently.

Each sample goes out with ``since_last``: what its cumulative counters did since the last
*published* scrape of the same device (:func:`agents.dcgm.counters.with_since_last` decides).
The collector keeps that scrape's samples per device — only the devices it showed, replaced
whole by each published scrape. A scrape that fails, shows no device or is dropped by the
publisher leaves them as they were, so the next increase covers its interval too.

With ``usage`` (the opt-in NVML per-process source, :mod:`agents.processes.nvml`), each scrape
reads it once, right after the exporter answers, and attaches each device's per-pod reading to
its sample where the exporter gave none of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable

import aiohttp

from agents.dcgm.counters import with_since_last
from agents.dcgm.translate import (
    DeviceKey,
    IgnoredFamily,
    PerPodRows,
    RejectedLine,
    parse_exposition,
)
from agents.health import SourceHealth
from agents.locate import NotFound, Target
from agents.processes.nvml import ReadUsage, attach
from agents.selfmetrics import IGNORED_FAMILIES, REJECTED_LINES, SOURCE_ERRORS
from agents.types import Emit, NowMs
from contract.inputs import DcgmSample, DcgmScrape
from infra.backoff import Backoff

log = logging.getLogger(__name__)

SOURCE = "dcgm"
#: Makes the collector's one HTTP session (the per-request timeout is set by the collector).
SessionFactory = Callable[[], aiohttp.ClientSession]
REJECTION_LOG_EVERY_MS = 60_000


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
        session_factory: SessionFactory = aiohttp.ClientSession,
        emit_attempts: int = 4,
        emit_backoff_s: float = 0.05,
        before_first_scrape: Callable[[], Awaitable[None]] | None = None,
        locate: Callable[[], Target | NotFound] | None = None,
        usage: ReadUsage | None = None,
        per_pod: PerPodRows = "auto",
    ) -> None:
        self.node = node  # the agent's node name is authoritative, not the exporter's Hostname
        self.url = url
        self._locate = locate  # the node's own exporter pod (pod watch), when discovering
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._emit = emit
        self._now_ms = now_ms
        self._session_factory = session_factory
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._emit_attempts = max(1, emit_attempts)
        self._emit_backoff_s = emit_backoff_s
        self.health = SourceHealth(
            SOURCE,
            "dcgm-exporter on this node" if locate else f"dcgm-exporter at {url}",
            log,
            now_ms=now_ms,
            target=url if locate is None else "",
        )
        self._rejection_logged_ms: dict[str, int] = {}
        self._before_first_scrape = before_first_scrape
        self._ignored_logged: set[IgnoredFamily] = set()
        #: the last published scrape's samples per device: the counters' baseline
        self._previous: dict[DeviceKey, DcgmSample] = {}
        self._usage = usage  # per-pod readings of the node's devices (NVML), when switched on
        self._per_pod = per_pod  # how the exporter's per-pod rows are read (agents.dcgm.perpod)

    async def run(self) -> None:
        """Scrape every ``interval_s`` (start to start) until cancelled."""
        loop = asyncio.get_running_loop()
        if self._before_first_scrape is not None:
            await self._before_first_scrape()
        async with self._session_factory() as session:
            next_at = loop.time()
            while True:
                await self.scrape_once(session)
                next_at = max(next_at + self.interval_s, loop.time())  # late: no catch-up burst
                await asyncio.sleep(next_at - loop.time())

    def _target(self) -> Target | None:
        """Where to scrape now: the settings' URL, or the node's exporter pod; ``None`` (said in
        the agent's status) when the node has none to scrape."""
        if self._locate is None:
            return Target(self.url, "")
        found = self._locate()
        if isinstance(found, NotFound):
            if found.reason != "discovering":  # the watch has not listed yet: still starting
                self.health.disabled(found.reason, found.detail)
            return None
        if found.url != self.health.target:
            log.info("scraping dcgm-exporter pod %s at %s", found.pod, found.url)
            self.health.target = found.url
        return found

    async def scrape_once(self, session: aiohttp.ClientSession) -> int:
        """One scrape: fetch, parse, publish. Returns how many samples were published."""
        ts_ms = self._now_ms()
        target = self._target()
        if target is None:
            return 0
        text = await self._fetch(session, target.url)
        if text is None:
            return 0
        result = parse_exposition(text, node=self.node, ts_ms=ts_ms, per_pod=self._per_pod)
        if result.rejected:
            REJECTED_LINES.inc(len(result.rejected))
            self._log_rejected(result.rejected, ts_ms)
        if result.ignored:
            self._note_ignored(result.ignored)
        if not result.samples:
            return 0
        samples = result.samples
        if self._usage is not None:  # NVML calls block: off the event loop
            samples = attach(samples, await asyncio.to_thread(self._usage))
        samples = tuple(with_since_last(self._previous.get(_key(s)), s) for s in samples)
        published = await self._publish(
            DcgmScrape(self.node, ts_ms, samples, target.url, target.pod)
        )
        if published:
            self._previous = {_key(s): s for s in samples}
        return published

    async def _fetch(self, session: aiohttp.ClientSession, url: str) -> str | None:
        try:
            async with session.get(url, timeout=self._timeout) as resp:
                if resp.status != 200:
                    self._failed(f"http_{resp.status}", f"HTTP {resp.status} {resp.reason or ''}")
                    return None
                body = await resp.read()
        except TimeoutError:
            self._failed("timeout", f"no complete answer within {self.timeout_s:g}s")
            return None
        except aiohttp.ClientPayloadError as exc:
            self._failed("payload", f"response body broken off: {exc}")
            return None
        except aiohttp.ClientError as exc:
            self._failed("unreachable", f"{type(exc).__name__}: {exc}")
            return None
        self._recovered()
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as exc:
            SOURCE_ERRORS.labels(SOURCE, "encoding").inc()
            log.warning("dcgm-exporter at %s sent invalid UTF-8 (%s); reading it anyway", url, exc)
            return body.decode("utf-8", errors="replace")

    async def _publish(self, scrape: DcgmScrape) -> int:
        """Publish the scrape (one record for every device of the node); the number of samples
        published, 0 when the publisher failed every attempt (counted, logged)."""
        backoff = Backoff(self._emit_backoff_s, self._emit_backoff_s * 2**self._emit_attempts)
        for attempt in range(1, self._emit_attempts + 1):
            try:
                await self._emit(scrape)
                return len(scrape.samples)
            except Exception as exc:  # the publisher's errors are its own: log, count, retry
                SOURCE_ERRORS.labels(SOURCE, "emit_failed").inc()
                if attempt == self._emit_attempts:
                    SOURCE_ERRORS.labels(SOURCE, "sample_dropped").inc(len(scrape.samples))
                    log.error(
                        "dropped the DCGM scrape of %d devices at %d after %d failed publish "
                        "attempts: %r",
                        len(scrape.samples),
                        scrape.ts_ms,
                        attempt,
                        exc,
                    )
                    return 0
                log.warning("publishing a DCGM scrape failed (%r); retry %d", exc, attempt)
                await backoff.sleep()
        return 0

    def _note_ignored(self, ignored: tuple[IgnoredFamily, ...]) -> None:
        """Count every family read but not used; log each reason once, naming its families
        (again only when a new family appears)."""
        for reason, count in Counter(f.reason for f in ignored).items():
            IGNORED_FAMILIES.labels(reason).inc(count)
        new = set(ignored) - self._ignored_logged
        for reason in sorted({f.reason for f in new}):
            names = sorted(f.name for f in new if f.reason == reason)
            log.info(
                "dcgm-exporter at %s: not used (%s): %s",
                self.health.target or self.url,
                reason,
                ", ".join(names),
            )
        self._ignored_logged |= new

    def _log_rejected(self, rejected: tuple[RejectedLine, ...], now_ms: int) -> None:
        per_reason = Counter(r.reason for r in rejected)
        for bad in rejected:
            last = self._rejection_logged_ms.get(bad.reason)
            if last is not None and now_ms - last < REJECTION_LOG_EVERY_MS:
                log.debug(
                    "rejected dcgm-exporter line %d: %s: %r", bad.line_no, bad.reason, bad.line
                )
                continue
            self._rejection_logged_ms[bad.reason] = now_ms
            log.warning(
                "rejected dcgm-exporter line %d from %s: %s: %r (%d such line(s) in this scrape; "
                "the other GPUs are still published)",
                bad.line_no,
                self.health.target or self.url,
                bad.reason,
                bad.line,
                per_reason[bad.reason],
            )

    def _failed(self, reason: str, detail: str) -> None:
        self.health.failed(reason, f"{detail}; no GPU samples until it answers")

    def _recovered(self) -> None:
        self.health.ok()


def _key(sample: DcgmSample) -> DeviceKey:
    return sample.uuid, sample.mig_instance_id
