"""The demand stage's loop without Faust: bad input dead-lettered with its reason, outputs
published in order, the live cache fed by demand records, tombstones and clock ticks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from contract import codec
from contract.inputs import ClockTick, GpuRequest, NodeSupply, PendingPod, SupplyDevice
from contract.outputs import PoolDemand, PoolDemandRetired
from streams.core.flow.demandstage import DemandOutput, DemandStage, DemandTables
from streams.worker.demandloop import DemandLoop
from streams.worker.livedemand import LiveDemand
from tests.unit.test_worker_loop import FakeEvent, FakeMessage

TOPIC = "gpuattr.demand-events"
GPU = "nvidia.com/gpu"


def event(payload: object, offset: int, key: bytes | None = GPU.encode()) -> FakeEvent:
    value = payload if isinstance(payload, bytes) else codec.encode(payload)
    return FakeEvent(value, FakeMessage(TOPIC, 0, offset, key, value))


async def stream(events: Iterable[FakeEvent]) -> AsyncIterator[FakeEvent]:
    for e in events:
        yield e


async def test_bad_input_is_dead_lettered_and_the_live_cache_follows_the_pools() -> None:
    published: list[DemandOutput] = []
    dead: list[tuple[int, str]] = []
    live = LiveDemand()

    async def publish(out: DemandOutput) -> None:
        published.append(out)

    async def dead_letter(ev: FakeEvent, why: str) -> None:
        dead.append((ev.message.offset, why))

    stage = DemandStage(DemandTables(), 900.0)
    loop = DemandLoop(stage, publish, dead_letter, live, stop=lambda exc: None)  # type: ignore[arg-type]
    waiting = PendingPod(1, "ml", "a", "uid-a", 0, (GpuRequest(GPU, 1),))
    node = NodeSupply(2, "n1", GPU, (SupplyDevice("GPU-1"),))
    await loop.run(
        stream(
            [
                event(b"not json", 0),
                event(waiting, 1, key=b"nvidia.com/gpu.shared"),
                event(waiting, 2, key=None),
                event(waiting, 3),
                event(node, 4),
                event(ClockTick(0, 3), 5, key=None),
                event(PendingPod(6, "ml", "a", "uid-a", 0, (), state="deleted"), 6),
                event(NodeSupply(7, "n1", GPU), 7),
            ]
        )
    )
    assert [offset for offset, _ in dead] == [0, 1, 2]
    assert dead[0][1].startswith("undecodable")
    assert "asks for" in dead[1][1]
    assert "without a key" in dead[2][1]
    assert [type(o).__name__ for o in published] == [
        "PoolDemand",
        "PoolDemand",
        "PoolDemand",
        "PoolDemandRetired",
    ]
    assert published[-1] == PoolDemandRetired(GPU)
    assert len(live) == 0  # the tombstone removed it
    # a restarted worker's cache is empty: the partition's next tick fills it from the tables
    stage.handle(NodeSupply(8, "n1", GPU, (SupplyDevice("GPU-1"),)), 0, GPU.encode())
    fresh = LiveDemand()
    loop.live = fresh
    await loop.run(stream([event(ClockTick(0, 9), 9, key=None)]))
    (record,) = fresh.records([0])
    assert isinstance(record, PoolDemand)
    assert record.allocated_gpus == 1
