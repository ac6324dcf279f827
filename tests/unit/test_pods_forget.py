"""Pod state is bounded by what is live: gone lives are forgotten after a grace (event time)."""

from __future__ import annotations

import pytest

from contract.inputs import PodListSnapshot, PodRecord
from streams.core.flow.processor import Processor, Tables
from streams.core.lifetimes import HISTORY_MS, LIFE_KEPT_MS
from streams.core.node.pods import (
    NodePods,
    PodLife,
    PodNames,
    forget_gone,
    resolve,
    settle,
)
from tests.unit.test_spine import UNBOUNDED

MIN = 60_000
T0 = 1_700_000_000_000


@pytest.mark.parametrize(
    ("lives", "now", "kept"),
    [
        pytest.param([("u1", 0, None)], 60 * MIN, ["u1"], id="alive-is-never-forgotten"),
        pytest.param([("u1", 0, 1 * MIN)], 10 * MIN, ["u1"], id="gone-9-min-ago-kept"),
        pytest.param([("u1", 0, 1 * MIN)], 11 * MIN, ["u1"], id="gone-exactly-the-grace-kept"),
        pytest.param([("u1", 0, 1 * MIN)], 12 * MIN, None, id="gone-11-min-ago-dropped"),
        pytest.param(
            [("u1", 0, 1 * MIN), ("u2", 1 * MIN, None)], 12 * MIN, ["u2"], id="recreated-keeps-new"
        ),
        pytest.param(
            [("u1", 0, 1 * MIN), ("u2", 1 * MIN, 5 * MIN)],
            12 * MIN,
            ["u2"],
            id="only-the-old-gone-life-dropped",
        ),
    ],
)
def test_forget_gone(
    lives: list[tuple[str, int, int | None]], now: int, kept: list[str] | None
) -> None:
    names = PodNames(
        tuple(PodLife(uid, T0 + s, None if g is None else T0 + g) for uid, s, g in lives)
    )
    after = forget_gone(names, T0 + now)
    assert (None if after is None else [life.uid for life in after.lives]) == kept


def test_grace_is_the_holders_history() -> None:
    assert LIFE_KEPT_MS == HISTORY_MS == 10 * MIN


def test_settle_touches_only_what_it_is_given_and_indexes_the_gone() -> None:
    index = NodePods(("a/old", "a/other"), (("a/old", T0),))
    old = PodNames((PodLife("u-old", T0 - MIN, T0),))
    new = PodNames((PodLife("u-new", T0 + 11 * MIN),))
    assert index.due(T0 + 10 * MIN) == ()
    assert index.due(T0 + 11 * MIN) == ("a/old",)
    kept, after = settle(index, {"a/old": old, "a/new": new}, T0 + 11 * MIN)
    assert kept == {"a/old": None, "a/new": new}
    assert after == NodePods(("a/new", "a/other"), ())


def tables() -> Tables:
    return Tables.in_memory()


def pod(name: str, uid: str, ts: int, *, deleted: bool = False) -> PodRecord:
    return PodRecord("n1", ts, uid, "batch", name, T0, deleted=deleted)


def test_processor_deletes_forgotten_keys_and_shrinks_the_index() -> None:
    t = tables()
    p = Processor(t, life=UNBOUNDED)
    p.handle(pod("job-1", "u1", T0))
    p.handle(pod("job-1", "u1", T0 + MIN, deleted=True))
    p.handle(pod("job-2", "u2", T0 + 2 * MIN))
    assert set(t.pods) == {"n1/batch/job-1", "n1/batch/job-2"}
    assert t.node_pods["n1"].gone == (("batch/job-1", T0 + MIN),)

    p.handle(pod("job-3", "u3", T0 + 10 * MIN))  # job-1 gone 9 min: remembered
    assert "n1/batch/job-1" in t.pods
    assert resolve(t.pods["n1/batch/job-1"], T0 + 30_000, watched=True).uid == "u1"

    p.handle(pod("job-4", "u4", T0 + 12 * MIN))  # gone 11 min: forgotten, key deleted
    assert set(t.pods) == {"n1/batch/job-2", "n1/batch/job-3", "n1/batch/job-4"}
    assert t.node_pods["n1"] == NodePods(("batch/job-2", "batch/job-3", "batch/job-4"), ())


def test_relist_marks_vanished_gone_then_a_later_record_forgets_them() -> None:
    t = tables()
    p = Processor(t, life=UNBOUNDED)
    p.handle(pod("job-1", "u1", T0))
    p.handle(pod("job-2", "u2", T0))
    p.handle(PodListSnapshot("n1", T0 + MIN, ("u2",)))
    assert t.pods["n1/batch/job-1"].lives[0].gone_ms == T0 + MIN
    p.handle(PodListSnapshot("n1", T0 + 12 * MIN, ("u2",)))
    assert set(t.pods) == {"n1/batch/job-2"}
    assert t.node_pods["n1"].names == ("batch/job-2",)


def test_relist_rebuilds_an_index_written_before_the_gone_field() -> None:
    t = tables()
    p = Processor(t, life=UNBOUNDED)
    t.pods["n1/batch/job-1"] = PodNames((PodLife("u1", T0, T0 + MIN),))
    t.node_pods["n1"] = NodePods(("batch/job-1", "batch/missing"))  # as an older worker wrote it
    p.handle(PodListSnapshot("n1", T0 + 2 * MIN, ()))
    assert t.node_pods["n1"] == NodePods(("batch/job-1",), (("batch/job-1", T0 + MIN),))
    p.handle(pod("job-2", "u2", T0 + 12 * MIN))
    assert set(t.pods) == {"n1/batch/job-2"}


def test_an_empty_watched_node_stays_watched() -> None:
    t = tables()
    p = Processor(t, life=UNBOUNDED)
    p.handle(pod("job-1", "u1", T0, deleted=True))
    p.handle(pod("job-2", "u2", T0 + 20 * MIN, deleted=True))
    p.handle(PodListSnapshot("n1", T0 + 40 * MIN, ()))
    assert t.pods == {}
    assert t.node_pods["n1"] == NodePods()  # the watch reported: names are pending, not unwatched
