"""Hold a node's first DCGM samples until the records that identify their holders are out.

A sample becomes an attribution event naming every holder of its device. The worker can name a
holder's pod UID and workload only once the pod watch's records for that node have reached it,
and can name holders at all only once a PodResources snapshot has. Every input of a node travels
in one ordered partition, so publishing those records *before* the first sample of a run means no
event of the run says ``uid_status: pending`` for a pod the API server already had.

The gate watches what the agent publishes: it opens when each needed kind has been acknowledged
(``k8s.pod-list`` is published after the list's pod records, so it marks the full list), or after
``wait_s``, whichever comes first; then it logs which source it gave up on and counts it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from agents.selfmetrics import START_GATE_TIMEOUTS
from agents.types import AgentRecord, Emit

log = logging.getLogger(__name__)


class StartGate:
    def __init__(self, emit: Emit, needs: Iterable[type], wait_s: float) -> None:
        self._emit = emit
        self._pending = {kind: asyncio.Event() for kind in needs}
        self.wait_s = wait_s

    async def emit(self, record: AgentRecord) -> None:
        """Publish through the wrapped emitter and note the kinds the gate waits for."""
        await self._emit(record)
        event = self._pending.get(type(record))
        if event is not None:
            event.set()

    def missing(self) -> list[str]:
        return sorted(k.__name__ for k, e in self._pending.items() if not e.is_set())

    async def wait(self) -> None:
        """Return once every needed kind was published, or after ``wait_s`` (logged, counted)."""
        waits = [asyncio.create_task(e.wait()) for e in self._pending.values()]
        if not waits:
            return
        _, pending = await asyncio.wait(waits, timeout=self.wait_s)
        for task in pending:
            task.cancel()
        if missing := self.missing():
            START_GATE_TIMEOUTS.inc()
            log.warning(
                "no %s published %.0fs after start: publishing samples anyway; their holders "
                "show uid_status pending (or state unknown) until those records arrive",
                " / ".join(missing),
                self.wait_s,
            )
