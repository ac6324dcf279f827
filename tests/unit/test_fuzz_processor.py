"""Fuzz the worker core: ``Processor(Tables(**dicts)).handle(record)`` on random record streams.

Streams start from the benchmark's realistic fleet (:mod:`bench.fleet`: exclusive, time-slicing,
MPS and MIG nodes with pod churn) and are then mutated — records dropped, duplicated, swapped,
a field replaced by a random one, random records inserted. Every record goes through the codec
first (what the worker actually reads). ``handle`` must never raise, and every output must be
publishable and honest:

* on a shared device nobody is credited with usage: ``credit`` is ``device-wide`` as soon as two
  pods hold it, ``allocation_share`` is slots / replicas (an allocation) and ``Holder`` has no
  usage field at all; the exporter's claim is never trusted on a multi-tenant device;
* each pod's share (the one accounting figure) is in (0, 1], one per holding pod, and a device's
  shares add up to at most 1;
* an event no sample made says its usage is unknown and why, with no reading in it (never 0);
* every GPU reading becomes an event or is refused (counted in a ``telemetry.refused`` record);
* holder UIDs come from our own join — from pod records of that node — never from the
  exporter's ``pod_uid`` labels (those all carry :data:`EXPORTER_UID_PREFIX` here).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.types import AgentRecord
from bench import fleet as bench_fleet
from contract import codec
from contract.inputs import (
    DcgmSample,
    DcgmScrape,
    DeviceAssignment,
    DeviceInventory,
    GpuInfo,
    NodeRecord,
    NodeSupply,
    PodRecord,
    PodResourcesDiff,
    PodResourcesSnapshot,
)
from contract.outputs import (
    Alert,
    AttributionEvent,
    ExporterMisattribution,
    Holder,
    NodeStatus,
    NodeStatusRetired,
    TelemetryRefused,
)
from contract.records import field_names
from streams.core.demand import supply
from streams.core.flow.processor import ClockJump, Output, Processor, Tables, UnusableRecord
from streams.core.flow.spine import fingerprint
from tests.fuzz_strategies import (
    EXPORTER_UID_PREFIX,
    GPU_UUIDS,
    NODES,
    START_MS,
    agent_records,
    mutated,
)

USAGE_WORDS = ("util", "usage", "fb_", "power", "temp", "xid")
HOLDER_FIELDS = set(field_names(Holder))


def new_processor() -> Processor:
    return Processor(Tables.in_memory())


def wire(record: AgentRecord) -> Any:
    """The record as the worker reads it from Kafka."""
    return codec.decode(codec.encode(record))


@st.composite
def record_streams(draw: st.DrawFn) -> list[AgentRecord]:
    """A realistic fleet stream, then a few random edits."""
    records: list[AgentRecord] = list(
        bench_fleet.stream(
            draw(st.integers(1, 4)),
            draw(st.integers(1, 4)),
            start_ms=START_MS,
            interval_ms=draw(st.sampled_from([1000, 5000, 600_000])),
            churn_every=draw(st.integers(0, 3)),
            seed=draw(st.integers(0, 1000)),
        )
    )
    for _ in range(draw(st.integers(0, 20))):
        op = draw(st.sampled_from(["drop", "dup", "swap", "mutate", "insert", "insert"]))
        i = draw(st.integers(0, max(0, len(records) - 1)))
        if op == "insert" or not records:
            records.insert(i, draw(agent_records))
        elif op == "drop":
            del records[i]
        elif op == "dup":
            records.insert(draw(st.integers(i, len(records))), records[i])
        elif op == "swap":
            j = draw(st.integers(0, len(records) - 1))
            records[i], records[j] = records[j], records[i]
        else:
            records[i] = draw(mutated(records[i]))
    return records


def pods_of(holders: tuple[Holder, ...]) -> set[tuple[str, str]]:
    return {(h.namespace, h.pod) for h in holders}


def check_holder_uids(node: str, holders: tuple[Holder, ...], uids: dict[str, set[str]]) -> None:
    for h in holders:
        assert (h.uid is not None) == (h.uid_status == "resolved"), h
        if h.uid is not None:
            assert not h.uid.startswith(EXPORTER_UID_PREFIX), f"exporter label became a UID: {h}"
            assert h.uid in uids[node], f"{h.uid!r} never came from a pod record of {node}"


def check_event(ev: AttributionEvent, uids: dict[str, set[str]]) -> None:
    tenants = pods_of(ev.holders)
    assert ev.tenant_count == len(tenants)
    assert ev.usage.scope == ("mig-instance" if ev.mig is not None else "device")
    if ev.mig is not None:
        assert ev.usage.util_source in (None, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    if ev.state in ("unallocated", "unknown", "mig-parent"):
        assert ev.holders == ()
        assert ev.credit == "none"
    if ev.state == "exclusive":
        assert len(tenants) == 1
        assert ev.credit == "holder"
        assert all(h.allocation_share == 1.0 for h in ev.holders)
    if len(tenants) > 1:
        assert ev.state == "shared"
        assert ev.credit == "device-wide"
        assert not ev.exporter.trusted, "a multi-tenant device's exporter label is trusted"
    if ev.credit == "holder":
        assert len(tenants) == 1
    held_slots = sum(h.slots for h in ev.holders)
    replicas_only = all("::" in d for h in ev.holders for d in h.device_ids)
    if ev.state == "shared" and replicas_only and not any(h.claim for h in ev.holders):
        for h in ev.holders:  # an allocation (slots / replicas), never a usage figure
            fits = ev.replicas and held_slots <= ev.replicas
            expected = round(h.slots / ev.replicas, 4) if fits and ev.replicas else None
            assert h.allocation_share == expected, (h, ev.replicas)
    # the one accounting figure: each holding pod once, in (0, 1], at most 1 per device
    assert {(p.namespace, p.pod) for p in ev.pods} == tenants
    assert all(0 < p.share <= 1 for p in ev.pods), ev.pods
    assert sum(p.share for p in ev.pods) <= 1 + 1e-3, ev.pods
    if ev.origin != "sample":
        assert ev.telemetry.status == "unknown", ev.telemetry
        assert ev.telemetry.reason, ev.telemetry
        reading = msgspec.structs.asdict(ev.usage)
        assert {k: v for k, v in reading.items() if k != "scope" and v is not None} == {}
    payload = orjson.loads(codec.encode(ev))
    for holder in payload["holders"]:
        assert set(holder) == HOLDER_FIELDS
    check_holder_uids(ev.node, ev.holders, uids)


#: every supply record per (node, resource), in emission order (a record emitted again is not
#: appended)
Supplied = dict[tuple[str, str], list[NodeSupply]]


def supply_again(proc: Processor, record: object) -> tuple[NodeSupply, ...] | None:
    """What the record's supply step re-emits first — what it emitted when first processed
    (:func:`streams.core.demand.supply.again`; ``()``: nothing, it is new) — or ``None`` for a
    record
    whose supply is not judged per record (a node leaving, a clock tick: those say their last
    word again whenever they come again)."""
    if isinstance(record, NodeRecord) and record.deleted:
        return None
    node, ts_ms = getattr(record, "node", None), getattr(record, "ts_ms", None)
    if not isinstance(node, str) or not isinstance(ts_ms, int):
        return None
    old = proc.tables.node_supply.get(node)
    return supply.again(old, ts_ms, fingerprint(record)) or ()


def check_supply(
    out: NodeSupply, uids: dict[str, set[str]], supplied: Supplied, again: bool | None = None
) -> None:
    """A node's supply of one resource: emitted when it changed, never back in time — or a
    record emitted before, again (its cause processed again: ``again``; ``None``: a record
    whose re-emissions are not told apart, any record already emitted counts as one) — its
    devices sorted and distinct, each held (pods by name, once, UIDs from the pod records), at
    least one slot, idle since no later than now; a node that left lists nothing."""
    assert out.node
    assert out.resource
    history = supplied.setdefault((out.node, out.resource), [])
    if again or (again is None and out in history):
        assert out in history, out  # emitted again: only ever what was emitted
        return
    if history and not history[-1].gone:  # gone: the node's next life starts anew
        last = history[-1]
        assert (out.devices, out.gone) != (last.devices, last.gone), out
        assert out.ts_ms >= last.ts_ms, (last, out)
    else:
        assert out.devices, out  # nothing was supplied before: nothing to withdraw
    history.append(out)
    assert not (out.gone and out.devices)
    names = [d.device_uuid for d in out.devices]
    assert names == sorted(set(names))
    for device in out.devices:
        assert device.holders
        assert device.slots >= 1
        pods = [(h.namespace, h.pod) for h in device.holders]
        assert pods == sorted(set(pods))
        for h in device.holders:
            assert h.uid is None or h.uid in uids[out.node], h
        assert device.idle_since_ms is None or device.idle_since_ms <= out.ts_ms


def check_supply_last(outputs: Sequence[object], supplied: Supplied) -> None:
    """After a record emitted again, each resource's last word is still its newest record."""
    batch = [o for o in outputs if isinstance(o, NodeSupply)]
    for key in {(o.node, o.resource) for o in batch}:
        last = [o for o in batch if (o.node, o.resource) == key][-1]
        assert last == supplied[key][-1], (last, supplied[key][-1])


