"""No demand-while-idle alert lost or invented, whatever the crash point between the demand
stage's table writes and its outputs (the model of ``tests/crashpoints.py``): the restarted
worker starts from any persisted prefix of the state and processes the uncommitted records
again; what was delivered must be exactly the alerts of a run without a crash, by idempotency
key (``<id>:<status>``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import fields
from itertools import pairwise

import pytest

from contract.inputs import (
    ClockTick,
    GpuRequest,
    NodeSupply,
    PendingPod,
    PendingPodList,
    SupplyDevice,
    SupplyHolder,
)
from contract.outputs import Alert, PoolDemand, PoolDemandRetired
from infra.settings import WorkerSettings
from streams.core.demand.demand import answer_moved
from streams.core.flow.demandstage import DemandOutput, DemandStage, DemandTables
from tests.crashpoints import every_crash_point

GPU = "nvidia.com/gpu"
A100 = "NVIDIA-A100-SXM4-80GB"
WINDOW_S = 10.0
S = 1000
State = dict[str, dict[str, object]]


def waiting(name: str, ts: int, state: str = "pending", product: str = "") -> PendingPod:
    return PendingPod(
        ts * S,
        "ml",
        name,
        f"uid-{name}",
        0,
        (GpuRequest(GPU, 1, product),),
        state=state,  # type: ignore[arg-type]
    )


def node(ts: int, idle_since: int | None, *, holder: str = "hog") -> NodeSupply:
    since = None if idle_since is None else idle_since * S
    dev = SupplyDevice("GPU-1", A100, "", since, (SupplyHolder("team", holder, f"u-{holder}"),))
    return NodeSupply(ts * S, "n1", GPU, (dev,))


def stream() -> list[object]:
    """Idle supply and a waiting pod: fires on a tick; the pod is bound (resolves); another
    waits (A100 by name) and fires in its pool; the GPU gets work (resolves), idles again and
    both pools fire; a list that no longer names the A100 pod resolves that one, a deletion the
    other; the node frees the GPU: tombstones."""
    out: list[object] = [node(0, 0), waiting("a", 1)]
    out += [ClockTick(0, t * S) for t in range(2, 14, 2)]
    out += [waiting("a", 14, "bound"), waiting("b", 15, product=A100)]
    out += [ClockTick(0, t * S) for t in range(16, 22, 2)]
    out += [node(22, None), ClockTick(0, 24 * S), node(25, 25), waiting("c", 26)]
    out += [ClockTick(0, t * S) for t in range(28, 40, 2)]
    out += [PendingPodList(40 * S, (waiting("c", 26),)), ClockTick(0, 42 * S)]
    out += [waiting("c", 43, "deleted"), NodeSupply(44 * S, "n1", GPU)]
    return out


def keys(outputs: Iterable[DemandOutput]) -> set[str]:
    return {f"{o.id}:{o.status}" for o in outputs if isinstance(o, Alert)}


#: a pool's record on every change, and as the worker sends it (supply-side changes coalesced)
EVERY = pytest.mark.parametrize(
    "every_s",
    [0.0, WorkerSettings.model_construct().demand_supply_every_s],
    ids=["each", "shipped"],
)


def run(
    records: Sequence[object], state: State, every_s: float = 0.0
) -> tuple[list[list[DemandOutput]], list[State]]:
    tables = DemandTables(**{name: dict(t) for name, t in state.items()})  # type: ignore[arg-type]
    stage = DemandStage(tables, WINDOW_S, every_s)
    outputs, states = [], []
    for record in records:
        key = None if isinstance(record, ClockTick | PendingPodList) else GPU.encode()
        outputs.append(stage.handle(record, 0, key))
        states.append({f.name: dict(getattr(tables, f.name)) for f in fields(tables)})
    return outputs, states


@EVERY
def test_every_crash_point_delivers_every_demand_alert_exactly_by_key(every_s: float) -> None:
    records = stream()
    empty: State = {f.name: {} for f in fields(DemandTables)}
    reference, after = run(records, empty, every_s)
    expected = set().union(*(keys(outs) for outs in reference))
    alerts = [o for outs in reference for o in outs if isinstance(o, Alert)]
    # plain pool: fired, resolved (a bound); A100 pool: fired, resolved (work); both fired
    # again, the A100 one resolved by the list (its pod left), the plain one by a deletion
    assert [(a.status, a.demand.product if a.demand else None) for a in alerts] == [
        ("firing", ""),
        ("resolved", ""),
        ("firing", A100),
        ("resolved", A100),
        ("firing", ""),
        ("firing", A100),
        ("resolved", A100),
        ("resolved", ""),
    ]
    assert len(expected) == 8
    flat = [o for outs in reference for o in outs]
    assert isinstance(flat[-1], PoolDemandRetired)  # the last word on the plain pool
    assert any(isinstance(o, PoolDemand) and o.product == A100 for o in flat)
    persisted = [empty, *after]
    checked = every_crash_point(
        records, reference, persisted, expected, lambda rs, st: run(rs, st, every_s)[0], keys
    )
    assert checked > 700  # every one of them (33 inputs)


@EVERY
def test_after_any_crash_the_last_word_per_pool_is_the_reference_one(every_s: float) -> None:
    """Replayed from any persisted state, the last record delivered per pool is the one a run
    without a crash ends with (a tombstone here)."""
    records = stream()
    empty: State = {f.name: {} for f in fields(DemandTables)}
    reference, after = run(records, empty, every_s)
    persisted = [empty, *after]

    def last(outs: Iterable[DemandOutput]) -> dict[str, object]:
        words: dict[str, object] = {}
        for o in outs:
            if isinstance(o, PoolDemand):
                words[o.pool] = ("demand", o.pending_pods, o.allocated_gpus, len(o.idle))
            elif isinstance(o, PoolDemandRetired):
                words[o.pool] = "tombstone"
        return words

    final = last(o for outs in reference for o in outs)
    for c in range(len(records)):
        for s in range(c, len(records) + 1):
            replayed, _ = run(records[c:], persisted[s], every_s)
            delivered = last(o for outs in [*reference[:c], *replayed] for o in outs)
            assert delivered == final, (c, s)


def busy_node(ts: int, idle_since: int | None) -> NodeSupply:
    """A second node whose GPU starts and stops idling while the first stays idle: the pool's
    idle count moves between 1 and 2, never through zero (a supply-side change only)."""
    since = None if idle_since is None else idle_since * S
    dev = SupplyDevice("GPU-2", A100, "", since, (SupplyHolder("team", "busy", "u-busy"),))
    return NodeSupply(ts * S, "n2", GPU, (dev,))


def coalesced_stream() -> list[object]:
    """A pod waits while n1 idles (fires on a tick); n2 flips between idle and busy every 3 s,
    which only moves the pool's figures; the pod is bound (resolves); both nodes free their
    GPUs (a tombstone)."""
    out: list[object] = [node(0, 0), busy_node(0, None), waiting("a", 1)]
    for t in range(2, 40):
        if t % 3 == 0:
            out.append(busy_node(t, t if (t // 3) % 2 else None))
        if t % 2 == 0:
            out.append(ClockTick(0, t * S))
    out += [waiting("a", 40, "bound"), NodeSupply(41 * S, "n2", GPU), NodeSupply(42 * S, "n1", GPU)]
    return out


def test_coalesced_records_lose_no_alert_and_end_with_the_last_word_at_any_crash_point() -> None:
    """As the worker runs it (supply-side changes coalesced), some records are held back — and
    still every crash point delivers exactly the alerts of a run without a crash, and ends with
    the same last word per pool."""
    records = coalesced_stream()
    empty: State = {f.name: {} for f in fields(DemandTables)}
    every_s = WorkerSettings.model_construct().demand_supply_every_s
    assert every_s > 0
    each, _ = run(records, empty, 0.0)
    reference, after = run(records, empty, every_s)

    def demands(outs: Sequence[Sequence[DemandOutput]]) -> list[PoolDemand]:
        return [o for out in outs for o in out if isinstance(o, PoolDemand)]

    held = len(demands(each)) - len(demands(reference))
    assert held >= 5, (len(demands(each)), len(demands(reference)))  # the flips were coalesced
    assert keys(o for outs in reference for o in outs) == keys(o for outs in each for o in outs)
    # between two records of the pool: the interval passed, the answer moved, or an alert moved
    # with the second
    last: PoolDemand | None = None
    for outs in reference:
        for o in outs:
            if not isinstance(o, PoolDemand):
                continue
            if last is not None:
                alerted = any(isinstance(a, Alert) for a in outs)
                assert o.ts_ms - last.ts_ms >= every_s * S or answer_moved(last, o) or alerted, (
                    last,
                    o,
                )
            last = o
    expected = set().union(*(keys(outs) for outs in reference))
    assert len(expected) == 2  # fired, resolved
    persisted = [empty, *after]
    checked = every_crash_point(
        records, reference, persisted, expected, lambda rs, st: run(rs, st, every_s)[0], keys
    )
    assert checked > 700
    final = {o.pool: o for outs in reference for o in outs if isinstance(o, PoolDemandRetired)}
    assert list(final) == [GPU]
    for c in range(len(records)):
        replayed, _ = run(records[c:], persisted[c], every_s)
        words = [
            o for outs in replayed for o in outs if isinstance(o, PoolDemand | PoolDemandRetired)
        ]
        assert words, c
        assert isinstance(words[-1], PoolDemandRetired), c


def test_with_nobody_waiting_figures_are_held_back_without_recomputing_and_end_the_same() -> None:
    """Nobody waits: the flips are figures only, held back without recomputing the pools until a
    tick finds them due; from any persisted state the last word is the reference one."""
    records = [r for r in coalesced_stream() if not isinstance(r, PendingPod)]
    empty: State = {f.name: {} for f in fields(DemandTables)}
    every_s = WorkerSettings.model_construct().demand_supply_every_s
    each, _ = run(records, empty, 0.0)
    reference, after = run(records, empty, every_s)
    sent = [o for outs in reference for o in outs if isinstance(o, PoolDemand)]
    assert len([o for outs in each for o in outs if isinstance(o, PoolDemand)]) - len(sent) >= 5
    assert all(b.ts_ms - a.ts_ms >= every_s * S for a, b in pairwise(sent))
    assert not [o for outs in reference for o in outs if isinstance(o, Alert)]
    persisted = [empty, *after]
    for c in range(len(records)):
        for s in range(c, len(records) + 1):
            replayed, _ = run(records[c:], persisted[s], every_s)
            words = [
                o
                for outs in replayed
                for o in outs
                if isinstance(o, PoolDemand | PoolDemandRetired)
            ]
            assert words, (c, s)
            assert isinstance(words[-1], PoolDemandRetired), (c, s)
