"""The PodResources collector against the real gRPC kubelet double on a temp unix socket.

No Kafka here: ``emit`` appends to a list. Tests wait on conditions (bounded), never on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
from prometheus_client import REGISTRY

from agents.podresources.collect import PodResourcesCollector
from agents.types import AgentRecord
from contract.inputs import AllocatableDevice, PodResourcesDiff, PodResourcesSnapshot
from contract.inputs import DeviceAssignment as A
from proto.podresources.v1 import api_pb2 as pb
from proto.podresources.v1 import api_pb2_grpc as pb_grpc
from sim.kubelet_server import KubeletDouble
from tests.helpers import wait_for

G0, G1 = "GPU-8b2c4a51-8a9e-4f1b-a0d2-3c5e7f9a1b2c", "GPU-1f3a9c7e-52d4-4b8e-9a06-7d2e4c1b8f30"
P1 = A("ml", "trainer-0", "main", "nvidia.com/gpu", G0)
P2 = A("ml", "trainer-1", "main", "nvidia.com/gpu", G1)
P3 = A("dev", "notebook", "jupyter", "nvidia.com/gpu.shared", f"{G1}::3")
ALLOCATABLE = tuple(
    sorted(
        (
            AllocatableDevice("nvidia.com/gpu", G0, (0,)),
            AllocatableDevice("nvidia.com/gpu", G1, (1,)),
        )
    )
)
TIMEOUT_S = 5.0
NOW_MS = 1_700_000_000_000


class World:
    """The double's state provider on one side, the collector's emit on the other."""

    def __init__(self) -> None:
        self.rows: tuple[A, ...] = (P1,)
        self.out: list[AgentRecord] = []
        self.failing_emits = 0

    def state(self) -> tuple[tuple[A, ...], tuple[AllocatableDevice, ...]]:
        return self.rows, ALLOCATABLE

    async def emit(self, record: AgentRecord) -> None:
        if self.failing_emits > 0:
            self.failing_emits -= 1
            raise RuntimeError("broker said no")
        self.out.append(record)

    def of(self, kind: type) -> list[AgentRecord]:
        return [r for r in self.out if isinstance(r, kind)]


def errors(reason: str) -> float:
    labels = {"source": "kubelet", "error": reason}
    return REGISTRY.get_sample_value("gpuattr_agent_source_errors_total", labels) or 0.0


def source_up() -> float | None:
    return REGISTRY.get_sample_value("gpuattr_agent_source_up", {"source": "kubelet"})


@contextlib.asynccontextmanager
async def collecting(world: World, sock: Path) -> AsyncIterator[None]:
    collector = PodResourcesCollector(
        node="gpu-node-1",
        socket_path=sock,
        poll_interval_s=0.02,
        snapshot_interval_s=3600,
        emit=world.emit,
        now_ms=lambda: NOW_MS,
        rpc_timeout_s=2.0,
    )
    task = asyncio.create_task(collector.run(), name="podresources")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def until(condition: Callable[[], object], what: str) -> None:
    await wait_for(condition, timeout_s=TIMEOUT_S, every_s=0.01, what=what)


async def test_snapshot_first_then_exact_diffs(tmp_path: Path) -> None:
    world = World()
    sock = tmp_path / "kubelet.sock"
    async with KubeletDouble(sock, world.state) as kubelet, collecting(world, sock):
        await until(lambda: world.out, "the first record")
        assert world.out == [PodResourcesSnapshot("gpu-node-1", NOW_MS, (P1,), ALLOCATABLE)]

        polls = kubelet.list_calls
        await until(lambda: kubelet.list_calls >= polls + 5, "more polls")
        assert len(world.out) == 1, "nothing changed: no diff"

        world.rows = (P2, P3)
        await until(lambda: world.of(PodResourcesDiff), "a diff")
        assert world.out[1] == PodResourcesDiff("gpu-node-1", NOW_MS, added=(P3, P2), removed=(P1,))

        world.rows = (P3,)
        await until(lambda: len(world.out) == 3, "a second diff")
        assert world.out[2] == PodResourcesDiff("gpu-node-1", NOW_MS, added=(), removed=(P2,))
        assert source_up() == 1


async def test_socket_absent_at_start_then_recovers_with_a_snapshot(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agents.podresources.collect")
    world = World()
    sock = tmp_path / "pod-resources" / "kubelet.sock"
    before = errors("socket_missing")
    async with collecting(world, sock):
        await until(lambda: errors("socket_missing") >= before + 2, "two failed attempts")
        assert world.out == []
        assert source_up() == 0
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, "one warning, not one per retry"
        assert str(sock) in warnings[0].getMessage()

        async with KubeletDouble(sock, world.state):
            await until(lambda: world.out, "recovery")
            assert world.out[0] == PodResourcesSnapshot("gpu-node-1", NOW_MS, (P1,), ALLOCATABLE)
            assert source_up() == 1
            assert any("answers again" in r.getMessage() for r in caplog.records)


async def test_kubelet_restart_sends_a_snapshot_first(tmp_path: Path) -> None:
    world = World()
    sock = tmp_path / "kubelet.sock"
    async with collecting(world, sock):
        async with KubeletDouble(sock, world.state):
            await until(lambda: world.out, "the first snapshot")
        world.rows = (P1, P2)  # changed while the kubelet restarted at once (gRPC reconnects)
        async with KubeletDouble(sock, world.state):
            await until(lambda: len(world.out) == 2, "a record after a quick restart")
        before = errors("socket_missing")
        await until(lambda: errors("socket_missing") > before, "a failed attempt")
        world.rows = (P2,)  # changed while the kubelet was down for a while
        async with KubeletDouble(sock, world.state):
            await until(lambda: len(world.out) == 3, "a record after a slow restart")
    assert world.out[1:] == [
        PodResourcesSnapshot("gpu-node-1", NOW_MS, (P1, P2), ALLOCATABLE),
        PodResourcesSnapshot("gpu-node-1", NOW_MS, (P2,), ALLOCATABLE),
    ]


async def test_garbled_replies_are_counted_and_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agents.podresources.collect")
    world = World()
    sock = tmp_path / "kubelet.sock"
    async with KubeletDouble(sock, world.state) as kubelet, collecting(world, sock):
        await until(lambda: world.out, "the first snapshot")
        before = errors("garbled")
        kubelet.garble_next(3)
        world.rows = (P1, P2)
        await until(lambda: world.of(PodResourcesDiff), "a diff after the garbage")
        assert errors("garbled") == before + 3
        assert world.out[1:] == [PodResourcesDiff("gpu-node-1", NOW_MS, added=(P2,), removed=())]
        assert len([r for r in caplog.records if "decoded" in r.getMessage()]) == 1


async def test_failed_emit_is_retried_and_nothing_is_lost(tmp_path: Path) -> None:
    world = World()
    sock = tmp_path / "kubelet.sock"
    world.failing_emits = 2  # the first snapshot is refused twice
    before = errors("emit_failed")
    async with KubeletDouble(sock, world.state), collecting(world, sock):
        await until(lambda: world.out, "the snapshot, eventually")
        assert world.out == [PodResourcesSnapshot("gpu-node-1", NOW_MS, (P1,), ALLOCATABLE)]
        world.failing_emits = 1
        world.rows = (P2,)
        await until(lambda: len(world.out) == 2, "the diff, eventually")
        assert world.out[1] == PodResourcesDiff("gpu-node-1", NOW_MS, added=(P2,), removed=(P1,))
    assert errors("emit_failed") == before + 3


async def test_old_kubelet_without_allocatable_api(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agents.podresources.collect")
    world = World()
    sock = tmp_path / "kubelet.sock"
    async with (
        KubeletDouble(sock, world.state, allocatable_api=False),
        collecting(world, sock),
    ):
        await until(lambda: world.out, "the first snapshot")
    assert world.out[0] == PodResourcesSnapshot("gpu-node-1", NOW_MS, (P1,), ())
    notes = [r for r in caplog.records if "GetAllocatableResources" in r.getMessage()]
    assert [n.levelno for n in notes] == [logging.INFO]


async def test_double_serves_get_like_the_kubelet(tmp_path: Path) -> None:
    world = World()
    sock = tmp_path / "kubelet.sock"
    async with (
        KubeletDouble(sock, world.state),
        grpc.aio.insecure_channel(f"unix://{sock}") as channel,
    ):
        stub = pb_grpc.PodResourcesListerStub(channel)
        resp = await stub.Get(pb.GetPodResourcesRequest(pod_name="trainer-0", pod_namespace="ml"))
        assert resp.pod_resources.containers[0].devices[0].device_ids == [G0]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Get(pb.GetPodResourcesRequest(pod_name="gone", pod_namespace="ml"))
        assert err.value.code() == grpc.StatusCode.UNKNOWN
        assert err.value.details() == "pod gone in namespace ml not found"
    assert not sock.exists(), "the socket file is removed on stop"