def check_outputs(
    outputs: Sequence[Output | _DeadLettered],
    uids: dict[str, set[str]],
    supplied: Supplied | None = None,
    again: tuple[NodeSupply, ...] | None = None,
) -> None:
    """Every output honest (module docstring). ``again``: the supply records the record must
    re-emit first (:func:`supply_again`); every supply record after those is a new word."""
    supplied = {} if supplied is None else supplied
    supplies = [o for o in outputs if isinstance(o, NodeSupply)]
    dead = any(isinstance(o, _DeadLettered) for o in outputs)
    if again is not None and not dead:
        assert tuple(supplies[: len(again)]) == again, (supplies, again)
    repeated = {id(o) for o in supplies[: len(again)]} if again is not None else set()
    for out in outputs:
        if isinstance(out, _DeadLettered):
            continue
        if isinstance(out, NodeStatusRetired):  # a tombstone: a key, no value
            assert out.node
            continue
        assert codec.decode(codec.encode(out)) is not None  # the worker can publish it
        if isinstance(out, AttributionEvent):
            check_event(out, uids)
        elif isinstance(out, Alert):
            assert out.device_wide == (len(pods_of(out.holders)) > 1)
            check_holder_uids(out.node, out.holders, uids)
        elif isinstance(out, TelemetryRefused):
            assert out.reason
            assert out.uuids
        elif isinstance(out, NodeStatus):
            assert out.summary
            assert out.planes[0].name == "driver"  # dependency order
        elif isinstance(out, NodeSupply):
            check_supply(out, uids, supplied, None if again is None else id(out) in repeated)
        else:
            assert isinstance(out, ExporterMisattribution)
            held = {(c.namespace, c.pod) for c in out.holders}
            assert (out.claimed.namespace, out.claimed.pod) not in held
            check_holder_uids(out.node, out.holders, uids)
    check_supply_last(outputs, supplied)


