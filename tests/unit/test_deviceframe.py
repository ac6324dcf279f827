"""The memos change no output: the processor with its memoized joins (:class:`Joins`, a device's
frame, :mod:`streams.core.flow.deviceframe`) and supply parts (:class:`Supplied`) says the same,
record by record, and leaves the same tables, as a processor whose every answer is the plain
function's (decided afresh) — on every built-in scenario (DRA, MIG, MPS, time-slicing) and on
random mutated fleet streams (records dropped, repeated, swapped, mutated: holders that change,
pods that end, samples older than the last change). And the memo itself: it holds while its
records are the ones in the tables, and only then."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import pytest
from hypothesis import given, settings

from agents.types import AgentRecord
from bench import fleet as bench_fleet
from contract import codec
from contract.inputs import (
    AllocatableDevice,
    DcgmSample,
    DcgmScrape,
    DeviceAssignment,
    DeviceInventory,
    ExporterClaim,
    NodeRecord,
    PodResourcesDiff,
    PodResourcesSnapshot,
)
from contract.outputs import AttributionEvent, ExporterMisattribution, Holder, Origin, Telemetry
from contract.records import replace
from infra.settings import AlertSettings
from sim.scenario import builtin_names, load
from streams.core.demand import supply
from streams.core.demand.supply import AllocatedDevice, Supplied, Supplies
from streams.core.devices.attribution import DeviceContext, DeviceFacts, Holding
from streams.core.devices.holders import NodeDevices, SlotHolders
from streams.core.devices.sharing import SharingDecision
from streams.core.flow import nodeview
from streams.core.flow.deviceframe import Frame, Frames, projection, settled_from
from streams.core.flow.nodeview import Joins, NodeView
from streams.core.flow.processor import Processor, Tables, UnusableRecord
from streams.core.node.pods import PodLife, PodNames
from tests.fuzz_strategies import START_MS
from tests.scenario_events import run
from tests.unit.test_fuzz_processor import record_streams


def _outputs(proc: Processor, record: object) -> list[object] | str:
    try:
        return list(proc.handle(record))
    except UnusableRecord as exc:
        return f"unusable: {exc}"


def _tables(proc: Processor) -> dict[str, dict[str, object]]:
    return {f.name: dict(getattr(proc.tables, f.name)) for f in dataclasses.fields(proc.tables)}


class FreshJoins(Joins):
    """Every join decided afresh: the plain functions the memo stands for."""

    def roster(self, view: NodeView, scraped: tuple[str, ...]) -> Mapping[str, DeviceFacts]:
        return nodeview.roster(view, scraped)

    def sample_event(
        self, t: Tables, view: NodeView, sample: DcgmSample, thresholds: AlertSettings
    ) -> tuple[AttributionEvent, tuple[ExporterMisattribution, ...], Sequence[dict[str, str]]]:
        return nodeview.sample_event(t, view, sample, thresholds)

    def spine_event(
        self,
        t: Tables,
        view: NodeView,
        key: str,
        facts: DeviceFacts,
        ts_ms: int,
        origin: Origin,
        telemetry: Telemetry,
    ) -> AttributionEvent:
        return nodeview.spine_event(t, view, key, facts, ts_ms, origin, telemetry)

    def device_holders(
        self, t: Tables, view: NodeView, key: str, facts: DeviceFacts, ts_ms: int
    ) -> tuple[Holder, ...]:
        return nodeview.device_holders(t, view, key, facts, ts_ms)


class FreshSupplied(Supplied):
    """Every node's supply decided afresh (:func:`streams.core.demand.supply.node_supply`)."""

    def node_supply(
        self, node: str, product: str | None, devices: Iterable[AllocatedDevice]
    ) -> Supplies:
        return supply.node_supply(product, devices)


def fresh_processor() -> Processor:
    """A processor that memoizes nothing: what the memoized one is held equal to."""
    proc = Processor(Tables.in_memory())
    proc.spine.joins = FreshJoins()
    proc.supplied = FreshSupplied()
    return proc


def frames_of(proc: Processor) -> Frames:
    return proc.spine.joins.frames


def same_with_and_without(records: list[object]) -> Processor:
    framed, plain = Processor(Tables.in_memory()), fresh_processor()
    for i, record in enumerate(records):
        assert _outputs(framed, record) == _outputs(plain, record), f"record {i}: {type(record)}"
    assert _tables(framed) == _tables(plain)
    return framed


@pytest.mark.parametrize("at_s", [0.0, 3600.0])
@pytest.mark.parametrize("name", builtin_names())
def test_every_scenario_reads_the_same_with_frames(name: str, at_s: float) -> None:
    records = [record for record, _ in run(load(name), at_s, 10)]
    framed = same_with_and_without(records)
    assert frames_of(framed).hits > 0  # the memo's path was taken (the scenarios' samples repeat)


