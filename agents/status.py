"""The agent's ``agent.status`` record: its own view of each boundary it reads.

Published every ``interval_s`` and as soon as a source changes state (a :class:`SourceHealth`
calls back). It is the node's heartbeat in the worker — the worker reports every device of the
node at least every heartbeat, and a node silent past its TTL leaves — and the reason behind
"usage unknown": "dcgm-exporter at … failing since … (timeout)", "no dcgm-exporter pod on this
node".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

from agents.health import SourceHealth
from agents.types import Emit, NowMs
from contract.inputs import AgentStatus

log = logging.getLogger(__name__)


class StatusPublisher:
    def __init__(
        self,
        node: str,
        sources: Mapping[str, SourceHealth],
        emit: Emit,
        now_ms: NowMs,
        interval_s: float,
    ) -> None:
        self.node = node
        self.sources = dict(sources)
        self._emit = emit
        self._now_ms = now_ms
        self.interval_s = interval_s
        self._changed = asyncio.Event()
        for health in self.sources.values():
            health.on_change = self._changed.set

    def record(self) -> AgentStatus:
        return AgentStatus(
            self.node,
            self._now_ms(),
            tuple(h.status() for _, h in sorted(self.sources.items())),
        )

    async def run(self) -> None:
        while True:
            self._changed.clear()
            try:
                await self._emit(self.record())
            except Exception as exc:  # the publisher's errors are its own: logged, tried again
                log.warning("publishing the agent's status failed: %r", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self.interval_s)
