"""Poll the kubelet's PodResources ``List`` and publish snapshots and diffs.

The API has no working ``Watch``: every poll calls ``List`` and ``GetAllocatableResources``. A
full :class:`PodResourcesSnapshot` goes out first on every connection (at start, after a
reconnect, also one gRPC made by itself when the kubelet restarted between two polls), when the
allocatable list changed, and then every ``snapshot_interval_s`` (measured with the injected
``now_ms``), so a consumer can always rebuild state; in between, a :class:`PodResourcesDiff`
only when something changed. What may go out, and when, is decided by
:mod:`agents.podresources.readiness`: a kubelet that has just started answers "nothing" without
an error, and that answer is held — the worker keeps the holders last published — until the
kubelet is ready and a second answer confirms it. Nothing is lost when ``emit`` raises: the
readiness state only advances once ``emit`` returned, so the next poll sends the change again.

Held answers: ``gpuattr_agent_kubelet_ready`` (0 while held for a not-ready kubelet),
``gpuattr_agent_kubelet_answers_held_total{reason}`` (``no_pod_listed``, ``own_pod_not_listed``,
``allocatable_empty``, ``unconfirmed``) and ``gpuattr_agent_kubelet_ready_timeouts_total``; one
log line when a hold begins and one when it ends.

Failures cost one log line per episode, not one per retry:

* no socket, or nothing answering on it (``UNAVAILABLE``, timeouts): a warning naming the
  socket, ``gpuattr_agent_source_up{source="kubelet"} 0``, reconnects with capped, jittered
  exponential backoff (0.2 s doubling to 10 s), an info line on recovery, then a snapshot;
* a reply that cannot be decoded, or another failed call: counted, logged, that poll skipped;
* ``GetAllocatableResources`` not served (old or gated kubelets): snapshots carry
  ``allocatable=()``, logged once at info.

``gpuattr_agent_source_errors_total{source="kubelet", error=...}`` counts ``socket_missing``,
gRPC status codes in lower case (``unavailable``, ``deadline_exceeded``, ...), ``garbled`` and
``emit_failed``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
from pathlib import Path
from typing import NamedTuple

import grpc

from agents.health import SourceHealth
from agents.podresources.diff import diff_assignments
from agents.podresources.readiness import UNCONFIRMED, Answer, Readiness, Verdict, step
from agents.podresources.translate import (
    DEFAULT_PREFIXES,
    Unusable,
    listed_pods,
    read_allocatable,
    read_list,
)
from agents.selfmetrics import (
    IGNORED_PODRESOURCES,
    KUBELET_ANSWERS_HELD,
    KUBELET_READY,
    KUBELET_READY_TIMEOUTS,
    SOURCE_ERRORS,
)
from agents.types import AgentRecord, Emit, NowMs
from contract.inputs import (
    AllocatableDevice,
    DeviceAssignment,
    PodResourcesDiff,
    PodResourcesSnapshot,
)
from infra.backoff import Backoff
from proto.podresources.v1 import api_pb2 as pb
from proto.podresources.v1 import api_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

SOURCE = "kubelet"
BACKOFF_FIRST_S = 0.2
BACKOFF_MAX_S = 10.0
#: The kubelet's own PodResources client allows 16 MiB replies; gRPC's default (4 MiB) is too
#: small for a big node's ``List``.
MAX_REPLY_BYTES = 16 * 1024 * 1024
#: Status codes that mean the connection is gone: reconnect (and snapshot again).
CONNECTION_LOST = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)


class Failed(enum.Enum):
    """A call that failed (counted and logged): the poll it belongs to is skipped."""

    FAILED = "failed"


FAILED = Failed.FAILED


class Listed(NamedTuple):
    rows: frozenset[DeviceAssignment]
    pods: frozenset[str]  # namespace/name of every pod listed, with devices or without


def allocatable_not_served(exc: grpc.aio.AioRpcError) -> bool:
    """Kubelets before 1.21 lack the method; 1.21-1.27 with the feature gate off answer with a
    plain error (UNKNOWN) "... GetAllocatableResources disabled"."""
    code, details = exc.code(), exc.details() or ""
    return code == grpc.StatusCode.UNIMPLEMENTED or (
        code == grpc.StatusCode.UNKNOWN and "disabled" in details
    )


class PodResourcesCollector:
    """Publishes one node's device assignments; :meth:`run` runs until cancelled."""

    def __init__(
        self,
        *,
        node: str,
        socket_path: Path,
        poll_interval_s: float,
        snapshot_interval_s: float,
        emit: Emit,
        now_ms: NowMs,
        rpc_timeout_s: float = 5.0,
        resource_prefixes: tuple[str, ...] = DEFAULT_PREFIXES,
        own_pod: str = "",
        ready_timeout_s: float = 120.0,
    ) -> None:
        self.node = node
        self.socket_path = socket_path
        self.poll_interval_s = poll_interval_s
        self.snapshot_interval_ms = round(snapshot_interval_s * 1000)
        self.emit = emit
        self.now_ms = now_ms
        self.rpc_timeout_s = rpc_timeout_s
        self.resource_prefixes = resource_prefixes
        self.ready_timeout_ms = round(ready_timeout_s * 1000)
        self.readiness = Readiness(own_pod=own_pod)
        self.health = SourceHealth(SOURCE, f"kubelet PodResources at {socket_path}", log)
        self._answered = False
        self._held: str | None = None  # why answers are held now (None: not held)
        self._held_since_ms = 0
        self._allocatable_missing_logged = False
        self._unusable_logged: set[str] = set()
        self._emit_failing = False

    async def run(self) -> None:
        backoff = Backoff(BACKOFF_FIRST_S, BACKOFF_MAX_S)
        while True:
            if await self._connect_and_poll():
                backoff.reset()
            await backoff.sleep()

    async def _connect_and_poll(self) -> bool:
        """Poll over one connection until it is lost; True if the kubelet answered on it."""
        self._answered = False
        target = f"unix://{self.socket_path.absolute()}"
        options = [("grpc.max_receive_message_length", MAX_REPLY_BYTES)]
        async with grpc.aio.insecure_channel(target, options=options) as channel:
            try:
                await self._poll_loop(channel, pb_grpc.PodResourcesListerStub(channel))
            except grpc.aio.AioRpcError as exc:
                self._connection_lost(exc)
        return self._answered

    def _connection_lost(self, exc: grpc.aio.AioRpcError) -> None:
        missing = not os.path.exists(self.socket_path)  # a local stat; never raises
        reason = "socket_missing" if missing else exc.code().name.lower()
        self._failed(reason, f"{exc.code().name} ({exc.details()}); reconnecting")

    async def _poll_loop(
        self, channel: grpc.aio.Channel, stub: pb_grpc.PodResourcesListerStub
    ) -> None:
        self.readiness = self.readiness.connected()
        while True:
            if channel.get_state() != grpc.ChannelConnectivity.READY:
                # gRPC reconnects by itself when a kubelet restarts between two polls: a fresh
                # connection owes a snapshot like a new channel does, and may meet a kubelet
                # that is not ready yet.
                self.readiness = self.readiness.connected()
            answer = await self._answer(stub)
            if answer is not None:
                await self._consider(answer)
            await asyncio.sleep(self.poll_interval_s)

    async def _answer(self, stub: pb_grpc.PodResourcesListerStub) -> Answer | None:
        """One poll: ``List`` then ``GetAllocatableResources``; None if either was unusable."""
        listed = await self._list(stub)
        if listed is None:
            return None
        allocatable = await self._allocatable(stub)
        if isinstance(allocatable, Failed):
            return None
        return Answer(listed.rows, listed.pods, allocatable)

    async def _consider(self, answer: Answer) -> None:
        """Publish what :func:`step` says of ``answer``, and account for what it holds."""
        now = self.now_ms()
        new, verdict = step(
            self.readiness,
            answer,
            now,
            snapshot_interval_ms=self.snapshot_interval_ms,
            ready_timeout_ms=self.ready_timeout_ms,
        )
        if verdict.own_pod_dropped:
            log.error(
                "kubelet at %s lists %d pods but never this agent's own pod %s: "
                "GPUATTR_KUBELET_OWN_POD looks wrong; judging readiness without it",
                self.socket_path,
                len(answer.pods),
                self.readiness.own_pod,
            )
        if verdict.publish is None:
            self.readiness = new
            self._hold(verdict, now)
            return
        record: AgentRecord
        if verdict.publish == "snapshot":
            allocatable = answer.allocatable or ()
            record = PodResourcesSnapshot(self.node, now, tuple(sorted(answer.rows)), allocatable)
        else:
            before = self.readiness.published
            added, removed = diff_assignments(before.rows if before else None, answer.rows)
            record = PodResourcesDiff(self.node, now, added, removed)
        if await self._publish(record):
            self.readiness = new
            self._released(verdict, answer, now)

    def _hold(self, verdict: Verdict, now: int) -> None:
        reason = verdict.reason
        if reason is None:
            KUBELET_READY.set(1)
            return
        KUBELET_ANSWERS_HELD.labels(reason).inc()
        KUBELET_READY.set(1 if reason == UNCONFIRMED else 0)
        if self._held is None:
            self._held_since_ms = now
        if reason != self._held and reason != UNCONFIRMED:
            published = self.readiness.published
            log.info(
                "kubelet at %s not ready (%s): its answers are held; the %d assignments "
                "published last stand until it is ready and confirms",
                self.socket_path,
                reason,
                len(published.rows) if published else 0,
            )
        self._held = reason

    def _released(self, verdict: Verdict, answer: Answer, now: int) -> None:
        KUBELET_READY.set(1)
        if verdict.timed_out:
            KUBELET_READY_TIMEOUTS.inc()
            log.warning(
                "kubelet at %s: still %s after %.0fs; taking its answer (%d assignments) as is",
                self.socket_path,
                self._held or UNCONFIRMED,
                (now - self._held_since_ms) / 1000,
                len(answer.rows),
            )
        elif self._held not in (None, UNCONFIRMED):
            log.info(
                "kubelet at %s ready after %.1fs: snapshot of %d assignments",
                self.socket_path,
                (now - self._held_since_ms) / 1000,
                len(answer.rows),
            )
        self._held = None

    async def _list(self, stub: pb_grpc.PodResourcesListerStub) -> Listed | None:
        """One ``List``: the wanted assignments and every pod named, or None when the reply was
        unusable (counted)."""
        try:
            resp = await stub.List(pb.ListPodResourcesRequest(), timeout=self.rpc_timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in CONNECTION_LOST:
                raise
            self._failed(exc.code().name.lower(), f"List failed: {exc.details()}; skipping it")
            return None
        if resp is None:  # grpc.aio logs the decoding error and hands back None
            self._failed("garbled", "List reply could not be decoded; skipping it")
            return None
        self._recovered()
        rows, bad = read_list(resp, self.resource_prefixes)
        self._note_unusable(bad)
        return Listed(frozenset(rows), listed_pods(resp))

    async def _allocatable(
        self, stub: pb_grpc.PodResourcesListerStub
    ) -> tuple[AllocatableDevice, ...] | Failed | None:
        """The node's allocatable devices; ``None`` when this kubelet does not serve the method,
        :data:`FAILED` when this call failed (counted; the poll is skipped)."""
        request = pb.AllocatableResourcesRequest()
        try:
            resp = await stub.GetAllocatableResources(request, timeout=self.rpc_timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in CONNECTION_LOST:
                raise
            if allocatable_not_served(exc):
                self._log_allocatable_missing(exc)
                return None
            self._failed(exc.code().name.lower(), f"GetAllocatableResources failed: {exc}")
            return FAILED
        if resp is None:
            self._failed("garbled", "GetAllocatableResources reply could not be decoded")
            return FAILED
        devices, bad = read_allocatable(resp, self.resource_prefixes)
        self._note_unusable(bad)
        return devices

    def _note_unusable(self, entries: tuple[Unusable, ...]) -> None:
        """Count every unusable entry of a reply; log each reason once, with an example."""
        for entry in entries:
            IGNORED_PODRESOURCES.labels(entry.reason).inc()
            if entry.reason not in self._unusable_logged:
                self._unusable_logged.add(entry.reason)
                log.warning(
                    "kubelet at %s: ignoring PodResources entries (%s), e.g. %s; counted in "
                    "gpuattr_agent_ignored_podresources_rows_total, not logged again",
                    self.socket_path,
                    entry.reason,
                    entry.where,
                )

    def _log_allocatable_missing(self, exc: grpc.aio.AioRpcError) -> None:
        if not self._allocatable_missing_logged:
            self._allocatable_missing_logged = True
            log.info(
                "kubelet at %s does not serve GetAllocatableResources (%s: %s): snapshots "
                "carry no allocatable devices",
                self.socket_path,
                exc.code().name,
                exc.details(),
            )

    async def _publish(self, record: AgentRecord) -> bool:
        """Hand a record to ``emit``; False if it raised (counted, logged once per streak)."""
        try:
            await self.emit(record)
        except Exception as exc:  # the publisher's failure must not end the collector
            SOURCE_ERRORS.labels(SOURCE, "emit_failed").inc()
            log.log(
                logging.DEBUG if self._emit_failing else logging.WARNING,
                "could not publish %s for node %s (%r); it is sent again on the next poll",
                type(record).__name__,
                self.node,
                exc,
            )
            self._emit_failing = True
            return False
        if self._emit_failing:
            log.info("publishing PodResources records for node %s again", self.node)
            self._emit_failing = False
        return True

    def _failed(self, reason: str, detail: str) -> None:
        if reason == "socket_missing":
            detail = (
                "the socket is missing or not accessible (is the kubelet's pod-resources "
                "directory mounted?)"
            )
        self.health.failed(reason, detail)

    def _recovered(self) -> None:
        self._answered = True
        self.health.ok()
