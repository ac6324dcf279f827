"""A pool's record read through per-node summaries (counted and described once per node's
supply record), or through a resource's index of them summed per group, is exactly the record
a walk over every device gives, for any supply and pool, after any sequence of changes; and the
demand stage's index reads a node afresh when its record changes or comes back from a recovered
table."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from contract.inputs import NodeSupply, SupplyDevice, SupplyHolder
from contract.outputs import IDLE_LISTED, IdleGpu, Pool, PoolDemand
from contract.records import replace
from streams.core.demand import demand
from streams.core.demand.demand import holders_of, matches, pool_demand
from streams.core.demand.supplyindex import SupplyIndex
from streams.core.flow.demandstage import DemandStage, DemandTables
from streams.core.flow.state import TABLE_CODEC

RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")
PRODUCTS = ("", "A100", "H100")
MIGS = ("", "1g.10gb")


def per_device(
    pool: Pool, supply: Sequence[NodeSupply]
) -> tuple[int, int, tuple[IdleGpu, ...], int, int | None]:
    """The reference: every device of every node walked and matched, all idle ones sorted.
    (allocated, unmeasured, the idle listed, idle counted, the latest idle start)"""
    allocated = unmeasured = 0
    idle_at: list[tuple[int, str, str, SupplyDevice]] = []
    for s in supply:
        if s.gone:
            continue
        for d in s.devices:
            if not matches(pool, s.resource, d):
                continue
            allocated += 1
            if not d.measured:
                unmeasured += 1
            elif d.idle_since_ms is not None:
                idle_at.append((d.idle_since_ms, s.node, d.device_uuid, d))
    listed = heapq.nsmallest(IDLE_LISTED, idle_at, key=lambda i: (i[0], i[1], i[2]))
    return (
        allocated,
        unmeasured,
        tuple(IdleGpu(n, u, t, holders_of(pool.resource, d)) for t, n, u, d in listed),
        len(idle_at),
        max((i[0] for i in idle_at), default=None),
    )


def supply_part(record: PoolDemand) -> tuple[int, int, tuple[IdleGpu, ...], int, int | None]:
    return (
        record.allocated_gpus,
        record.unmeasured_gpus,
        record.idle,
        record.idle_gpus,
        record.idle_latest_since_ms,
    )


holders = st.lists(
    st.builds(
        SupplyHolder,
        namespace=st.sampled_from(("ml", "web")),
        pod=st.sampled_from(("a", "b", "c")),
        uid=st.sampled_from(("", "uid-1")),
        workload=st.sampled_from((None, "Deployment/x")),
    ),
    max_size=3,
).map(tuple)


@st.composite
def node_supply(draw: st.DrawFn, node: str) -> NodeSupply:
    devices = tuple(
        SupplyDevice(
            device_uuid=f"GPU-{node}-{i}",
            product=draw(st.sampled_from(PRODUCTS)),
            mig_profile=draw(st.sampled_from(MIGS)),
            idle_since_ms=draw(st.one_of(st.none(), st.integers(0, 5))),  # ties across nodes
            holders=draw(holders),
            slots=draw(st.integers(1, 4)),
            measured=draw(st.booleans()),
        )
        for i in range(draw(st.integers(0, 30)))
    )
    resource = draw(st.sampled_from(RESOURCES))
    return NodeSupply(7, node, resource, devices, gone=draw(st.booleans()) and not devices)


supplies = st.integers(0, 8).flatmap(
    lambda n: st.tuples(*(node_supply(f"node-{i}") for i in range(n)))
)
pools = st.builds(
    Pool,
    resource=st.sampled_from(RESOURCES),
    product=st.sampled_from(PRODUCTS),
    mig_profile=st.sampled_from(MIGS),
)


@settings(max_examples=300)
@given(pool=pools, supply=supplies)
def test_the_summarized_record_is_the_per_device_walks(
    pool: Pool, supply: tuple[NodeSupply, ...]
) -> None:
    assert supply_part(pool_demand(pool, [], supply, 9)) == per_device(pool, supply)


NODES = tuple(f"node-{i}" for i in range(6))
#: one step: a node's new record (``None``: the node leaves; ``"same"``: its record comes back
#: from a recovered table, an equal new object; ``"missing"``: still listed, its record gone)
steps = st.lists(
    st.sampled_from(NODES).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.one_of(st.none(), st.just("same"), st.just("missing"), node_supply(n)),
        )
    ),
    max_size=25,
)


@settings(max_examples=300)
@given(steps=steps)
def test_the_indexed_record_is_the_per_device_walks_after_every_change(
    steps: list[tuple[str, NodeSupply | str | None]],
) -> None:
    resource = RESOURCES[0]
    index = SupplyIndex(resource)
    held: dict[str, NodeSupply] = {}
    listed: set[str] = set()
    every_pool = [Pool(resource, p, m) for p in PRODUCTS for m in MIGS]
    for node, record in steps:
        listed.add(node)
        if record is None:
            held.pop(node, None)
            listed.discard(node)
        elif record == "missing":
            held.pop(node, None)
        elif record == "same":
            if node in held:
                held[node] = TABLE_CODEC.decode(TABLE_CODEC.encode(held[node]))
        else:
            assert isinstance(record, NodeSupply)
            held[node] = record
        index.sync(tuple(sorted(listed)), lambda n: n, held.get)
        supply = list(held.values())
        assert index.supplying == any(s.devices and not s.gone for s in supply)
        assert index.nodes == tuple(sorted(held))
        for pool in every_pool:
            record_now = demand.pool_record(pool, [], index.groups(), 9)
            assert record_now == pool_demand(pool, [], supply, 9)
            assert supply_part(record_now) == per_device(pool, supply)


def _supply(node: str, *idle: int | None) -> NodeSupply:
    return NodeSupply(
        1,
        node,
        "nvidia.com/gpu",
        tuple(SupplyDevice(f"GPU-{node}-{i}", idle_since_ms=t) for i, t in enumerate(idle)),
    )


def test_the_stages_memo_reads_a_changed_or_recovered_record_afresh() -> None:
    tables = DemandTables()
    stage = DemandStage(tables, 900.0)
    key = b"nvidia.com/gpu"
    stage.handle(_supply("n1", 100, None), 0, key)
    stage.handle(_supply("n2", 50), 0, key)
    pool = tables.demand_resources["nvidia.com/gpu"].pools[0]
    assert (pool.idle_gpus, [g.node for g in pool.idle]) == (2, ["n2", "n1"])
    # n1's record changes: its summary is read again, not the remembered one
    stage.handle(replace(_supply("n1", 10, 20), ts_ms=2), 0, key)
    pool = tables.demand_resources["nvidia.com/gpu"].pools[0]
    assert [(g.node, g.since_ms) for g in pool.idle] == [("n1", 10), ("n1", 20), ("n2", 50)]
    # a recovered table holds equal records as new objects: read afresh, the same answer
    for k, v in list(tables.demand_supply.items()):
        tables.demand_supply[k] = TABLE_CODEC.decode(TABLE_CODEC.encode(v))
    stage.handle(replace(_supply("n3", None), ts_ms=3), 0, key)  # n3: one device, not idle
    pool = tables.demand_resources["nvidia.com/gpu"].pools[0]
    assert [(g.node, g.since_ms) for g in pool.idle] == [("n1", 10), ("n1", 20), ("n2", 50)]
    assert pool.allocated_gpus == 4
    # a node that leaves takes its summary with it
    stage.handle(NodeSupply(4, "n2", "nvidia.com/gpu", (), gone=True), 0, key)
    assert stage._indexes["nvidia.com/gpu"].nodes == ("n1", "n3")
    assert demand.summarize(NodeSupply(5, "n9", "nvidia.com/gpu", (), gone=True)) == ()