@settings(max_examples=60, deadline=None)
@given(stream=record_streams())
def test_mutated_streams_read_the_same_with_frames(stream: list[AgentRecord]) -> None:
    same_with_and_without([codec.decode(codec.encode(r)) for r in stream])


def test_devices_only_a_scrape_lists_come_and_go_the_same_with_frames() -> None:
    """Nodes without holders whose inventory lists no MIG instance: their GPU instances are the
    ones the exporter lists. An instance that leaves the scrape, then every one once the scrape
    goes stale, leave the roster the same way with the memo (which keeps a node's roster per
    scrape) as without it."""
    records = [
        replace(r, assignments=(), allocatable=())
        if isinstance(r, PodResourcesSnapshot)
        else replace(r, migs=())
        if isinstance(r, DeviceInventory)
        else r
        for r in bench_fleet.stream(4, 6, start_ms=START_MS, interval_ms=30_000)
        if not isinstance(r, PodResourcesDiff)
    ]
    scrapes = [i for i, r in enumerate(records) if isinstance(r, DcgmScrape)]
    for i in scrapes[len(scrapes) // 2 :]:  # the second half: one GPU fewer
        scrape = records[i]
        assert isinstance(scrape, DcgmScrape)
        records[i] = replace(scrape, samples=scrape.samples[1:])
    last = records[scrapes[-1]]
    assert isinstance(last, DcgmScrape)
    later = last.ts_ms + 3_600_000  # long after: every reading stale
    records.append(NodeRecord(last.node, later, (("nvidia.com/gpu.product", "A100"),)))
    framed = same_with_and_without([codec.decode(codec.encode(r)) for r in records])
    assert frames_of(framed).hits > 0


def test_the_join_a_node_record_made_is_the_one_its_next_sample_reads() -> None:
    """A node's holders joined for its supply and allocation events (no sample yet) are kept
    as the devices' frames: the first scrape after them joins nothing afresh, and says what
    the processor without the memo says."""
    records = [
        codec.decode(codec.encode(r))
        for r in bench_fleet.stream(4, 1, start_ms=START_MS, churn_every=0)
    ]
    first = next(i for i, r in enumerate(records) if isinstance(r, DcgmScrape))
    framed = same_with_and_without(records[:first])
    held = {
        (r.node, a.device_id.partition("::")[0])
        for r in records[:first]
        if isinstance(r, PodResourcesSnapshot)
        for a in r.assignments
    }
    assert held
    assert len(frames_of(framed)) >= len(held)
    misses, hits = frames_of(framed).misses, frames_of(framed).hits
    plain = fresh_processor()
    for r in records[:first]:
        plain.handle(r)
    samples = 0
    for r in records[first:]:
        assert isinstance(r, DcgmScrape)
        assert _outputs(framed, r) == _outputs(plain, r)
        samples += sum(1 for s in r.samples if (s.node, s.uuid) in held)
    assert samples > 0
    assert frames_of(framed).hits - hits >= samples  # every held device's sample read its frame
    assert (
        frames_of(framed).misses - misses
        <= sum(len(r.samples) for r in records[first:] if isinstance(r, DcgmScrape)) - samples
    )


def test_the_exporters_word_is_remade_when_a_samples_pod_labels_change() -> None:
    """A device's frame keeps the exporter's word on its last sample's pod labels: samples that
    credit nobody, the holder, a stranger, or carry per-process rows, in turn and back, each
    read what the processor without the memo reads."""
    records = [
        codec.decode(codec.encode(r))
        for r in bench_fleet.stream(1, 8, start_ms=START_MS, churn_every=0)
    ]
    snapshot = next(r for r in records if isinstance(r, PodResourcesSnapshot))
    holder = snapshot.assignments[0]
    labels: list[tuple[tuple[ExporterClaim, ...], tuple[str, ...]]] = [
        ((), ()),
        ((ExporterClaim(holder.namespace, holder.pod, holder.container),), ()),
        ((ExporterClaim("other", "stranger", "main"),), ()),
        ((ExporterClaim(holder.namespace, holder.pod, holder.container),), ("util_pct",)),
        ((ExporterClaim(holder.namespace, holder.pod, holder.container),), ()),
        ((), ()),
    ]
    scrapes = [i for i, r in enumerate(records) if isinstance(r, DcgmScrape)]
    said = []
    for i, (claims, split) in zip(scrapes, labels, strict=False):
        scrape = records[i]
        assert isinstance(scrape, DcgmScrape)
        first = next(s for s in scrape.samples if s.uuid == holder.device_id)
        relabelled = replace(first, exporter_claims=claims, exporter_split_fields=split)
        records[i] = replace(
            scrape, samples=tuple(relabelled if s is first else s for s in scrape.samples)
        )
    framed, plain = Processor(Tables.in_memory()), fresh_processor()
    for record in records:
        out = _outputs(framed, record)
        assert out == _outputs(plain, record)
        if isinstance(record, DcgmScrape) and not isinstance(out, str):
            said += [
                o.exporter.verdict
                for o in out
                if isinstance(o, AttributionEvent) and o.device_uuid == holder.device_id
            ]
    assert frames_of(framed).hits > 0
    # every verdict the labels call for was read, in turn, with frames
    assert said[:6] == [
        "uncredited",
        "trusted",
        "stranger",
        "per-process",
        "trusted",
        "uncredited",
    ]


# --- the memo


ROW = DeviceAssignment("ns", "p", "c", "nvidia.com/gpu", "GPU-a")
HOLD = Holding((ROW,), (), SharingDecision("none", None, ()), (), (), 1, ("ns/p",))


def frame(token: object, holders: tuple[object, ...], pods: tuple[object, ...]) -> Frame:
    since = settled_from(holders, pods)
    assert since is not None
    return Frame(
        token, ("n/GPU-a",), holders, ("n/ns/p",), pods, since, (ROW,), DeviceContext(), HOLD, ()
    )


def test_a_frame_holds_while_its_records_are_the_tables_and_only_then() -> None:
    holders = SlotHolders("n", "GPU-a", (ROW,), 1000)
    pods = PodNames((PodLife("uid-1", 500),))
    tables = {"n/GPU-a": holders, "n/ns/p": pods}
    frames = Frames()
    token = frames.token("n", ("node", None, None, None, True))
    frames.put("n", "GPU-a", frame(token, (holders,), (pods,)))
    assert frames.get("n", "GPU-a", token, 2000, tables.get, tables.get) is not None
    assert frames.get("n", "GPU-a", token, 999, tables.get, tables.get) is None  # before
    assert frames.get("n", "GPU-a", object(), 2000, tables.get, tables.get) is None  # view
    tables["n/GPU-a"] = SlotHolders("n", "GPU-a", (), 1500)
    assert frames.get("n", "GPU-a", token, 2000, tables.get, tables.get) is None  # holders
    tables["n/GPU-a"] = holders
    tables["n/ns/p"] = PodNames((PodLife("uid-1", 500, gone_ms=1800),))
    assert frames.get("n", "GPU-a", token, 2000, tables.get, tables.get) is None  # pod ended
    # an equal record in place of the one read: it holds, and keeps the new record
    tables["n/ns/p"] = PodNames((PodLife("uid-1", 500),))
    hit = frames.get("n", "GPU-a", token, 2000, tables.get, tables.get)
    assert hit is not None
    assert hit.pod_recs[0] is tables["n/ns/p"]


def test_time_settles_after_the_last_holder_change_and_pod_end() -> None:
    holders = SlotHolders("n", "GPU-a", (ROW,), 1000)
    ended = PodNames((PodLife("uid-0", 100, gone_ms=3000), PodLife("uid-1", 2000)))
    assert settled_from((holders, None), (ended, None)) == 3000
    assert settled_from((None,), ()) == -1
    assert settled_from(("not a holder record",), ()) is None


def test_the_view_token_ignores_what_every_podresources_record_renews() -> None:
    listed = (AllocatableDevice("nvidia.com/gpu", "GPU-a"),)
    index = NodeDevices("n", ("GPU-a",), {"GPU-a": ("GPU-a",)}, (), listed, 1000)
    frames = Frames()
    token = frames.token("n", ("node", index, None, None, True))
    renewed = replace(index, updated_ms=2000, allocatable=(replace(listed[0]),))
    assert projection(("node", renewed, None, None, True)) == projection(
        ("node", index, None, None, True)
    )
    assert frames.token("n", ("node", renewed, None, None, True)) is token
    dropped = replace(renewed, allocatable=())  # the kubelet no longer lists the device
    assert frames.token("n", ("node", dropped, None, None, True)) is not token
    token = frames.token("n", ("node", renewed, None, None, True))
    moved = replace(renewed, keys={"GPU-a": ("GPU-b",)})
    assert frames.token("n", ("node", moved, None, None, True)) is not token
    assert frames.token("n", ("other-labels", moved, None, None, True)) is not token


def test_the_memo_is_bounded_and_forgets_a_node() -> None:
    frames = Frames(max_frames=3)
    token = frames.token("n", ("node", None, None, None, True))
    for i in range(5):
        frames.put("n", f"GPU-{i}", frame(token, (None,), (None,)))
    assert len(frames) == 3
    frames.forget("n")
    assert len(frames) == 0
