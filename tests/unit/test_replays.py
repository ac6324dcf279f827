"""The one rule for what a record emitted, remembered for its replay
(:mod:`streams.core.replays`)."""

from __future__ import annotations

from dataclasses import dataclass

from streams.core.replays import recall, remember


@dataclass(frozen=True)
class Made:
    ts_ms: int
    by: str
    what: str = ""


def test_the_last_made_come_first_and_the_oldest_by_event_time_makes_room() -> None:
    held: tuple[Made, ...] = ()
    for ts in (10, 20, 30, 40, 50):
        held = remember(Made(ts, f"r{ts}"), held, 4)
    assert [m.ts_ms for m in held] == [50, 40, 30, 20]
    same_time = remember(Made(50, "other"), held, 4)
    assert [m.by for m in same_time] == ["other", "r50", "r40", "r30"]
    # a record a little out of order is the last word; the oldest by event time makes room
    late = remember(Made(45, "late"), held, 4)
    assert [m.by for m in late] == ["late", "r50", "r40", "r30"]
    assert [m.by for m in remember(Made(35, "x"), late, 4)] == ["x", "late", "r50", "r40"]


def test_a_record_from_further_back_than_the_memory_pushes_nothing_out() -> None:
    held = (Made(50, "r50"), Made(40, "r40"), Made(30, "r30"), Made(20, "r20"))
    assert remember(Made(10, "r10", "said again, differently"), held, 4) == held
    # while there is room it is kept, as the last made
    assert remember(Made(10, "r10"), held[:3], 4) == (Made(10, "r10"), *held[:3])


def test_a_record_remembered_keeps_what_it_emitted_first() -> None:
    held = (Made(20, "r20", "first"), Made(10, "r10", "first"))
    assert remember(Made(20, "r20", "second"), held, 4) == held
    assert recall(held, 20, "r20") == Made(20, "r20", "first")
    assert recall(held, 20, "other") is None
    assert recall(held, 30, "r20") is None