def test_holders_carry_no_usage_field() -> None:
    """The shape itself: no per-holder usage number can exist."""
    assert not [f for f in HOLDER_FIELDS if any(w in f for w in USAGE_WORDS)]


@settings(max_examples=120, deadline=None)
@given(stream=record_streams())
def test_processor_never_raises_and_stays_honest(stream: list[AgentRecord]) -> None:
    proc = new_processor()
    uids: dict[str, set[str]] = defaultdict(set)
    supplied: Supplied = {}
    events = 0
    for record in stream:
        decoded = wire(record)
        assert decoded == record  # the strategies only draw records valid on the wire
        if isinstance(decoded, PodRecord):
            uids[decoded.node].add(decoded.uid)
        again = supply_again(proc, decoded)
        outputs = _handle(proc, decoded)
        events += readings(outputs)
        check_outputs(outputs, uids, supplied, again)
    # every GPU reading (single samples, and every sample of a usable scrape) is an event or
    # refused as not provably its node's
    assert events == sum(isinstance(r, DcgmSample) for r in stream) + sum(
        len(r.samples) for r in stream if isinstance(r, DcgmScrape) and _one_node(r)
    )


def readings(outputs: Sequence[Output | _DeadLettered]) -> int:
    """The GPU readings a record's outputs account for: sample events, and refused rows."""
    sampled = sum(isinstance(o, AttributionEvent) and o.origin == "sample" for o in outputs)
    refused = sum(o.rows for o in outputs if isinstance(o, TelemetryRefused | _DeadLettered))
    return sampled + refused


