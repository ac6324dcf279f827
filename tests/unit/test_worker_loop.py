"""The worker's per-record loop over a fake stream: no Faust app, no Kafka."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import REGISTRY

from contract import codec
from contract.inputs import (
    DcgmSample,
    DeviceAssignment,
    ExporterClaim,
    NodeSupply,
    PodResourcesSnapshot,
)
from contract.outputs import AttributionEvent, DeadLetter
from contract.topics import TABLES
from streams.core.flow.processor import Output, Processor, Tables
from streams.worker.live import LiveDevices
from streams.worker.loop import Event, ProcessingDefect, RecordLoop

TOPIC = "gpuattr.node-events"
GPU = "GPU-aaaa"
HELD = PodResourcesSnapshot("n1", 100, (DeviceAssignment("ml", "a", "c", "nvidia.com/gpu", GPU),))
ANOTHER = DeviceAssignment("ml", "b", "c", "nvidia.com/gpu", GPU)
# dcgm-exporter credits a pod that holds nothing, and reports a new XID: three outputs
NOISY = {"xid": 79, "exporter_claims": (ExporterClaim("ml", "ghost", "c"),)}
#: the snapshot's own outputs: its allocation, reported before any sample, and the node's supply
#: of the resource it holds (for the demand stage)
HELD_OUT = ("AttributionEvent", "NodeSupply")
#: the first trusted sample's: its attribution, and the supply again — the device is measured now
#: (before it, its usage was unknown: counted apart from idle by the demand stage)
FIRST_SAMPLE_OUT = ("AttributionEvent", "NodeSupply")


def sample(ts: int, **kw: Any) -> DcgmSample:
    return DcgmSample(node="n1", ts_ms=ts, uuid=GPU, gpu_index=0, model="A100", hostname="n1", **kw)


@dataclass(frozen=True)
class FakeMessage:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class FakeEvent:
    value: bytes
    message: FakeMessage


def event(payload: object, offset: int, partition: int = 0, key: bytes | None = b"n1") -> FakeEvent:
    value = payload if isinstance(payload, bytes) else codec.encode(payload)
    return FakeEvent(value, FakeMessage(TOPIC, partition, offset, key, value))


async def stream(events: Iterable[FakeEvent]) -> AsyncIterator[FakeEvent]:
    for e in events:
        yield e


class Broken(dict[str, Any]):
    """A table whose writes fail: the processor raises part-way through a record."""

    def __setitem__(self, key: str, value: Any) -> None:
        raise RuntimeError("table write failed")


@dataclass
class Harness:
    broken: tuple[str, ...] = ()
    published: list[Output] = field(default_factory=list)
    dead: list[tuple[int, str]] = field(default_factory=list)
    live: LiveDevices = field(default_factory=LiveDevices)
    stopped: list[BaseException] = field(default_factory=list)
    state: Tables | None = None  # the tables of the last run
    cluster_key: bytes | None = None  # the cluster role's signing key, when the worker has one

    def tables(self) -> Tables:
        t: dict[str, MutableMapping[str, Any]] = {
            name: Broken() if name in self.broken else {} for name in TABLES
        }
        return Tables(**t)

    async def publish(self, outs: Sequence[Output]) -> None:
        self.published.extend(outs)

    async def dead_letter(self, ev: Event, error: str) -> None:
        self.dead.append((ev.message.offset, error))

    async def run(self, events: Iterable[FakeEvent]) -> None:
        self.state = self.tables()
        loop = RecordLoop(
            Processor(self.state),
            self.publish,
            self.dead_letter,
            self.live,
            self.stopped.append,
            self.cluster_key,
        )
        await loop.run(stream(events))


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@dataclass(frozen=True)
class Case:
    events: tuple[FakeEvent, ...]
    published: tuple[str, ...]  # output kinds, in publish order
    dead: tuple[tuple[int, str], ...] = ()  # (offset, reason prefix)
    broken: tuple[str, ...] = ()
    errors: tuple[tuple[str, int], ...] = ()  # (error kind, how many)


CASES = {
    "snapshot-then-sample-attributes": Case(
        (event(HELD, 0), event(sample(150, util_pct=50.0), 1)), (*HELD_OUT, *FIRST_SAMPLE_OUT)
    ),
    "all-outputs-of-a-record-in-order": Case(
        (
            event(HELD, 0),
            event(sample(140, xid=0), 1),
            event(sample(150, **NOISY), 2),
            event(sample(160), 3),
        ),
        (
            *HELD_OUT,
            *FIRST_SAMPLE_OUT,
            "AttributionEvent",
            "ExporterMisattribution",
            "Alert",
            "AttributionEvent",
        ),
    ),
    "a-scrape-nothing-can-check-is-refused-not-attributed": Case(
        (event(sample(150), 0),), ("TelemetryRefused",)
    ),
    "not-json-is-dead-lettered-and-the-loop-goes-on": Case(
        (event(HELD, 0), event(b"{nope", 1), event(sample(150), 2)),
        (*HELD_OUT, *FIRST_SAMPLE_OUT),
        dead=((1, "undecodable: not JSON"),),
        errors=(("decode", 1),),
    ),
    "unknown-kind-is-dead-lettered": Case(
        (event(b'{"schema":"mystery","v":1}', 0), event(HELD, 1), event(sample(150), 2)),
        (*HELD_OUT, *FIRST_SAMPLE_OUT),
        dead=((0, "undecodable: unknown record kind 'mystery'"),),
        errors=(("decode", 1),),
    ),
    "wrong-fields-are-dead-lettered": Case(
        (event(b'{"schema":"dcgm.sample","v":1,"node":"n1"}', 0), event(HELD, 1)),
        HELD_OUT,
        dead=((0, "undecodable: dcgm.sample v1: "),),
        errors=(("decode", 1),),
    ),
    "record-with-no-place-on-the-input-topic-is-dead-lettered": Case(
        (event(DeadLetter(TOPIC, 0, 0, None, "x", "", 1), 0), event(HELD, 1)),
        HELD_OUT,
        dead=((0, "unusable: the worker does not handle DeadLetter"),),
        errors=(("unusable", 1),),
    ),
    "a-record-under-another-nodes-key-is-refused": Case(
        (event(HELD, 0, key=b"node-a"), event(HELD, 1), event(sample(150), 2)),
        (*HELD_OUT, *FIRST_SAMPLE_OUT),  # the allocation (once), then the sample
        dead=((0, "refused: key 'node-a' but payload of node 'n1'"),),
        errors=(("key-mismatch", 1),),
    ),
    "a-record-without-a-key-is-refused": Case(
        (event(HELD, 0, key=None), event(sample(150), 1, key=None)),
        (),
        dead=((0, "refused: record of node 'n1' without a key"), (1, "refused: record of")),
        errors=(("key-mismatch", 2),),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_loop(case: Case) -> None:
    kinds = ("decode", "unusable", "defect", "key-mismatch")
    errors_before = {k: counter("gpuattr_worker_errors_total", kind=k) for k in kinds}
    in_before = counter("gpuattr_worker_events_in_total", topic=TOPIC)
    h = Harness(broken=case.broken)

    await h.run(case.events)

    assert tuple(type(o).__name__ for o in h.published) == case.published
    assert len(h.dead) == len(case.dead)
    for (offset, error), (want_offset, want_prefix) in zip(h.dead, case.dead, strict=True):
        assert offset == want_offset
        assert error.startswith(want_prefix), error
    assert counter("gpuattr_worker_events_in_total", topic=TOPIC) - in_before == len(case.events)
    want_errors = dict(case.errors)
    for kind in kinds:
        got = counter("gpuattr_worker_errors_total", kind=kind) - errors_before[kind]
        assert got == want_errors.get(kind, 0), kind


async def test_attribution_is_published_and_kept_live_for_its_partition() -> None:
    h = Harness()
    await h.run([event(HELD, 0, partition=3), event(sample(150, util_pct=50.0), 1, partition=3)])
    allocation, supplied, out, measured = h.published
    assert isinstance(allocation, AttributionEvent)
    assert allocation.origin == "allocation"
    assert isinstance(supplied, NodeSupply)  # published, never kept live
    assert [(d.device_uuid, d.measured) for d in supplied.devices] == [(GPU, False)]
    assert isinstance(measured, NodeSupply)
    assert [(d.device_uuid, d.measured) for d in measured.devices] == [(GPU, True)]
    assert isinstance(out, AttributionEvent)
    assert out.origin == "sample"
    assert (out.node, out.device_uuid, out.state) == ("n1", GPU, "exclusive")
    assert [holder.pod for holder in out.holders] == ["a"]
    assert h.live.partitions() == {3}
    assert [row.device_uuid for row in h.live.rows({3}, {})] == [GPU]
    assert h.live.rows({0, 1, 2}, {}) == []  # not shown once partition 3 is gone


async def test_only_attribution_events_are_kept_live() -> None:
    h = Harness()
    await h.run([event(HELD, 0), event(sample(140, xid=0), 1), event(sample(150, **NOISY), 2)])
    assert len(h.published) == 7  # with the node's supply, unmeasured then measured
    assert len(h.live) == 1


async def test_a_defect_in_our_code_stops_the_worker_and_is_never_dead_lettered() -> None:
    """A table write that raises is our defect, not bad input: the loop stops the worker, does
    not acknowledge the record (its offset is never committed) and handles nothing after it."""
    defects = counter("gpuattr_worker_errors_total", kind="defect")
    h = Harness(broken=("slot_holders",))
    events = (
        event(HELD, 0),  # the first write to slot_holders raises
        event(sample(150), 1),
    )
    with pytest.raises(ProcessingDefect, match="PodResourcesSnapshot at 0") as raised:
        await h.run(events)
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert [type(e) for e in h.stopped] == [RuntimeError]  # the worker was told to stop, once
    assert h.dead == []  # nothing dead-lettered: no data dropped silently
    assert h.published == []  # the sample after it was not processed
    assert counter("gpuattr_worker_errors_total", kind="defect") == defects + 1


async def test_a_forged_record_changes_no_table() -> None:
    """Key node-a, payload node-b: refused, counted, dead-lettered; no table changed,
    nothing published — and node-a's own records are processed normally."""
    refused = counter("gpuattr_worker_errors_total", kind="key-mismatch")
    forged_snapshot = PodResourcesSnapshot(
        "node-b", 100, (DeviceAssignment("ml", "x", "c", "nvidia.com/gpu", GPU),)
    )
    forged_sample = DcgmSample(
        node="node-b", ts_ms=150, uuid=GPU, gpu_index=0, model="A100", hostname="node-b"
    )
    h = Harness()
    await h.run([event(forged_snapshot, 0, key=b"node-a"), event(forged_sample, 1, key=b"node-a")])
    assert h.state is not None
    assert {name: dict(getattr(h.state, name)) for name in TABLES} == {n: {} for n in TABLES}
    assert h.published == []
    assert [offset for offset, _ in h.dead] == [0, 1]
    assert all("payload of node 'node-b'" in error for _, error in h.dead)
    assert counter("gpuattr_worker_errors_total", kind="key-mismatch") == refused + 2
