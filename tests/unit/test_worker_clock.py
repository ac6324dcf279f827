"""The worker's loops and the cluster role's clock: a tick, ClusterPolicy or pending-pod list is
honoured only signed with the cluster role's key, a tick ages the partition it was read from,
and a record too far ahead of its partition's time is dead-lettered."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import pytest

from agents.publish import Publisher
from contract import codec, signature
from contract.inputs import ClockTick, ClusterPolicyRecord, DeviceTaintRuleRecord, PendingPodList
from contract.outputs import AttributionEvent
from infra.settings import ClusterKeySettings, KafkaSettings
from streams.core.flow.demandstage import DemandOutput, DemandStage, DemandTables
from streams.worker.demandloop import DemandLoop
from streams.worker.livedemand import LiveDemand
from tests.unit.test_worker_loop import HELD, TOPIC, FakeEvent, FakeMessage, Harness, counter

KEY = b"0123456789abcdef0123456789abcdef"
OTHER_KEY = b"fedcba9876543210fedcba9876543210"
S = 1000


def event(
    record: object, offset: int, partition: int = 2, key: bytes | None = None, signed: bytes = KEY
) -> FakeEvent:
    value = codec.encode(record)
    headers = ((signature.HEADER, signature.sign(signed, value)),) if signed else ()
    return FakeEvent(value, FakeMessage(TOPIC, partition, offset, key, value, headers))


def held(offset: int = 0) -> FakeEvent:
    return event(HELD, offset, key=b"n1", signed=b"")  # an agent's record: never signed


def ticks(start_s: int, end_s: int, first_offset: int, signed: bytes = KEY) -> list[FakeEvent]:
    return [
        event(ClockTick(2, HELD.ts_ms + s * S), first_offset + i, signed=signed)
        for i, s in enumerate(range(start_s, end_s + 1, 15))
    ]


def stale(h: Harness) -> set[str]:
    return {
        o.device_uuid
        for o in h.published
        if isinstance(o, AttributionEvent) and o.origin == "stale"
    }


async def test_signed_ticks_age_the_partition_they_were_read_from() -> None:
    h = Harness(cluster_key=KEY)
    await h.run([held(), *ticks(15, 240, 1)])
    assert h.dead == []
    assert stale(h) == {HELD.assignments[0].device_id}


@pytest.mark.parametrize(
    ("record", "signed", "reason"),
    [
        pytest.param(
            ClockTick(2, HELD.ts_ms + 15 * S),
            b"",
            "refused: ClockTick without the cluster role's signature",
            id="unsigned-tick",
        ),
        pytest.param(
            ClockTick(2, HELD.ts_ms + 15 * S),
            OTHER_KEY,
            "refused: ClockTick with a bad signature",
            id="tick-signed-with-another-key",
        ),
        pytest.param(
            ClusterPolicyRecord("cluster-policy", HELD.ts_ms + 15 * S),
            b"",
            "refused: ClusterPolicyRecord without the cluster role's signature",
            id="unsigned-policy",
        ),
        pytest.param(
            DeviceTaintRuleRecord("gpu-maintenance", HELD.ts_ms + 15 * S),
            b"",
            "refused: DeviceTaintRuleRecord without the cluster role's signature",
            id="unsigned-taint-rule",
        ),
    ],
)
async def test_a_cluster_role_record_not_signed_with_its_key_is_refused(
    record: object, signed: bytes, reason: str
) -> None:
    before = counter("gpuattr_worker_errors_total", kind="unsigned")
    h = Harness(cluster_key=KEY)
    # every tick after it unsigned too: the node never goes stale
    await h.run([held(), event(record, 1, signed=signed), *ticks(30, 240, 2, signed=signed)])
    assert h.dead[0][0] == 1
    assert h.dead[0][1].startswith(reason)
    assert all(why.startswith("refused: ") for _, why in h.dead)
    assert counter("gpuattr_worker_errors_total", kind="unsigned") - before == len(h.dead)
    assert stale(h) == set()


async def test_a_tick_of_another_partition_is_dead_lettered() -> None:
    h = Harness(cluster_key=KEY)
    await h.run([held(), event(ClockTick(0, HELD.ts_ms + 15 * S), 1)])
    assert h.dead == [(1, "unusable: clock.tick of partition 0 read from partition 2")]


async def test_a_tick_far_ahead_is_dead_lettered_and_counted() -> None:
    before = counter("gpuattr_worker_errors_total", kind="clock-jump")
    h = Harness(cluster_key=KEY)
    await h.run([held(), event(ClockTick(2, HELD.ts_ms + 15 * 60 * S), 1)])
    ((offset, why),) = h.dead
    assert offset == 1
    assert why.startswith("refused: the cluster role at ")
    assert "ahead of partition 2's event time" in why
    assert counter("gpuattr_worker_errors_total", kind="clock-jump") - before == 1
    assert stale(h) == set()


async def stream(events: Iterable[FakeEvent]) -> AsyncIterator[FakeEvent]:
    for e in events:
        yield e


async def test_the_demand_loop_refuses_unsigned_ticks_and_lists() -> None:
    dead: list[tuple[int, str]] = []

    async def publish(out: DemandOutput) -> None:
        pass

    async def dead_letter(ev: FakeEvent, why: str) -> None:
        dead.append((ev.message.offset, why))

    stage = DemandStage(DemandTables(), 900.0)
    loop = DemandLoop(stage, publish, dead_letter, LiveDemand(), lambda exc: None, KEY)  # type: ignore[arg-type]
    await loop.run(
        stream(
            [
                event(ClockTick(0, 3), 0, partition=0, signed=b""),
                event(PendingPodList(4, ()), 1, partition=0, signed=OTHER_KEY),
                event(ClockTick(0, 5), 2, partition=0),
            ]
        )
    )
    assert dead == [
        (0, "refused: ClockTick without the cluster role's signature"),
        (1, "refused: PendingPodList with a bad signature (not the cluster role's key)"),
    ]


class Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, object]] = []

    async def send_and_wait(self, topic: str, **kw: object) -> None:
        self.sent.append((kw["value"], kw["headers"]))  # type: ignore[arg-type]


async def test_the_cluster_roles_publisher_signs_and_an_agents_does_not() -> None:
    tick = ClockTick(1, 5)
    for key, want in ((KEY, True), (None, False)):
        publisher = Publisher(KafkaSettings(bootstrap="localhost:1"), signing_key=key)
        producer = Producer()
        publisher._producer = producer  # type: ignore[assignment]
        await publisher.publish_tick(tick)
        ((value, headers),) = producer.sent
        if want:
            assert headers == [(signature.HEADER, signature.sign(KEY, value))]
            assert signature.refusal(KEY, tick, value, headers) is None  # type: ignore[arg-type]
        else:
            assert headers is None


@pytest.mark.parametrize("key", ["change-me", "<the key>", "short", "secret"])
def test_a_placeholder_or_short_signing_key_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="GPUATTR_CLUSTER_SIGNING_KEY is a placeholder"):
        ClusterKeySettings(signing_key=key)  # type: ignore[arg-type]


def test_an_unset_signing_key_is_no_key() -> None:
    assert ClusterKeySettings(signing_key="").key() is None  # type: ignore[arg-type]
    assert ClusterKeySettings(signing_key=KEY.decode()).key() == KEY  # type: ignore[arg-type]