def _handle(proc: Processor, record: AgentRecord) -> list[Output | _DeadLettered]:
    """The processor's outputs. A record it refuses as bad input (a scrape carrying another
    node's sample; a record older than its node's leaving) is refused whole, with nothing of it
    kept: the worker dead-letters it."""
    before = _contents(proc)
    try:
        return list(proc.handle(record))
    except ClockJump:  # too far ahead of its partition's time: refused, whoever sent it
        assert _contents(proc) == before
        return [_DEAD_LETTERED(record)]
    except UnusableRecord:
        assert _contents(proc) == before
        if isinstance(record, DcgmScrape) and not _one_node(record):
            return []
        assert record.node not in proc.tables.node_state  # type: ignore[union-attr]
        return [_DEAD_LETTERED(record)]


class _DeadLettered:
    """Stands for a dead-lettered record in the count of readings."""

    def __init__(self, record: AgentRecord) -> None:
        self.rows = (
            len(record.samples)
            if isinstance(record, DcgmScrape)
            else int(isinstance(record, DcgmSample))
        )


_DEAD_LETTERED = _DeadLettered


def _contents(proc: Processor) -> dict[str, dict[str, object]]:
    return {f.name: dict(getattr(proc.tables, f.name)) for f in dataclasses.fields(proc.tables)}


def _one_node(scrape: DcgmScrape) -> bool:
    return all(s.node == scrape.node for s in scrape.samples)


@settings(max_examples=150, deadline=None)
@given(records=st.lists(agent_records, max_size=40))
def test_processor_on_random_records_only(records: list[AgentRecord]) -> None:
    """No fleet at all: state built from random records alone, in any order."""
    proc = new_processor()
    uids: dict[str, set[str]] = defaultdict(set)
    supplied: Supplied = {}
    for record in records:
        decoded = wire(record)
        if isinstance(decoded, PodRecord):
            uids[decoded.node].add(decoded.uid)
        again = supply_again(proc, decoded)
        check_outputs(_handle(proc, decoded), uids, supplied, again)


def test_fleet_stream_is_attributed_honestly() -> None:
    """The unmutated benchmark fleet: every sample an event, every held GPU resolved."""
    proc = new_processor()
    uids: dict[str, set[str]] = defaultdict(set)
    supplied: Supplied = {}
    events: list[AttributionEvent] = []
    stream = list(bench_fleet.stream(4, 3, start_ms=START_MS, churn_every=2))
    for record in stream:
        if isinstance(record, PodRecord):
            uids[record.node].add(record.uid)
        again = supply_again(proc, wire(record))
        outputs = proc.handle(wire(record))
        check_outputs(outputs, uids, supplied, again)
        assert not [o for o in outputs if isinstance(o, TelemetryRefused)]
        events += [o for o in outputs if isinstance(o, AttributionEvent) and o.origin == "sample"]
    assert len(events) == bench_fleet.sample_count(4, 3)
    assert {e.state for e in events} == {"exclusive", "shared"}
    assert {e.sharing for e in events} == {"none", "time-slicing", "mps", "mig"}
    assert all(h.uid_status == "resolved" for e in events for h in e.holders)


