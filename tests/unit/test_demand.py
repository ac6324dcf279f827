"""The demand stage's pure core: pools, supply matching, the demand record, the
demand-while-idle alert, and the stage's table rules (bounded, ordered, written on change)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from contract import codec
from contract.inputs import (
    ClockTick,
    GpuRequest,
    NodeSupply,
    OwnerRef,
    PendingPod,
    PendingPodList,
    SupplyDevice,
    SupplyHolder,
)
from contract.outputs import (
    IDLE_LISTED,
    WAITING_LISTED,
    Alert,
    Pool,
    PoolDemand,
    PoolDemandRetired,
)
from contract.records import replace
from sinks.payloads import slack_message
from streams.core.demand import demandalerts
from streams.core.demand.demand import (
    answer_moved,
    due,
    matches,
    none_due,
    pool_demand,
    pools_of,
    to_send,
    waiter_of,
)
from streams.core.flow.demandstage import (
    DemandOutput,
    DemandStage,
    DemandTables,
    UnusableDemandRecord,
    key_resource,
)
from streams.core.flow.state import TABLE_CODEC
from streams.present.poolrows import pool_row
from tests.unit.test_spine import UNBOUNDED

GPU = "nvidia.com/gpu"
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
KEY = GPU.encode()
MIN = 60_000
WINDOW_S = 900.0
W = int(WINDOW_S * 1000)


def pod(
    name: str,
    ts: int = 0,
    *,
    created: int = 0,
    state: str = "pending",
    count: int = 1,
    product: str = "",
    mig: str = "",
    resource: str = GPU,
) -> PendingPod:
    return PendingPod(
        ts,
        "ml",
        name,
        f"uid-{name}",
        created,
        (GpuRequest(resource, count, product, mig),),
        state=state,  # type: ignore[arg-type]
        workload=OwnerRef("Deployment", "inference"),
        scheduled_status="False",
        scheduled_reason="Unschedulable",
        scheduled_message="0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
    )


def device(
    uuid: str,
    idle: int | None = None,
    *,
    product: str = A100,
    mig: str = "",
    holder: str = "hog",
    measured: bool = True,
) -> SupplyDevice:
    return SupplyDevice(
        uuid,
        product,
        mig,
        idle,
        (SupplyHolder("team", holder, f"uid-{holder}", "Deployment/hog"),),
        measured=measured,
    )


def supply(ts: int, node: str, *devices: SupplyDevice, resource: str = GPU) -> NodeSupply:
    return NodeSupply(ts, node, resource, devices)


# --- supply matching and pools ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("pool", "dev", "expected"),
    [
        (Pool(GPU), device("g"), True),
        (Pool(GPU, A100), device("g"), True),
        (Pool(GPU, H100), device("g"), False),
        (Pool(GPU, "", "1g.10gb"), device("g"), False),
        (Pool(GPU, "", "1g.10gb"), device("g", mig="1g.10gb"), True),
        (Pool(GPU, A100, "1g.10gb"), device("g", mig="1g.10gb"), True),
        (Pool("nvidia.com/gpu.shared"), device("g"), False),
    ],
    ids=[
        "any-product",
        "same-product",
        "other-product",
        "mig-asked-device-whole",
        "mig-same",
        "product-and-mig",
        "other-resource",
    ],
)
def test_a_device_matches_a_pool(pool: Pool, dev: SupplyDevice, expected: bool) -> None:
    assert matches(pool, GPU, dev) is expected


@pytest.mark.parametrize(
    ("pods", "supplies", "expected"),
    [
        ([], [], []),
        ([pod("a")], [], [GPU]),
        ([pod("a", product=A100)], [], [f"{GPU}|product={A100}"]),
        ([], [supply(0, "n1", device("g"))], [GPU]),
        ([pod("a", product=A100)], [supply(0, "n1", device("g"))], [GPU, f"{GPU}|product={A100}"]),
        ([], [NodeSupply(0, "n1", GPU, (device("g"),), gone=True)], []),
        ([pod("a"), pod("b", mig="1g.10gb")], [], [GPU, f"{GPU}|mig=1g.10gb"]),
    ],
    ids=[
        "nothing",
        "waiting-plain",
        "waiting-product",
        "allocated-nobody-waits",
        "product-waits-plain-allocated",
        "gone-node-is-no-supply",
        "plain-and-mig",
    ],
)
def test_pools_are_what_is_asked_and_the_plain_pool_while_allocated(
    pods: list[PendingPod], supplies: list[NodeSupply], expected: list[str]
) -> None:
    waiters = [waiter_of(p, GPU) for p in pods]
    assert [p.key() for p in pools_of(GPU, waiters, supplies)] == expected


def test_the_demand_record_counts_everything_and_lists_the_oldest_first() -> None:
    pods = [pod(f"p{i:03}", created=1000 - i, count=2) for i in range(WAITING_LISTED + 5)]
    pods.append(pod("h100", created=0, product=H100))
    supplies = [
        supply(0, "n2", device("g3", 500, holder="b"), device("g4", measured=False)),
        supply(0, "n1", device("g1", 100, holder="a"), device("g2"), device("h", 0, product=H100)),
    ]
    d = pool_demand(Pool(GPU, A100), [waiter_of(p, GPU) for p in pods], supplies, 7)
    assert d.pending_pods == 0  # nobody asks for A100 by name
    plain = pool_demand(Pool(GPU), [waiter_of(p, GPU) for p in pods], supplies, 7)
    assert (plain.pending_pods, plain.gpus_requested) == (WAITING_LISTED + 5, 2 * 55)
    assert plain.oldest_since_ms == 1000 - (WAITING_LISTED + 4)
    assert len(plain.waiting) == WAITING_LISTED
    assert [w.since_ms for w in plain.waiting] == sorted(w.since_ms for w in plain.waiting)
    assert plain.waiting[0].reason == "Unschedulable"
    assert plain.waiting[0].workload == "Deployment/inference"
    a100 = pool_demand(Pool(GPU, A100), [], supplies, 7)
    assert (a100.allocated_gpus, a100.unmeasured_gpus) == (4, 1)
    assert [(g.node, g.device_uuid, g.since_ms) for g in a100.idle] == [
        ("n1", "g1", 100),
        ("n2", "g3", 500),
    ]
    (holder,) = a100.idle[0].holders
    assert (holder.namespace, holder.pod, holder.uid, holder.resource) == (
        "team",
        "a",
        "uid-a",
        GPU,
    )
    assert holder.workload is not None
    assert holder.workload.kind == "Deployment"
    assert plain.allocated_gpus == 5  # the H100 too


def test_a_large_pools_record_lists_the_longest_idle_and_counts_them_all() -> None:
    """However many GPUs idle, the record stays bounded (one listing every idle GPU of a
    250-node pool outgrew Kafka's 1 MB limit): the longest idle are named, all are counted, and
    the shortest idle time is still the pool's own."""
    n = 3 * IDLE_LISTED
    devices = [device(f"g{i:03}", 1000 + i * 10, holder=f"h{i:03}") for i in range(n)]
    supplies = [supply(0, f"n{i // 8:02}", *devices[i : i + 8]) for i in range(0, n, 8)]
    d = pool_demand(Pool(GPU), [waiter_of(pod("w", created=0), GPU)], supplies, 10_000)
    assert [g.device_uuid for g in d.idle] == [f"g{i:03}" for i in range(IDLE_LISTED)]
    assert (d.idle_gpus, d.idle_count(), d.allocated_gpus) == (n, n, n)
    assert d.idle_latest_since_ms == 1000 + (n - 1) * 10
    row = pool_row(d)
    assert (row.idle_gpus, len(row.idle)) == (n, IDLE_LISTED)
    assert row.idle_for_s == (10_000 - d.idle_latest_since_ms) / 1000
    # the alert names what it can prove: at least the listed ones, each idle that long
    alert = demandalerts.fire(d, 10_000 + W, W)
    assert f"at least {IDLE_LISTED} allocated GPUs" in alert.summary
    assert alert.figures.idle_gpus == IDLE_LISTED
    assert len(codec.encode(d)) < 64 * 1024


def test_a_record_written_before_the_count_counts_what_it_lists() -> None:
    d = pool_demand(Pool(GPU), [], [supply(0, "n1", device("g1", 100), device("g2", 200))], 7)
    old = replace(d, idle_gpus=0, idle_latest_since_ms=None)
    assert old.idle_count() == 2
    assert pool_row(old).idle_for_s == pool_row(d).idle_for_s


# --- the alert --------------------------------------------------------------------------------


def demand_of(oldest: int | None, idle: Sequence[int], pending: int = 1) -> PoolDemand:
    waiters = [waiter_of(pod(f"w{i}", created=oldest or 0), GPU) for i in range(pending)]
    devices = [device(f"g{i}", since, holder=f"h{i}") for i, since in enumerate(idle)]
    return pool_demand(Pool(GPU), waiters, [supply(0, "n1", *devices)] if devices else [], 0)


@pytest.mark.parametrize(
    ("open_", "demand", "now", "expected"),
    [
        (False, demand_of(0, [0]), W - 1, ()),
        (False, demand_of(0, [0]), W, ("firing",)),
        (False, demand_of(0, [W]), W, ()),
        (False, demand_of(W, [0]), W, ()),
        (False, demand_of(0, [], pending=1), 10 * W, ()),
        (False, demand_of(None, [0], pending=0), 10 * W, ()),
        (True, demand_of(0, [0]), 10 * W, ()),
        (True, demand_of(0, [0]), 0, ()),
        (True, demand_of(None, [0], pending=0), 10 * W, ("resolved",)),
        (True, demand_of(0, []), 10 * W, ("resolved",)),
        (True, None, 10 * W, ("resolved",)),
    ],
    ids=[
        "window-not-yet",
        "both-a-window-long-fires",
        "idle-too-short",
        "wait-too-short",
        "nothing-idle",
        "nobody-waits",
        "open-stays",
        "older-record-never-resolves",
        "resolves-nobody-waits",
        "resolves-nothing-idle",
        "resolves-pool-retired",
    ],
)
def test_demand_while_idle_decisions(
    open_: bool, demand: PoolDemand | None, now: int, expected: tuple[str, ...]
) -> None:
    fired = demandalerts.fire(demand_of(0, [0]), W, W) if open_ else None
    after, alerts = demandalerts.step(fired, demand, now, W)
    assert tuple(a.status for a in alerts) == expected
    if open_:
        assert all(a.id == fired.id for a in alerts)  # type: ignore[union-attr]
    assert (after is not None) == (expected == ("firing",) or (open_ and not expected))


def test_the_alert_names_the_waiting_and_the_idle_holders() -> None:
    day = 86_400_000
    demand = demand_of(0, [26 * day, 27 * day, 28 * day - 1000], pending=12)
    alert = demandalerts.fire(demand, 28 * day, W)
    assert alert.summary.startswith(
        "12 pods wait for nvidia.com/gpu (oldest 28 d) while 2 allocated GPUs of that pool have "
        "been idle for 1 d: team/h0 (Deployment/hog) on n1/g0, team/h1 (Deployment/hog) on n1/g1"
    )
    assert (alert.node, alert.device_uuid, alert.gpu_uuid) == ("", "", "")
    assert alert.started_ms == 26 * day  # demand and idleness coexist since the first idle GPU
    assert alert.figures.pending_pods == 12
    assert alert.figures.idle_gpus == 2
    assert alert.figures.idle_for_s == day / 1000
    assert alert.demand is not None
    assert alert.demand.pool == GPU
    assert [g.device_uuid for g in alert.demand.idle] == ["g0", "g1"]
    assert [h.pod for h in alert.holders] == ["h0", "h1"]
    assert codec.decode(codec.encode(alert)) == alert
    text = str(slack_message(alert))
    assert "Waiting for `nvidia.com/gpu`" in text
    assert "`n1` · `g0`" in text
    assert "*pods waiting* 12" in text


# --- the stage ---------------------------------------------------------------------------------


def run(stage: DemandStage, *records: object) -> list[DemandOutput]:
    out: list[DemandOutput] = []
    for r in records:
        key = None if isinstance(r, ClockTick | PendingPodList) else KEY
        out += stage.handle(r, 0, key)
    return out


def new_stage() -> tuple[DemandStage, DemandTables]:
    tables = DemandTables()
    return DemandStage(tables, WINDOW_S, life=UNBOUNDED), tables  # ticks a window apart


@pytest.mark.parametrize(
    ("records", "left"),
    [
        ([pod("a", 1)], ["a"]),
        ([pod("a", 1), pod("a", 2, state="bound")], []),
        ([pod("a", 1), pod("a", 2, state="deleted")], []),
        ([pod("a", 2, state="bound"), pod("a", 1)], []),
        ([pod("a", 1), pod("a", 2, state="bound"), pod("a", 1)], []),
        ([pod("a", 1), PendingPodList(5, ())], []),
        ([pod("a", 1), PendingPodList(5, (pod("a", 0),))], ["a"]),
        ([pod("a", 9), PendingPodList(5, ())], ["a"]),
        ([pod("a", 1), pod("b", 2), PendingPodList(5, (pod("b", 0),)), pod("a", 4)], ["b"]),
    ],
    ids=[
        "pending-kept",
        "bound-removed",
        "deleted-removed",
        "bound-unseen-stays-out",
        "older-record-after-bound-ignored",
        "missing-from-list-removed",
        "listed-kept",
        "published-after-list-began-kept",
        "stale-record-after-list-ignored",
    ],
)
def test_pending_pods_live_only_while_they_wait(records: list[object], left: list[str]) -> None:
    stage, tables = new_stage()
    run(stage, *records)
    assert sorted(tables.demand_pods) == [f"{GPU}|ml/{name}" for name in left]
    rd = tables.demand_resources[GPU]
    assert rd.pods == tuple(f"ml/{name}" for name in left)


@pytest.mark.parametrize(
    ("key", "record", "why"),
    [
        (None, pod("a"), "without a key"),
        (b"nvidia.com/gpu.shared", pod("a"), "asks for"),
        (b"other", supply(0, "n", device("g")), "supply of"),
    ],
    ids=["no-key", "pod-under-another-resource", "supply-under-another-resource"],
)
def test_a_record_under_the_wrong_key_is_refused(
    key: bytes | None, record: object, why: str
) -> None:
    with pytest.raises(UnusableDemandRecord, match=why):
        key_resource(key, record)


def test_a_bound_record_without_requests_is_taken_under_its_key() -> None:
    bound = PendingPod(5, "ml", "a", "uid-a", 0, (), state="bound", node="n1")
    assert key_resource(KEY, bound) == GPU


def test_demand_emitted_on_change_only_and_a_tombstone_when_nothing_is_left() -> None:
    stage, tables = new_stage()
    out = run(stage, supply(0, "n1", device("g1")), pod("a", 10))
    assert [(type(o).__name__, getattr(o, "pending_pods", None)) for o in out] == [
        ("PoolDemand", 0),
        ("PoolDemand", 1),
    ]
    writes = dict(tables.demand_resources)
    # records that say nothing new (a relist's), and ticks: nothing emitted, no pool written
    assert run(stage, supply(5, "n1", device("g1")), pod("a", 15), ClockTick(0, 20)) == []
    assert dict(tables.demand_resources) == writes
    # the same records processed again (after a crash): each re-delivers the latest record of
    # the pool it touched (the pool's state, the last word a consumer must have), never nothing
    again = run(stage, supply(0, "n1", device("g1")), pod("a", 10))
    assert [(type(o).__name__, getattr(o, "pending_pods", None)) for o in again] == [
        ("PoolDemand", 1),
        ("PoolDemand", 1),
    ]
    assert tables.demand_resources[GPU].emitted[0].demands == ()  # pools named, not copied
    assert tables.demand_resources[GPU].emitted[0].pools == (GPU,)
    out = run(stage, pod("a", 30, state="bound"), NodeSupply(40, "n1", GPU))
    assert [type(o).__name__ for o in out] == ["PoolDemand", "PoolDemandRetired"]
    assert out[-1] == PoolDemandRetired(GPU)
    assert (len(tables.demand_pods), len(tables.demand_supply)) == (0, 0)
    assert tables.demand_resources[GPU].pools == ()


def test_the_alert_fires_on_a_tick_and_resolves_when_the_pod_is_bound() -> None:
    stage, _ = new_stage()
    out = run(
        stage,
        supply(0, "n1", device("g1", 0)),
        pod("a", 1, created=0),
        ClockTick(0, W - 1),
        ClockTick(0, W),
    )
    fired = [o for o in out if isinstance(o, Alert)]
    assert [a.status for a in fired] == ["firing"]
    assert fired[0].ts_ms == W
    out = run(stage, ClockTick(0, 2 * W), pod("a", 2 * W + 1, state="bound"))
    resolved = [o for o in out if isinstance(o, Alert)]
    assert [(a.status, a.id) for a in resolved] == [("resolved", fired[0].id)]
    assert "nobody waits" in resolved[0].summary


def test_a_product_pool_retires_and_its_alert_resolves_with_it() -> None:
    stage, _ = new_stage()
    out = run(
        stage,
        supply(0, "n1", device("g1", 0)),
        pod("a", 1, product=A100),
        ClockTick(0, W),
        pod("a", W + 1, state="deleted"),
    )
    kinds = [(type(o).__name__, getattr(o, "status", getattr(o, "pool", ""))) for o in out]
    assert ("Alert", "firing") in kinds
    resolved = kinds.index(("Alert", "resolved"))
    assert kinds[resolved + 1] == ("PoolDemandRetired", f"{GPU}|product={A100}")


def test_table_values_round_trip_the_changelog_codec() -> None:
    stage, tables = new_stage()
    run(stage, supply(0, "n1", device("g1", 0)), pod("a", 1), ClockTick(0, W))
    values: list[object] = [
        *tables.demand_pods.values(),
        *tables.demand_supply.values(),
        *tables.demand_resources.values(),
        *tables.demand_partitions.values(),
    ]
    assert len(values) == 4
    for value in values:
        assert TABLE_CODEC.decode(TABLE_CODEC.encode(value)) == value


def test_a_value_written_before_issue_31_replays_the_pools_its_emissions_copied() -> None:
    """Values written by earlier workers keep copies of the emitted records (``demands``): a
    record processed again after an upgrade re-delivers those pools' latest records."""
    stage, tables = new_stage()
    run(stage, supply(0, "n1", device("g1")), pod("a", 10))
    rd = tables.demand_resources[GPU]
    latest = rd.pools[0]
    older = [replace(e, pools=(), demands=(replace(latest, pending_pods=0),)) for e in rd.emitted]
    tables.demand_resources[GPU] = replace(rd, emitted=tuple(older))
    assert run(stage, pod("a", 10)) == [latest]


# --- coalescing: a pool's supply-side figures at most once per interval ------------------------

EVERY_S = 10.0
E = int(EVERY_S * 1000)


def demands_of(outs: Sequence[DemandOutput]) -> list[PoolDemand]:
    return [o for o in outs if isinstance(o, PoolDemand)]


def test_due_sends_an_answer_at_once_and_figures_once_per_interval() -> None:
    base = pool_demand(Pool(GPU), [], [supply(0, "n1", device("g0", 0), device("g1"))], 0)
    more_idle = pool_demand(Pool(GPU), [], [supply(0, "n1", device("g0", 0), device("g1", 1))], 1)
    none_idle = pool_demand(Pool(GPU), [], [supply(0, "n1", device("g0"), device("g1"))], 1)
    waits = pool_demand(
        Pool(GPU), [waiter_of(pod("a"), GPU)], [supply(0, "n1", device("g0", 0), device("g1"))], 1
    )
    assert (base.idle_count(), more_idle.idle_count(), none_idle.idle_count()) == (1, 2, 0)
    assert not answer_moved(base, more_idle)  # figures only
    assert not due(base, more_idle, E)
    assert due(base, replace(more_idle, ts_ms=E), E)  # the interval has passed
    assert not due(base, none_idle, E)  # idle GPUs all gone, but nobody waits: figures
    assert due(base, waits, E)  # somebody waits
    waits_none_idle = pool_demand(
        Pool(GPU), [waiter_of(pod("a"), GPU)], [supply(0, "n1", device("g0"), device("g1"))], 2
    )
    assert due(waits, waits_none_idle, E)  # somebody waits and the idle GPUs are all gone
    unallocated = pool_demand(Pool(GPU), [waiter_of(pod("a"), GPU)], [], 3)
    assert due(waits_none_idle, unallocated, E)  # allocation all gone
    assert due(None, base, E)  # a new pool
    assert due(base, more_idle, 0)  # no interval: every change
    assert due(replace(base, ts_ms=5), more_idle, 0)  # even one stamped earlier


def test_a_figures_only_change_is_held_back_and_sent_once_due() -> None:
    tables = DemandTables()
    stage = DemandStage(tables, WINDOW_S, EVERY_S)
    first = demands_of(run(stage, supply(0, "n1", device("g0", 0), device("g1"))))
    assert [d.idle_count() for d in first] == [1]
    held = run(stage, supply(1000, "n1", device("g0", 0), device("g1", 1000)))
    assert demands_of(held) == []  # 1 idle -> 2 idle, 1 s after the last record
    assert tables.demand_resources[GPU].pools == tuple(first)  # the last one *sent*
    assert tables.demand_supply[f"{GPU}|n1"].ts_ms == 1000  # the change itself is kept
    assert demands_of(run(stage, ClockTick(0, E - 1))) == []  # not yet due
    sent = demands_of(run(stage, ClockTick(0, E)))
    assert [(d.ts_ms, d.idle_count()) for d in sent] == [(E, 2)]
    assert demands_of(run(stage, ClockTick(0, E + 1))) == []  # nothing left to send


def test_an_answer_change_is_sent_at_once_within_the_interval() -> None:
    stage = DemandStage(DemandTables(), WINDOW_S, EVERY_S)
    run(stage, supply(0, "n1", device("g0", 0), device("g1")))
    waits = demands_of(run(stage, pod("a", 500)))
    assert [(d.ts_ms, d.pending_pods) for d in waits] == [(500, 1)]
    gone_idle = demands_of(run(stage, supply(900, "n1", device("g0"), device("g1"))))
    assert [(d.ts_ms, d.idle_count()) for d in gone_idle] == [(900, 0)]
    another_node = demands_of(run(stage, supply(950, "n2", device("g2"))))
    assert [(d.ts_ms, d.allocated_gpus) for d in another_node] == []  # figures, held back
    freed = demands_of(run(stage, supply(990, "n1"), supply(995, "n2")))
    assert [(d.ts_ms, d.allocated_gpus) for d in freed] == [(995, 0)]  # allocation all gone


def test_a_held_back_change_survives_a_restart() -> None:
    tables = DemandTables()
    run(DemandStage(tables, WINDOW_S, EVERY_S), supply(0, "n1", device("g0", 0), device("g1")))
    held = run(
        DemandStage(tables, WINDOW_S, EVERY_S), supply(1000, "n1", device("g0", 0), device("g1", 9))
    )
    assert demands_of(held) == []
    restarted = DemandStage(  # a new worker on the recovered tables
        DemandTables(**{name: dict(getattr(tables, name)) for name in tables.sizes()}),
        WINDOW_S,
        EVERY_S,
    )
    sent = demands_of(run(restarted, ClockTick(0, E)))
    assert [(d.ts_ms, d.idle_count()) for d in sent] == [(E, 2)]


def test_without_an_interval_every_change_is_sent() -> None:
    stage = DemandStage(DemandTables(), WINDOW_S, 0.0)
    run(stage, supply(0, "n1", device("g0", 0), device("g1")))
    sent = demands_of(run(stage, supply(1000, "n1", device("g0", 0), device("g1", 1000))))
    assert [(d.ts_ms, d.idle_count()) for d in sent] == [(1000, 2)]


def _at(d: PoolDemand, ts_ms: int) -> PoolDemand:
    return replace(d, ts_ms=ts_ms)


@pytest.mark.parametrize(
    ("last_ms", "now_ms", "every_ms", "alerted", "sent"),
    [
        (0, 1000, E, False, False),  # figures only, within the interval: held back
        (0, E, E, False, True),  # the interval has passed
        (0, 1000, E, True, True),  # its alert moved: the record goes with it
        (0, 1000, 0, False, True),  # no interval: every change
        (None, 1000, E, False, True),  # a new pool
    ],
    ids=["held-back", "due-by-time", "alert-moved", "no-interval", "new-pool"],
)
def test_to_send_picks_the_due_records_of_the_changed_pools(
    last_ms: int | None, now_ms: int, every_ms: int, alerted: bool, sent: bool
) -> None:
    last = pool_demand(Pool(GPU), [], [supply(0, "n1", device("g0", 0), device("g1"))], 0)
    now = _at(
        pool_demand(Pool(GPU), [], [supply(0, "n1", device("g0", 0), device("g1", 1))], 0), now_ms
    )
    before = () if last_ms is None else (_at(last, last_ms),)
    picked = to_send(before, (now,), {GPU} if alerted else set(), every_ms)
    assert picked == ((now,) if sent else ())


@pytest.mark.parametrize(
    ("sent_ms", "ts_ms", "every_ms", "expected"),
    [
        ((0, 5000), 9999, E, True),  # every pool sent less than the interval ago
        ((0, 5000), E, E, False),  # one pool's figures may be due
        ((), 1000, E, False),  # no pool yet: a record may make one
        ((0,), 1000, 0, False),  # no interval: nothing is held back
    ],
    ids=["all-recent", "one-due", "no-pool", "no-interval"],
)
def test_none_due_only_while_every_pool_was_sent_within_the_interval(
    sent_ms: tuple[int, ...], ts_ms: int, every_ms: int, expected: bool
) -> None:
    base = pool_demand(Pool(GPU), [], [supply(0, "n1", device("g0", 0))], 0)
    pools = [replace(base, pool=f"{GPU}|{i}", ts_ms=t) for i, t in enumerate(sent_ms)]
    assert none_due(pools, ts_ms, every_ms) is expected
