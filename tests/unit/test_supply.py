"""A node's supply (streams/core/demand/supply.py): its allocated devices per resource in the demand
stage's terms, and the records the processor emits when that changes — once, remembered per
node, withdrawn when the node leaves, and emitted again exactly after a crash at any point."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableMapping, Sequence

import pytest

from contract.inputs import (
    AgentStatus,
    ClockTick,
    DcgmScrape,
    NodeRecord,
    NodeSupply,
    PodResourcesDiff,
    SupplyDevice,
    SupplyHolder,
)
from contract.inputs import DeviceAssignment as A
from contract.outputs import Holder, Workload
from contract.records import replace
from contract.topics import TABLES
from infra.settings import AlertSettings
from streams.core.alerts.episodes import Episode
from streams.core.demand import supply
from streams.core.demand.supply import AllocatedDevice, NodeSupplyState, node_supply
from streams.core.flow.processor import Output, Processor, Tables
from streams.core.flow.state import TABLE_CODEC
from streams.core.lifetimes import Lifetimes
from tests.crashpoints import every_crash_point
from tests.unit import test_processor_dra as dra
from tests.unit.test_spine import (
    G0,
    G1,
    G2,
    LIFE,
    MIN,
    NODE,
    S_,
    T0,
    TENANTS,
    TRAINER,
    dcgm,
    scrape,
    setup,
)
from tests.unit.test_spine import LABELS as SPINE_LABELS

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
H100 = "NVIDIA-H100-80GB-HBM3"
MIG = "MIG-5555aaaa-0000-5000-8000-000000000001"


def holder(
    pod: str,
    *ids: str,
    resource: str = GPU,
    ns: str = "ml",
    uid: str | None = "",
    container: str = "main",
    claim: str | None = None,
) -> Holder:
    uid = f"uid-{pod}" if uid == "" else uid
    return Holder(
        ns,
        pod,
        container,
        resource,
        ids,
        len(ids),
        uid=uid,
        uid_status="resolved" if uid else "no-pod-watch",
        workload=Workload("Deployment", pod.rsplit("-", 1)[0]),
        claim=claim,
    )


def who(*pods: str, ns: str = "ml") -> tuple[tuple[str, str, str], ...]:
    return tuple((ns, p, f"uid-{p}") for p in pods)


def supplied(pod: str, ns: str = "ml") -> SupplyHolder:
    return SupplyHolder(ns, pod, f"uid-{pod}", f"Deployment/{pod.rsplit('-', 1)[0]}")


IDLE = Episode(T0, holders=who("infer-a"))

CASES: dict[str, tuple[list[AllocatedDevice], dict[str, tuple[SupplyDevice, ...]]]] = {
    "exclusive-gpu": (
        [AllocatedDevice(G0, (holder("train-0", G0),), measured=True)],
        {GPU: (SupplyDevice(G0, H100, holders=(supplied("train-0"),)),)},
    ),
    "time-sliced-replicas-held-by-two-pods-are-one-device-with-slots": (
        [
            AllocatedDevice(
                G0,
                (
                    holder("infer-b", f"{G0}::2", f"{G0}::3"),
                    holder("infer-a", f"{G0}::0"),
                    holder("infer-a", f"{G0}::1", container="sidecar"),
                ),
                measured=True,
            )
        ],
        {
            GPU: (
                SupplyDevice(G0, H100, holders=(supplied("infer-a"), supplied("infer-b")), slots=4),
            )
        },
    ),
    "mig-instances-by-their-uuid-and-profile": (
        [
            AllocatedDevice(
                MIG,
                (holder("mig-a", MIG, resource="nvidia.com/mig-1g.10gb"),),
                measured=True,
                mig_profile="1g.10gb",
            )
        ],
        {
            "nvidia.com/mig-1g.10gb": (
                SupplyDevice(MIG, H100, "1g.10gb", holders=(supplied("mig-a"),)),
            )
        },
    ),
    "a-renamed-shared-resource-is-its-own": (
        [
            AllocatedDevice(G1, (holder("infer-a", f"{G1}::0", resource=SHARED),), True),
            AllocatedDevice(G0, (holder("train-0", G0),), measured=True),
        ],
        {
            GPU: (SupplyDevice(G0, H100, holders=(supplied("train-0"),)),),
            SHARED: (SupplyDevice(G1, H100, holders=(supplied("infer-a"),)),),
        },
    ),
    "a-dra-claim-shared-by-two-pods-is-one-allocation-of-its-driver": (
        [
            AllocatedDevice(
                G0,
                tuple(
                    holder(p, "dra:gpu.nvidia.com/n/gpu-0", resource="dra:gpu.nvidia.com", claim=c)
                    for p, c in (("infer-a", "ml/infer"), ("infer-b", "ml/infer"))
                ),
                measured=True,
            ),
            AllocatedDevice(
                G1,  # two claims, each a share of one device: two allocations
                tuple(
                    holder(p, "dra:gpu.nvidia.com/n/gpu-1", resource="dra:gpu.nvidia.com", claim=c)
                    for p, c in (("cc-a", "ml/cc-1"), ("cc-b", "ml/cc-2"))
                ),
                measured=True,
            ),
        ],
        {
            "dra:gpu.nvidia.com": (
                SupplyDevice(G0, H100, holders=(supplied("infer-a"), supplied("infer-b"))),
                SupplyDevice(G1, H100, holders=(supplied("cc-a"), supplied("cc-b")), slots=2),
            )
        },
    ),
    "idle-under-its-holders-since-the-episode-began": (
        [AllocatedDevice(G0, (holder("infer-a", G0),), measured=True, idle=IDLE)],
        {GPU: (SupplyDevice(G0, H100, idle_since_ms=T0, holders=(supplied("infer-a"),)),)},
    ),
    "busy-no-episode-is-not-idle": (
        [AllocatedDevice(G0, (holder("infer-a", G0),), measured=True, idle=None)],
        {GPU: (SupplyDevice(G0, H100, holders=(supplied("infer-a"),)),)},
    ),
    "usage-unknown-is-never-idle-though-the-episode-stays-open": (
        [AllocatedDevice(G0, (holder("infer-a", G0),), measured=False, idle=IDLE)],
        {GPU: (SupplyDevice(G0, H100, holders=(supplied("infer-a"),), measured=False),)},
    ),
    "holders-changed-since-the-episode-began-is-not-idle": (
        [AllocatedDevice(G0, (holder("infer-b", G0),), measured=True, idle=IDLE)],
        {GPU: (SupplyDevice(G0, H100, holders=(supplied("infer-b"),)),)},
    ),
    "a-name-recreated-with-a-new-uid-is-not-the-episodes-pod": (
        [AllocatedDevice(G0, (holder("infer-a", G0, uid="uid-new"),), True, IDLE)],
        {
            GPU: (
                SupplyDevice(
                    G0,
                    H100,
                    holders=(SupplyHolder("ml", "infer-a", "uid-new", "Deployment/infer"),),
                ),
            )
        },
    ),
    "a-uid-resolved-after-the-episode-began-is-the-same-pod": (
        [
            AllocatedDevice(
                G0, (holder("infer-a", G0),), True, Episode(T0, holders=(("ml", "infer-a", ""),))
            )
        ],
        {GPU: (SupplyDevice(G0, H100, idle_since_ms=T0, holders=(supplied("infer-a"),)),)},
    ),
    "a-row-naming-no-resource-is-nothing-anyone-can-ask-for": (
        [AllocatedDevice(G0, (holder("x-0", G0, resource=""),), measured=True)],
        {},
    ),
}


@pytest.mark.parametrize(("devices", "expected"), CASES.values(), ids=CASES.keys())
def test_node_supply(
    devices: list[AllocatedDevice], expected: dict[str, tuple[SupplyDevice, ...]]
) -> None:
    assert node_supply(H100, devices) == expected
    assert node_supply(H100, reversed(devices)) == expected  # order never matters


@pytest.mark.parametrize(("devices", "expected"), CASES.values(), ids=CASES.keys())
def test_the_kept_supply_says_what_node_supply_says_on_first_sight_and_again(
    devices: list[AllocatedDevice], expected: dict[str, tuple[SupplyDevice, ...]]
) -> None:
    kept = supply.Supplied()
    assert kept.node_supply(NODE, H100, devices) == expected
    assert kept.node_supply(NODE, H100, list(reversed(devices))) == expected
    assert kept.misses == len(devices)
    assert kept.hits == len(devices)


def test_the_kept_supply_decides_again_exactly_the_devices_that_changed() -> None:
    """A device equal to its last description (holders, reading, idle episode, profile, the
    node's product) reuses its part; any one of those moving decides it again."""
    a0, a1 = (holder("a-0", G0),), (holder("a-1", G1),)
    base = [AllocatedDevice(G0, a0, True), AllocatedDevice(G1, a1, True)]
    idle = Episode(T0, holders=(("ml", "a-0", "uid-a-0"),))
    moves = {
        "same tuple": (base, H100, 0),
        "equal, not the same tuple": (
            [AllocatedDevice(G0, (holder("a-0", G0),), True), base[1]],
            H100,
            0,
        ),
        "holders": ([AllocatedDevice(G0, (holder("b-0", G0),), True), base[1]], H100, 1),
        "reading": ([AllocatedDevice(G0, a0, False), base[1]], H100, 1),
        "idle episode": ([AllocatedDevice(G0, a0, True, idle), base[1]], H100, 1),
        "profile": ([AllocatedDevice(G0, a0, True, mig_profile="1g.10gb"), base[1]], H100, 1),
        "product": (base, "A100", 2),
    }
    for name, (now, product, decided) in moves.items():
        kept = supply.Supplied()
        kept.node_supply(NODE, H100, base)
        kept.misses = 0
        assert kept.node_supply(NODE, product, now) == node_supply(product, now), name
        assert kept.misses == decided, name


def test_the_kept_supply_holds_each_nodes_last_devices_only() -> None:
    """Bounded by what is live: a device no longer held, and a node that left, are not kept."""
    kept = supply.Supplied()
    kept.node_supply(NODE, H100, [AllocatedDevice(G0, (holder("a-0", G0),), True)])
    kept.node_supply("node-b", H100, [AllocatedDevice(G1, (holder("b-0", G1),), True)])
    assert len(kept) == 2
    kept.node_supply(NODE, H100, [AllocatedDevice(G2, (holder("a-2", G2),), True)])
    assert len(kept) == 2
    kept.node_supply(NODE, H100, [])
    assert len(kept) == 1
    kept.forget("node-b")
    assert len(kept) == 0


def test_the_kept_supply_holds_at_most_its_bound_of_nodes_the_oldest_out_first() -> None:
    """A node whose partition moved to another worker leaves there: here it ages out."""
    kept = supply.Supplied(max_nodes=2)
    for node in ("n-1", "n-2", "n-1", "n-3"):
        kept.node_supply(node, H100, [AllocatedDevice(G0, (holder("a-0", G0),), True)])
    assert len(kept) == 2
    kept.misses = kept.hits = 0
    kept.node_supply("n-2", H100, [AllocatedDevice(G0, (holder("a-0", G0),), True)])
    assert kept.misses == 1  # n-2, supplied longest ago, went first
    kept.node_supply("n-1", H100, [AllocatedDevice(G0, (holder("a-0", G0),), True)])
    assert kept.hits == 0  # and n-1 (older than n-3) made room for it


def test_no_product_label_is_any_product() -> None:
    (device,) = node_supply(None, [AllocatedDevice(G0, (holder("a-0", G0),), True)])[GPU]
    assert device.product == ""


# --- what the node emitted


def devices_of(*uuids: str) -> tuple[SupplyDevice, ...]:
    return tuple(SupplyDevice(u, H100, holders=(supplied("a-0"),)) for u in uuids)


def test_a_record_never_reports_an_idle_episode_that_began_after_it() -> None:
    """A record of the node processed out of event-time order (found by the fuzz test) can
    reveal an idle episode that began after its own time: the supply record is stamped no
    earlier than the episode's start."""
    s1, _ = supply.step(None, NODE, {GPU: devices_of(G0)}, 1_000, "r1")
    idle = tuple(replace(d, idle_since_ms=2_000) for d in devices_of(G0))
    _, out = supply.step(s1, NODE, {GPU: idle}, 1_500, "r2")
    assert [(r.ts_ms, [d.idle_since_ms for d in r.devices]) for r in out] == [(2_000, [2_000])]


def test_step_takes_the_records_fingerprint_only_when_it_emits_or_emitted_at_its_time() -> None:
    """The fingerprint (a hash of the whole record) is asked for only where it names an
    emission: a record that changes nothing, at a time nothing was emitted, never takes it."""
    taken: list[str] = []

    def by(name: str) -> supply.By:
        def take() -> str:
            taken.append(name)
            return name

        return take

    s1, out = supply.step(None, NODE, {GPU: devices_of(G0)}, 10, by("r1"))
    assert out
    assert taken == ["r1"]  # it emits: its emission is named
    assert s1 is not None
    assert supply.step(s1, NODE, {GPU: devices_of(G0)}, 20, by("r2")) == (None, ())
    assert taken == ["r1"]  # unchanged, nothing emitted at 20: not taken
    # the same record again (a crash before its outputs): taken, to find what it emitted
    assert supply.step(s1, NODE, {GPU: devices_of(G0)}, 10, by("r1")) == (None, out)
    assert taken == ["r1", "r1"]
    # another record of that millisecond: taken, and told from the first
    assert supply.step(s1, NODE, {GPU: devices_of(G0)}, 10, by("r1b")) == (None, ())
    assert taken == ["r1", "r1", "r1b"]


def test_step_emits_per_changed_resource_withdraws_what_is_no_longer_held_and_replays() -> None:
    s1, out = supply.step(None, NODE, {GPU: devices_of(G0), SHARED: devices_of(G1)}, 10, "r1")
    assert out == (
        NodeSupply(10, NODE, GPU, devices_of(G0)),
        NodeSupply(10, NODE, SHARED, devices_of(G1)),
    )
    assert s1 is not None
    # unchanged: nothing to emit, nothing to write
    assert supply.step(s1, NODE, {GPU: devices_of(G0), SHARED: devices_of(G1)}, 20, "r2") == (
        None,
        (),
    )
    s2, out = supply.step(s1, NODE, {GPU: devices_of(G0, G2)}, 30, "r3")
    assert out == (NodeSupply(30, NODE, GPU, devices_of(G0, G2)), NodeSupply(30, NODE, SHARED))
    assert s2 is not None
    assert [r.resource for r in s2.current] == [GPU]
    # the record processed again after a crash: the same records, no write
    assert supply.step(s2, NODE, {GPU: devices_of(G0, G2)}, 30, "r3") == (None, out)
    # an older record again: what it emitted, then the newer word of each resource after it
    assert supply.step(s2, NODE, {GPU: devices_of(G0, G2)}, 10, "r1")[1] == (
        NodeSupply(10, NODE, GPU, devices_of(G0)),
        NodeSupply(10, NODE, SHARED, devices_of(G1)),
        *out,
    )
    # ... and when the holders now say otherwise (an old snapshot delivered again out of order
    # reset them), what they say, after: the last word is never memory's alone
    regressed, again_out = supply.step(s2, NODE, {GPU: devices_of(G0)}, 10, "r1")
    assert again_out == (
        NodeSupply(10, NODE, GPU, devices_of(G0)),
        NodeSupply(10, NODE, SHARED, devices_of(G1)),
        *out,
        NodeSupply(30, NODE, GPU, devices_of(G0)),
    )
    assert regressed is not None
    assert regressed.current == (NodeSupply(30, NODE, GPU, devices_of(G0)),)
    # a record stamped earlier than the node's last emission: never back in time
    s3, out = supply.step(s2, NODE, {GPU: devices_of(G2)}, 25, "r4")
    assert out == (NodeSupply(30, NODE, GPU, devices_of(G2)),)
    assert s3 is not None
    assert supply.gone(s3, NODE, 40) == (NodeSupply(40, NODE, GPU, gone=True),)
    assert supply.gone(None, NODE, 40) == ()


def test_only_the_readings_moving_writes_without_emitting() -> None:
    s1, _ = supply.step(None, NODE, {GPU: devices_of(G0)}, 10, "r1", (G0,))
    assert s1 is not None
    new, out = supply.step(s1, NODE, {GPU: devices_of(G0)}, 20, "r2", ())
    assert out == ()
    assert new == replace(s1, measured=())


def test_memory_is_bounded_and_round_trips_the_table_codec() -> None:
    state: NodeSupplyState | None = None
    for i in range(10):
        new, _ = supply.step(
            state, NODE, {GPU: devices_of(G0) if i % 2 else devices_of(G1)}, i, f"r{i}"
        )
        state = new or state
    assert state is not None
    assert len(state.emitted) == supply.REMEMBERED
    assert TABLE_CODEC.decode(TABLE_CODEC.encode(state)) == state


def test_a_replay_from_far_back_leaves_the_memory_as_a_calm_run_left_it() -> None:
    """Under a storm of rebalances a partition can go uncommitted for longer than the memory
    covers (the fault suite's twenty SIGKILLs: 50 s): its records are processed again against
    the state they already made. What they emit then, even a word the state ahead makes differ
    for a moment, does not push the newer emissions out: the final state is the calm run's."""
    words = [devices_of(G0) if i % 2 else devices_of(G1) for i in range(8)]
    calm: NodeSupplyState | None = None
    for i, w in enumerate(words):
        calm = supply.step(calm, NODE, {GPU: w}, 10 * (i + 1), f"r{i}")[0] or calm
    assert calm is not None
    assert [e.ts_ms for e in calm.emitted] == [80, 70, 60, 50]
    state = calm
    outputs: list[NodeSupply] = []
    for i in range(2, 8):  # again from the third record, the holders now the last record's
        now = devices_of(G2) if i == 3 else words[-1]  # ... but for one record's moment
        new_state, out = supply.step(state, NODE, {GPU: now}, 10 * (i + 1), f"r{i}")
        state, outputs = new_state or state, [*outputs, *out]
    assert state == calm
    assert NodeSupply(80, NODE, GPU, devices_of(G2)) in outputs  # said, and taken back:
    assert outputs[-1] == NodeSupply(80, NODE, GPU, devices_of(G0))  # the last word is right


# --- through the processor

PRODUCT = ("nvidia.com/gpu.product", H100)


class Counting(MutableMapping[str, object]):
    """A table that counts its writes."""

    def __init__(self) -> None:
        self.data: dict[str, object] = {}
        self.writes = 0

    def __getitem__(self, key: str) -> object:
        return self.data[key]

    def __setitem__(self, key: str, value: object) -> None:
        self.writes += 1
        self.data[key] = value

    def __delitem__(self, key: str) -> None:
        self.writes += 1
        del self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def new(
    tables: Tables | None = None, cls: type[Processor] = Processor, life: Lifetimes = LIFE
) -> Processor:
    policy = AlertSettings.model_construct(idle_window_s=120.0, cooldown_s=0.0)
    return cls(tables or Tables.in_memory(), policy, life)


def with_product(ts: int = T0) -> list[object]:
    records = setup(ts)
    return [NodeRecord(NODE, ts, (*SPINE_LABELS, PRODUCT)), *records[1:]]


def supplies(outputs: Iterable[Output]) -> list[NodeSupply]:
    return [o for o in outputs if isinstance(o, NodeSupply)]


def feed(proc: Processor, records: Iterable[object]) -> list[Output]:
    return [o for r in records for o in proc.handle(r, 0)]


def test_a_podresources_snapshot_emits_the_nodes_supply() -> None:
    proc = new()
    (record,) = supplies(feed(proc, with_product()))
    assert (record.node, record.resource, record.ts_ms, record.gone) == (NODE, GPU, T0, False)
    g0, g1 = record.devices
    assert (g0.device_uuid, g0.slots, g0.product) == (G0, 5, H100)  # five MPS tenants, one GPU
    assert [h.pod for h in g0.holders] == [f"mps-{i}" for i in range(5)]
    assert g1 == SupplyDevice(
        G1,
        H100,
        holders=(SupplyHolder("ml", "trainer-0", "uid-trainer-0", "StatefulSet/trainer-0"),),
        measured=False,  # no reading yet: counted apart, never idle
    )
    assert G2 not in {d.device_uuid for d in record.devices}  # not allocated: no supply


def test_a_steady_run_of_samples_emits_nothing_and_writes_the_supply_table_zero_times() -> None:
    tables = Tables.in_memory()
    tables.node_supply = Counting()  # type: ignore[assignment]
    proc = new(tables)
    feed(proc, [*with_product(), scrape(T0 + S_, G0, G1, G2)])  # readings start: judged once
    writes = tables.node_supply.writes  # type: ignore[attr-defined]
    steady = [scrape(T0 + t * 5 * S_, G0, G1, G2) for t in range(1, 200)]
    steady += [ClockTick(0, T0 + t * 30 * S_) for t in range(1, 30)]
    assert supplies(feed(proc, sorted(steady, key=lambda r: r.ts_ms))) == []  # type: ignore[attr-defined]
    assert tables.node_supply.writes == writes  # type: ignore[attr-defined]


def busy(ts: int) -> DcgmScrape:
    return scrape(ts, G0, G1)


def low(ts: int) -> DcgmScrape:
    """G1 below the idle threshold (G0 busy)."""
    reading = scrape(ts, G0, G1)
    return replace(
        reading,
        samples=tuple(replace(s, util_pct=0.0) if s.uuid == G1 else s for s in reading.samples),
    )


def idle_run() -> list[object]:
    """G1's trainer idles from T0+10s (its alert fires at T0+130s), works again at T0+300s."""
    return [
        *with_product(),
        busy(T0),
        *(low(T0 + t * 10 * S_) for t in range(1, 30)),
        *(busy(T0 + t * 10 * S_) for t in range(30, 33)),
    ]


def trainer_on_g1(records: Iterable[NodeSupply]) -> list[tuple[int, int | None]]:
    return [(r.ts_ms, d.idle_since_ms) for r in records for d in r.devices if d.device_uuid == G1]


def test_an_idle_episode_starting_emits_one_record_and_its_end_another() -> None:
    proc = new()
    out = supplies(feed(proc, idle_run()))
    # allocation (no reading yet), the first reading (measured, busy), idle from its first
    # reading below the threshold (the alert fires at 2 min without another record), busy again
    assert trainer_on_g1(out) == [
        (T0, None),
        (T0, None),
        (T0 + 10 * S_, T0 + 10 * S_),
        (T0 + 300 * S_, None),
    ]
    assert [d.measured for r in out for d in r.devices if d.device_uuid == G1] == [
        False,
        True,
        True,
        True,
    ]


def test_usage_unknown_is_never_idle_and_readings_back_say_so_again() -> None:
    proc = new()
    feed(proc, idle_run()[:-3])  # idle since T0+10s, last reading at T0+290s
    failing = AgentStatus(NODE, T0 + 300 * S_, (dcgm("failing", "unreachable", T0 + 300 * S_),))
    assert trainer_on_g1(supplies(proc.handle(failing))) == [(T0 + 300 * S_, None)]
    assert proc.tables.alert_state[f"{NODE}/{G1}"].idle is not None  # the episode stays open
    ok = AgentStatus(NODE, T0 + 310 * S_, (dcgm("ok", "", T0 + 310 * S_),))
    back = trainer_on_g1(supplies(feed(proc, [ok, low(T0 + 320 * S_)])))
    assert [since for _, since in back] == [T0 + 10 * S_]  # the same episode, its holders'


def test_readings_that_stop_end_idle_at_the_partitions_clock() -> None:
    proc = new()
    feed(proc, idle_run()[:-3])  # last reading at T0+290s
    out = supplies(proc.handle(ClockTick(0, T0 + 290 * S_ + 2 * MIN)))
    assert trainer_on_g1(out) == [(T0 + 290 * S_ + 2 * MIN, None)]


def test_holders_that_change_are_supplied_and_a_resource_no_longer_held_is_withdrawn() -> None:
    proc = new()
    feed(proc, with_product())
    tenants = tuple(a for a in TENANTS)
    out = supplies(proc.handle(PodResourcesDiff(NODE, T0 + S_, (), (TRAINER,))))
    assert [d.device_uuid for r in out for d in r.devices] == [G0]  # the trainer left G1
    out = supplies(proc.handle(PodResourcesDiff(NODE, T0 + 2 * S_, (), tenants)))
    assert out == [NodeSupply(T0 + 2 * S_, NODE, GPU)]  # nothing of it held any more
    assert supplies(
        proc.handle(PodResourcesDiff(NODE, T0 + 3 * S_, (A("ml", "x", "c", SHARED, G2),), ()))
    ) == [
        NodeSupply(
            T0 + 3 * S_,
            NODE,
            SHARED,
            (SupplyDevice(G2, H100, holders=(SupplyHolder("ml", "x"),), measured=False),),
        )
    ]


def test_a_node_gone_withdraws_every_resource_deletes_its_key_and_says_so_again() -> None:
    proc = new()
    feed(proc, with_product())
    deleted = NodeRecord(NODE, T0 + MIN, (), deleted=True)
    out = supplies(proc.handle(deleted))
    assert out == [NodeSupply(T0 + MIN, NODE, GPU, gone=True)]
    assert NODE not in proc.tables.node_supply
    assert supplies(proc.handle(deleted)) == out  # processed again


def test_a_node_silent_past_its_ttl_withdraws_its_supply_and_the_tick_says_so_again() -> None:
    proc = new()
    feed(proc, with_product())
    for minute in (2, 4, 6, 8, 10, 11):  # the partition's clock, within the jump bound
        proc.handle(ClockTick(0, T0 + minute * MIN))
    tick = ClockTick(0, T0 + 12 * MIN)  # past the TTL at two ticks
    out = supplies(proc.handle(tick))
    assert out == [NodeSupply(tick.ts_ms, NODE, GPU, gone=True)]
    assert supplies(proc.handle(tick)) == out


def test_dra_devices_supply_the_device_class_that_selects_them() -> None:
    proc = Processor(Tables.in_memory())
    out = supplies(feed(proc, dra.SETUP))
    last = {r.resource: r for r in out}
    # NVIDIA's classes: whole GPUs (type=gpu) of gpu.nvidia.com, MIG devices of mig.nvidia.com
    assert set(last) == {"dra:gpu.nvidia.com", "dra:mig.nvidia.com"}
    devices = {d.device_uuid: d for d in last["dra:gpu.nvidia.com"].devices}
    infer = devices[dra.GPU[1]]
    assert ([h.pod for h in infer.holders], infer.slots) == (["infer-a", "infer-b", "infer-c"], 1)
    assert devices[dra.GPU[2]].slots == 2  # two claims' shares of one device
    assert all(not d.mig_profile for d in devices.values())
    migs = last["dra:mig.nvidia.com"].devices
    assert [(d.device_uuid, d.mig_profile) for d in migs] == [
        (dra.MIG7, "1g.10gb"),
        ("dra:gpu.nvidia.com/dra-node/gpu-0-mig-3g40gb-9-4", "3g.40gb"),  # dynamic: no UUID
    ]
    held = {h.pod for d in (*devices.values(), *migs) for h in d.holders}
    assert "dcgm-exporter-x2k4q" not in held  # an admin-access observer holds nothing


# --- no output lost at any crash point

State = dict[str, dict[str, object]]


def stream() -> list[object]:
    return [
        *with_product(),
        busy(T0),
        *(low(T0 + t * 10 * S_) for t in range(1, 15)),  # idle from T0+10s, fires at T0+130s
        busy(T0 + 150 * S_),
        PodResourcesDiff(NODE, T0 + 160 * S_, (), (TRAINER,)),
        AgentStatus(NODE, T0 + 161 * S_, (dcgm("failing", "unreachable", T0 + 161 * S_),)),
        NodeRecord(NODE, T0 + 162 * S_, (*SPINE_LABELS, ("nvidia.com/gpu.product", "H200"))),
        # a node's records processed again after it left would be late (dead-lettered): the
        # partition's clock stands between them and its leaving, as in the stack-alert tests
        ClockTick(0, T0 + 162 * S_ + 500),
        ClockTick(0, T0 + 162 * S_ + 750),
        NodeRecord(NODE, T0 + 163 * S_, (), deleted=True),
    ]


def run(records: Sequence[object], state: State) -> tuple[list[list[Output]], list[State]]:
    tables = {name: dict(table) for name, table in state.items()}
    policy = AlertSettings.model_construct(idle_window_s=120.0, cooldown_s=0.0)
    proc = Processor(Tables(**tables), policy, LIFE)  # type: ignore[arg-type]
    outputs, states = [], []
    for record in records:
        outputs.append(proc.handle(record, 0))
        states.append({name: dict(table) for name, table in tables.items()})
    return outputs, states


def keys(outputs: Iterable[Output]) -> set[str]:
    return {repr(o) for o in outputs if isinstance(o, NodeSupply)}


def test_every_crash_point_delivers_every_supply_record_exactly() -> None:
    records = stream()
    empty: State = {name: {} for name in TABLES}
    reference, after = run(records, empty)
    expected = set().union(*(keys(outs) for outs in reference))
    emitted = [r for outs in reference for r in supplies(outs)]
    # allocation, the first reading (measured), idle, busy again, the trainer left, the exporter
    # failing (unmeasured: never idle), the product label, gone
    assert len(expected) == len(emitted) == 8
    assert [d.measured for r in emitted[:-1] for d in r.devices[:1]] == [
        False,
        True,
        True,
        True,
        True,
        False,
        False,
    ]
    assert emitted[-1].gone
    persisted = [empty, *after]
    crash_points = every_crash_point(
        records, reference, persisted, expected, lambda rs, st: run(rs, st)[0], keys
    )
    assert crash_points > 300