# --- crashes fuzzing found (fixed: ASCII indexes of at most 9 digits) -------------------------

G = GPU_UUIDS[0]
NODE = NODES[0]


def _sample() -> DcgmSample:
    return DcgmSample(NODE, START_MS + 1, G, 0, "A100", NODE, util_pct=50.0)


def _inventory() -> DeviceInventory:
    return DeviceInventory(NODE, START_MS, "nvml", (GpuInfo(0, G, "A100"),))


@pytest.mark.parametrize(
    "device_id",
    [f"{G}::²", f"{G}::" + "1" * 5000, "nvidia" + "7" * 5000, f"MIG-{G}/{'1' * 5000}/0"],
    ids=["superscript-replica", "5000-digit-replica", "5000-digit-gke-index", "5000-digit-gi"],
)
def test_odd_digits_in_a_device_id_do_not_crash_the_worker(device_id: str) -> None:
    proc = new_processor()
    row = DeviceAssignment("ml", "p", "main", "nvidia.com/gpu", device_id)
    record = wire(PodResourcesSnapshot(NODE, START_MS, (row,)))  # valid on the wire
    proc.handle(record)  # raises today: the whole node snapshot is dead-lettered
    proc.handle(wire(PodResourcesDiff(NODE, START_MS + 1, (), (row,))))
    proc.handle(wire(_inventory()))
    (event,) = [o for o in proc.handle(_sample()) if isinstance(o, AttributionEvent)]
    assert event.state in ("unallocated", "exclusive")


@pytest.mark.parametrize("replicas", ["²", "9" * 5000], ids=["superscript", "5000-digits"])
def test_odd_replica_label_does_not_crash_every_sample_of_the_node(replicas: str) -> None:
    proc = new_processor()
    proc.handle(wire(NodeRecord(NODE, START_MS, (("nvidia.com/gpu.replicas", replicas),))))
    proc.handle(wire(_inventory()))
    outputs = proc.handle(_sample())  # raised once, for every sample of the node
    assert [type(o) for o in outputs] == [AttributionEvent]


# --- found by fuzzing: a device ID a diff adds is not another pod's any more ----------------


def replica_row(pod: str, device_id: str) -> DeviceAssignment:
    return DeviceAssignment("bench", pod, "main", "nvidia.com/gpu", device_id)


def test_an_older_diff_handing_a_held_replica_to_another_pod() -> None:
    """A time-sliced GPU, three of its four replicas held (a snapshot), then a diff stamped an
    hour earlier handing replica ``::0`` to a fourth pod: each holder holds 1 of 4 replicas and
    says so (``allocation_share`` 0.25), rather than two pods splitting one replica."""
    proc = new_processor()
    labels = (("nvidia.com/gpu.replicas", "4"), ("nvidia.com/gpu.sharing-strategy", "time-slicing"))
    proc.handle(wire(NodeRecord(NODE, START_MS, labels)))
    rows = tuple(replica_row(f"r{i}", f"{G}::{i}") for i in range(3))
    proc.handle(wire(PodResourcesSnapshot(NODE, START_MS, rows)))
    diff = PodResourcesDiff(NODE, START_MS - 3_600_000, (replica_row("new", f"{G}::0"),), ())
    (event,) = [o for o in proc.handle(wire(diff)) if isinstance(o, AttributionEvent)]
    check_event(event, defaultdict(set))
    assert [(h.pod, h.allocation_share) for h in event.holders] == [
        ("new", 0.25),
        ("r1", 0.25),
        ("r2", 0.25),
    ]
