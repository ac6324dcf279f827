"""One source's health, the same way for every collector: every failure is counted
(``gpuattr_agent_source_errors_total{source, error}``) and flips ``gpuattr_agent_source_up`` to 0;
an outage is logged once when it starts (and again only if its reason changes), and once when
the source answers again, with how long it was down. Retries in between log at debug."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from agents.selfmetrics import SOURCE_ERRORS, SOURCE_UP


class SourceHealth:
    def __init__(
        self,
        source: str,
        what: str,
        log: logging.Logger,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log  # the collector's own logger: its lines name the collector
        self.source = source  # the metrics label: kubelet, dcgm, apiserver
        self.what = what  # how log lines name it, e.g. "kubelet PodResources at /var/lib/..."
        self._monotonic_s = monotonic_s
        self.reason: str | None = None  # the outage's current reason; None while healthy
        self.failures = 0  # failures in the current outage
        self._since_s = 0.0

    @property
    def down(self) -> bool:
        return self.reason is not None

    def failed(self, reason: str, detail: str) -> None:
        SOURCE_ERRORS.labels(self.source, reason).inc()
        SOURCE_UP.labels(self.source).set(0)
        self.failures += 1
        if self.reason is None:
            self._since_s = self._monotonic_s()
        if self.reason == reason:
            self.log.debug("%s still failing (%s): %s", self.what, reason, detail)
            return
        self.reason = reason
        self.log.warning("%s failing (%s): %s; retrying", self.what, reason, detail)

    def ok(self) -> None:
        SOURCE_UP.labels(self.source).set(1)
        if self.reason is None:
            return
        self.log.info(
            "%s answers again after %.1fs (%s, %d failure(s))",
            self.what,
            self._monotonic_s() - self._since_s,
            self.reason,
            self.failures,
        )
        self.reason, self.failures = None, 0
