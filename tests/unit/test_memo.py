"""The live memo: the same results as the function, and held keys bounded by what is asked for
(the live set plus recent churn), never by every key ever seen. The alert episodes' identity
memo of holder ids: the same answers as deciding afresh, bounded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contract.outputs import Holder
from streams.core.alerts import episodes
from streams.core.memo import LiveMemo, live_memo


def _counting() -> tuple[LiveMemo[[int], int], list[int]]:
    calls: list[int] = []

    def square(x: int) -> int:
        calls.append(x)
        return x * x

    return LiveMemo(square, 4, 8, 10_000), calls


def test_results_are_the_functions_and_a_repeat_is_not_recomputed() -> None:
    memo, calls = _counting()
    assert [memo(x) for x in (3, 4, 3, 3, 4)] == [9, 16, 9, 9, 16]
    assert calls == [3, 4]


def test_a_live_set_asked_for_every_round_is_computed_once_however_long_it_runs() -> None:
    memo, calls = _counting()
    live = range(50)
    for _ in range(200):  # 10,000 calls: many generations
        for x in live:
            memo(x)
    assert sorted(calls) == list(live)
    assert memo.size() == 50


def test_churn_is_dropped_keys_held_stay_bounded_by_the_live_set_and_recent_churn() -> None:
    """A live set of 50 asked every round, plus 5 new keys per round that are never asked for
    again (pods that come and go): after 2,000 rounds (10,000 keys seen) the memo holds the live
    set and a few generations of churn, not the history."""
    memo, calls = _counting()
    live = list(range(50))
    fresh = 1_000
    peak = 0
    for _ in range(2_000):
        for x in live:
            memo(x)
        for _ in range(5):
            memo(fresh)
            fresh += 1
        peak = max(peak, memo.size())
    # a generation lasts 4x the previous one's entries in calls: at most ~4 rounds of 55 calls
    # per generation here, so at most about two generations' churn (2 x 4 x 5) besides the 50
    assert peak <= 50 + 2 * 4 * 5 * 2
    assert fresh - 1_000 == 10_000
    assert sorted(c for c in calls if c < 1_000) == live  # the live set never recomputed


def test_an_entry_survives_one_full_generation_after_its_last_use() -> None:
    memo, calls = _counting()  # factor 4, floor 8: the first generation is 32 calls
    memo(-1)
    for x in range(31):  # the rest of the first generation, all new keys
        memo(x)
    memo(-1)  # now in the previous generation: found, carried over, not recomputed
    assert calls.count(-1) == 1


def test_keyword_arguments_are_refused_not_silently_keyed_apart() -> None:
    @live_memo(16)
    def add(a: int, b: int = 0) -> int:
        return a + b

    assert add(1, 2) == 3
    with pytest.raises(TypeError):
        add(1, b=2)


def test_clear_empties_both_generations() -> None:
    memo, calls = _counting()
    memo(2)
    memo.clear()
    assert memo.size() == 0
    memo(2)
    assert calls == [2, 2]


def test_keys_never_asked_again_stay_within_maxsize_however_many() -> None:
    """Keys asked once each (all misses) would lengthen the generations without end: the hard
    bound turns the generation at ``maxsize`` entries, so the memo never holds more."""
    memo = LiveMemo(lambda x: x, 4, 8, 100)
    peak = 0
    for x in range(100_000):
        memo(x)
        peak = max(peak, memo.size())
    assert peak <= 100
    assert memo(99_999) == 99_999


def test_a_live_set_within_maxsize_keeps_its_hits_beside_unbounded_churn() -> None:
    memo, calls = _counting()
    memo.maxsize = 200
    fresh = 1_000
    for _ in range(1_000):
        for x in range(30):
            memo(x)
        for _ in range(40):  # more new keys than live ones each round
            memo(fresh)
            fresh += 1
        assert memo.size() <= 200
    recomputed = [c for c in calls if c < 1_000]
    assert len(recomputed) < 30 * 50  # mostly hits, though the churn turns generations often


def test_a_live_set_as_large_as_maxsize_fits_and_is_not_recomputed() -> None:
    """A key carried over to the current generation leaves the previous one, so a live set of
    up to ``maxsize`` keys fits (counted twice, one half the size would turn the generation
    early and drop live keys, round after round)."""
    memo, calls = _counting()
    memo.maxsize = 1_000
    for _ in range(3):  # the first rounds: generations still growing to the live set's size
        for x in range(900):
            memo(x)
    calls.clear()
    for _ in range(20):
        for x in range(900):
            memo(x)
        assert memo.size() <= 1_000
    assert calls == []


@pytest.mark.parametrize(("factor", "floor", "maxsize"), [(0, 8, 9), (4, 0, 9), (4, 8, 0)])
def test_a_memo_that_could_not_hold_anything_is_refused(
    factor: int, floor: int, maxsize: int
) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        LiveMemo(abs, factor, floor, maxsize)


# --- the holder-ids memo of the alert episodes (an identity memo behind ids_of)

_names = st.sampled_from(["a", "b", "c"])
_holders = st.lists(
    st.builds(
        Holder,
        namespace=_names,
        pod=_names,
        container=_names,
        resource=st.just("nvidia.com/gpu"),
        device_ids=st.just(("GPU-1",)),
        slots=st.just(1),
        allocation_share=st.just(1.0),
        uid=st.one_of(st.none(), _names),
    ),
    max_size=4,
).map(tuple)


@given(st.lists(_holders, min_size=1, max_size=8))
def test_holder_ids_memo_answers_as_deciding_afresh(sets: list[tuple[Holder, ...]]) -> None:
    for holders in [*sets, *sets]:  # the second pass meets what the first kept
        assert episodes.ids_of(holders) == episodes.fresh_ids(holders)


def test_holder_ids_memo_is_bounded_and_right_past_the_bound() -> None:
    made = [(Holder("ns", f"p{i}", "c", "r", ("d",), 1, 1.0, f"u{i}"),) for i in range(5000)]
    for holders in made:
        assert episodes.ids_of(holders) == (("ns", holders[0].pod, holders[0].uid),)
    assert len(episodes._IDS) <= episodes.IDS_MAXSIZE
    # an equal tuple that is another object is answered for its own content
    again = (Holder("ns", "p1", "c", "r", ("d",), 1, 1.0, "other"),)
    assert episodes.ids_of(again) == (("ns", "p1", "other"),)
