"""Hold a node's first records that name holders until the records that identify them are out.

The first DCGM samples wait for the pod list and a PodResources snapshot (:meth:`StartGate.wait`);
the first PodResources records wait for the pod list (:meth:`StartGate.wait_for`): the worker
reports every held GPU as soon as it hears of the allocation, so the pods' identities go first.


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
        self._waited_for = False

    async def emit(self, record: AgentRecord) -> None:
        """Publish through the wrapped emitter and note the kinds the gate waits for."""
        await self._emit(record)
        event = self._pending.get(type(record))
        if event is not None:
            event.set()

    async def wait_for(self, kinds: Iterable[type]) -> None:
        """Return once each of ``kinds`` (among the gate's needs) was published, or after
        ``wait_s`` (logged, counted) — at most once per gate: later calls do not wait."""
        waits = [asyncio.create_task(self._pending[k].wait()) for k in kinds if k in self._pending]
        if not waits or self._waited_for:
            for task in waits:
                task.cancel()
            return
        _, pending = await asyncio.wait(waits, timeout=self.wait_s)
        self._waited_for = True
        for task in pending:
            task.cancel()
        if pending:
            START_GATE_TIMEOUTS.inc()
            log.warning(
                "no %s published %.0fs after start: publishing allocations anyway; their "
                "holders show uid_status pending until it arrives",
                " / ".join(sorted(k.__name__ for k in kinds)),
                self.wait_s,
            )

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
