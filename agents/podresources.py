"""Poll the kubelet's PodResources ``List`` and publish snapshots and diffs.

There is no working ``Watch`` in the API: poll ``List``. A full snapshot goes out at start, after
every reconnect and every ``snapshot_interval_s``, so a consumer can always rebuild state;
between snapshots only diffs. A missing socket or a dead kubelet is one warning, a backoff loop
and one info line on recovery; a garbled reply is counted and skipped.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from pathlib import Path

import grpc

from agents.diff import diff_assignments
from agents.events import (
    AllocatableDevice,
    DeviceAssignment,
    PodResourcesDiff,
    PodResourcesSnapshot,
)
from agents.kubelet import DEFAULT_PREFIXES, allocatable_from_response, assignments_from_list
from agents.selfmetrics import SOURCE_ERRORS, SOURCE_UP
from agents.types import Emit, NowMs
from proto.podresources.v1 import api_pb2 as pb
from proto.podresources.v1 import api_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

_RECONNECT = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
}


class PodResourcesCollector:
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
        max_backoff_s: float = 10.0,
    ) -> None:
        self.node = node
        self.socket_path = socket_path
        self.poll_interval_s = poll_interval_s
        self.snapshot_interval_s = snapshot_interval_s
        self.emit = emit
        self.now_ms = now_ms
        self.rpc_timeout_s = rpc_timeout_s
        self.prefixes = resource_prefixes
        self.max_backoff_s = max_backoff_s
        self._down_since: float | None = None
        self._allocatable_missing_logged = False

    async def run(self) -> None:
        backoff = 0.2
        while True:
            target = f"unix://{self.socket_path.resolve()}"
            async with grpc.aio.insecure_channel(target) as channel:
                try:
                    await self._session(pb_grpc.PodResourcesListerStub(channel))
                except grpc.aio.AioRpcError as exc:
                    self._down(exc.code().name.lower(), exc.details() or "")
            await asyncio.sleep(backoff * (0.5 + random.random()))
            backoff = min(backoff * 2, self.max_backoff_s)

    def _down(self, reason: str, details: str) -> None:
        SOURCE_ERRORS.labels("kubelet", reason).inc()
        SOURCE_UP.labels("kubelet").set(0)
        if self._down_since is None:
            self._down_since = time.monotonic()
            exists = "exists" if self.socket_path.exists() else "does not exist"
            log.warning(
                "kubelet PodResources at %s unreachable (%s: %s; socket %s); retrying with backoff",
                self.socket_path,
                reason,
                details,
                exists,
            )

    def _up(self) -> None:
        SOURCE_UP.labels("kubelet").set(1)
        if self._down_since is not None:
            log.info(
                "kubelet PodResources at %s reachable again after %.1fs",
                self.socket_path,
                time.monotonic() - self._down_since,
            )
            self._down_since = None

    async def _allocatable(
        self, stub: pb_grpc.PodResourcesListerStub
    ) -> tuple[AllocatableDevice, ...]:
        try:
            resp = await stub.GetAllocatableResources(
                pb.AllocatableResourcesRequest(), timeout=self.rpc_timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            if not self._allocatable_missing_logged:
                log.info(
                    "kubelet has no GetAllocatableResources (older than 1.23?): "
                    "publishing snapshots without allocatable devices"
                )
                self._allocatable_missing_logged = True
            return ()
        return allocatable_from_response(resp, self.prefixes)

    async def _poll(
        self, stub: pb_grpc.PodResourcesListerStub
    ) -> frozenset[DeviceAssignment] | None:
        """One ``List``; ``None`` for a reply we could not read (counted, skipped)."""
        try:
            resp = await stub.List(pb.ListPodResourcesRequest(), timeout=self.rpc_timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in _RECONNECT:
                raise
            SOURCE_ERRORS.labels("kubelet", exc.code().name.lower()).inc()
            log.error(
                "kubelet List failed on %s: %s %s (skipping this poll)",
                self.socket_path,
                exc.code().name,
                exc.details(),
            )
            return None
        if resp is None:  # grpc.aio hands back None for a reply it could not deserialize
            SOURCE_ERRORS.labels("kubelet", "garbled").inc()
            log.error(
                "kubelet List reply from %s could not be decoded (skipping this poll)",
                self.socket_path,
            )
            return None
        return frozenset(assignments_from_list(resp, self.prefixes))

    async def _session(self, stub: pb_grpc.PodResourcesListerStub) -> None:
        previous: frozenset[DeviceAssignment] | None = None
        last_snapshot = float("-inf")
        while True:
            current = await self._poll(stub)
            if current is not None:
                self._up()
                due = time.monotonic() - last_snapshot >= self.snapshot_interval_s
                if previous is None or due:
                    allocatable = await self._allocatable(stub)
                    await self.emit(
                        PodResourcesSnapshot(
                            self.node, self.now_ms(), tuple(sorted(current)), allocatable
                        )
                    )
                    last_snapshot = time.monotonic()
                else:
                    added, removed = diff_assignments(previous, current)
                    if added or removed:
                        await self.emit(PodResourcesDiff(self.node, self.now_ms(), added, removed))
                previous = current
            await asyncio.sleep(self.poll_interval_s)
