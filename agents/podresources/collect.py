"""Poll the kubelet's PodResources ``List`` and publish snapshots and diffs.

The API has no working ``Watch``: we poll ``List``. A full :class:`PodResourcesSnapshot` goes out
first on every connection (at start, after a reconnect, also one gRPC made by itself when the
kubelet restarted between two polls) and then every ``snapshot_interval_s`` (measured with the
injected ``now_ms``), so a consumer can always rebuild state; in between, a
:class:`PodResourcesDiff` only when something changed. Nothing is lost when ``emit`` raises:
``previous`` only advances once ``emit`` returned, so the next poll sends the change again.

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
import logging
import os
from pathlib import Path

import grpc

from agents.health import SourceHealth
from agents.podresources.diff import diff_assignments
from agents.podresources.translate import (
    DEFAULT_PREFIXES,
    Unusable,
    read_allocatable,
    read_list,
)
from agents.selfmetrics import IGNORED_PODRESOURCES, SOURCE_ERRORS
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


def _allocatable_not_served(exc: grpc.aio.AioRpcError) -> bool:
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
    ) -> None:
        self.node = node
        self.socket_path = socket_path
        self.poll_interval_s = poll_interval_s
        self.snapshot_interval_ms = round(snapshot_interval_s * 1000)
        self.emit = emit
        self.now_ms = now_ms
        self.rpc_timeout_s = rpc_timeout_s
        self.resource_prefixes = resource_prefixes
        self.health = SourceHealth(SOURCE, f"kubelet PodResources at {socket_path}", log)
        self._answered = False
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
        previous: frozenset[DeviceAssignment] | None = None  # None: a snapshot is owed
        last_snapshot_ms = 0
        while True:
            if channel.get_state() != grpc.ChannelConnectivity.READY:
                # gRPC reconnects by itself when a kubelet restarts between two polls: a fresh
                # connection owes a snapshot like a new channel does.
                previous = None
            current = await self._list(stub)
            if current is not None:
                now = self.now_ms()
                elapsed_ms = now - last_snapshot_ms
                if previous is None or not 0 <= elapsed_ms < self.snapshot_interval_ms:
                    allocatable = await self._allocatable(stub)
                    snapshot = PodResourcesSnapshot(
                        self.node, now, tuple(sorted(current)), allocatable
                    )
                    if await self._publish(snapshot):
                        previous, last_snapshot_ms = current, now
                else:
                    added, removed = diff_assignments(previous, current)
                    diff = PodResourcesDiff(self.node, now, added, removed)
                    if (added or removed) and await self._publish(diff):
                        previous = current
            await asyncio.sleep(self.poll_interval_s)

    async def _list(
        self, stub: pb_grpc.PodResourcesListerStub
    ) -> frozenset[DeviceAssignment] | None:
        """One ``List``: the wanted assignments, or None when the reply was unusable (counted)."""
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
        return frozenset(rows)

    async def _allocatable(
        self, stub: pb_grpc.PodResourcesListerStub
    ) -> tuple[AllocatableDevice, ...]:
        """The node's allocatable devices; () when this kubelet cannot tell."""
        request = pb.AllocatableResourcesRequest()
        try:
            resp = await stub.GetAllocatableResources(request, timeout=self.rpc_timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in CONNECTION_LOST:
                raise
            if _allocatable_not_served(exc):
                self._log_allocatable_missing(exc)
            else:
                self._failed(exc.code().name.lower(), f"GetAllocatableResources failed: {exc}")
            return ()
        if resp is None:
            self._failed("garbled", "GetAllocatableResources reply could not be decoded")
            return ()
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
