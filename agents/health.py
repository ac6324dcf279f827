"""One source's health, the same way for every collector: every failure is counted
(``gpuattr_agent_source_errors_total{source, error}``) and flips ``gpuattr_agent_source_up`` to 0;
an outage is logged once when it starts (and again only if its reason changes), and once when
the source answers again, with how long it was down. Retries in between log at debug.

The same state is the agent's word on the source in its ``agent.status`` record
(:meth:`SourceHealth.status`): ``ok``, ``failing`` since when and why, ``disabled`` (nothing to
read here: for instance no dcgm-exporter pod on this node), or ``starting``. A change of state
wakes the status publisher (``on_change``), so the worker hears of an outage at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from agents.selfmetrics import SOURCE_ERRORS, SOURCE_UP
from contract.inputs import SourceState, SourceStatus


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class SourceHealth:
    def __init__(
        self,
        source: str,
        what: str,
        log: logging.Logger,
        monotonic_s: Callable[[], float] = time.monotonic,
        now_ms: Callable[[], int] = _wall_ms,
        target: str = "",
    ) -> None:
        self.log = log  # the collector's own logger: its lines name the collector
        self.source = source  # the metrics label: kubelet, dcgm, apiserver
        self.what = what  # how log lines name it, e.g. "kubelet PodResources at /var/lib/..."
        self.target = target  # what it reads: a URL, a socket, a pod
        self._monotonic_s = monotonic_s
        self._now_ms = now_ms
        self.reason: str | None = None  # the outage's current reason; None while healthy
        self.failures = 0  # failures in the current outage
        self._since_s = 0.0
        self.state: SourceState = "starting"
        self.since_ms: int | None = None
        self.detail = ""
        self.on_change: Callable[[], None] = lambda: None

    @property
    def down(self) -> bool:
        return self.reason is not None

    def _move(self, state: SourceState, reason: str, detail: str) -> None:
        changed = (state, reason) != (self.state, self.reason or "")
        if state != self.state:
            self.since_ms = self._now_ms()
        self.state, self.detail = state, detail
        if changed:
            self.on_change()

    def status(self) -> SourceStatus:
        return SourceStatus(
            self.source,
            self.state,
            self.since_ms,
            self.reason or "",
            self.detail,
            self.target,
        )

    def failed(self, reason: str, detail: str) -> None:
        SOURCE_ERRORS.labels(self.source, reason).inc()
        SOURCE_UP.labels(self.source).set(0)
        self.failures += 1
        if self.reason is None:
            self._since_s = self._monotonic_s()
        self._move("failing", reason, detail)
        if self.reason == reason:
            self.log.debug("%s still failing (%s): %s", self.what, reason, detail)
            return
        self.reason = reason
        self.log.warning("%s failing (%s): %s; retrying", self.what, reason, detail)

    def disabled(self, reason: str, detail: str) -> None:
        """Nothing to read here (not an outage): logged once, said in the agent's status."""
        SOURCE_UP.labels(self.source).set(0)
        if (self.state, self.reason) != ("disabled", reason):
            self.log.warning("%s: nothing to read (%s): %s", self.what, reason, detail)
        self._move("disabled", reason, detail)
        self.reason, self.failures = reason, 0

    def ok(self) -> None:
        SOURCE_UP.labels(self.source).set(1)
        if self.reason is not None and self.state == "failing":
            self.log.info(
                "%s answers again after %.1fs (%s, %d failure(s))",
                self.what,
                self._monotonic_s() - self._since_s,
                self.reason,
                self.failures,
            )
        elif self.reason is not None:
            self.log.info("%s: found something to read again", self.what)
        self.reason, self.failures = None, 0
        self._move("ok", "", "")
