"""The PodResources collector against a real gRPC kubelet double on a unix socket."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agents.events import DeviceAssignment as A
from agents.events import PodResourcesDiff, PodResourcesSnapshot
from agents.podresources import PodResourcesCollector
from agents.selfmetrics import SOURCE_ERRORS
from agents.types import AgentRecord
from sim.kubelet_server import KubeletDouble
from tests.helpers import wait_for

G0, G1 = "GPU-aaaa", "GPU-bbbb"
P1 = A("ml", "a", "c", "nvidia.com/gpu", G0)
P2 = A("ml", "b", "c", "nvidia.com/gpu", G1)


class World:
    def __init__(self) -> None:
        self.rows: tuple[A, ...] = (P1,)
        self.out: list[AgentRecord] = []

    def state(self) -> tuple[tuple[A, ...], tuple[()]]:
        return self.rows, ()

    async def emit(self, record: AgentRecord) -> None:
        self.out.append(record)

    def of(self, kind: type) -> list[AgentRecord]:
        return [r for r in self.out if isinstance(r, kind)]


@contextlib.asynccontextmanager
async def collecting(world: World, sock: Path) -> AsyncIterator[None]:
    collector = PodResourcesCollector(
        node="n1",
        socket_path=sock,
        poll_interval_s=0.02,
        snapshot_interval_s=60,
        emit=world.emit,
        now_ms=lambda: 1,
        max_backoff_s=0.1,
    )
    task = asyncio.create_task(collector.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_snapshot_then_diffs(tmp_path: Path) -> None:
    world = World()
    sock = tmp_path / "kubelet.sock"
    async with KubeletDouble(sock, world.state), collecting(world, sock):
        await wait_for(lambda: world.of(PodResourcesSnapshot), what="first snapshot")
        assert world.out[0] == PodResourcesSnapshot("n1", 1, (P1,), ())
        world.rows = (P2,)
        diff = await wait_for(lambda: world.of(PodResourcesDiff), what="a diff")
        assert diff[0] == PodResourcesDiff("n1", 1, added=(P2,), removed=(P1,))


async def test_socket_absent_then_appears(tmp_path: Path) -> None:
    world = World()
    sock = tmp_path / "late" / "kubelet.sock"
    before = SOURCE_ERRORS.labels("kubelet", "unavailable")._value.get()
    async with collecting(world, sock):
        await wait_for(
            lambda: SOURCE_ERRORS.labels("kubelet", "unavailable")._value.get() > before,
            what="a counted connection failure",
        )
        assert world.out == []
        async with KubeletDouble(sock, world.state):
            await wait_for(lambda: world.out, what="recovery")
            assert isinstance(world.out[0], PodResourcesSnapshot)  # a snapshot first


async def test_garbled_reply_is_counted_and_skipped(tmp_path: Path) -> None:
    world = World()
    sock = tmp_path / "kubelet.sock"
    async with KubeletDouble(sock, world.state) as kubelet, collecting(world, sock):
        await wait_for(lambda: world.of(PodResourcesSnapshot), what="first snapshot")
        before = SOURCE_ERRORS.labels("kubelet", "garbled")._value.get()
        kubelet.garble_next(3)
        world.rows = (P1, P2)
        await wait_for(lambda: world.of(PodResourcesDiff), what="diff after garbage")
        assert SOURCE_ERRORS.labels("kubelet", "garbled")._value.get() == before + 3
        assert world.of(PodResourcesDiff)[0].added == (P2,)


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
