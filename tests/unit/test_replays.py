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


def test_the_newest_by_event_time_are_kept_newest_first() -> None:
    held: tuple[Made, ...] = ()
    for ts in (10, 20, 30, 40, 50):
        held = remember(Made(ts, f"r{ts}"), held, 4)
    assert [m.ts_ms for m in held] == [50, 40, 30, 20]
    same_time = remember(Made(50, "other"), held, 4)  # the one just made first among equals
    assert [m.by for m in same_time] == ["other", "r50", "r40", "r30"]


def test_a_record_from_further_back_than_the_memory_pushes_nothing_out() -> None:
    held = (Made(50, "r50"), Made(40, "r40"), Made(30, "r30"), Made(20, "r20"))
    assert remember(Made(10, "r10", "said again, differently"), held, 4) == held
    # while there is room it is kept, in its place by event time
    assert remember(Made(10, "r10"), held[:3], 4) == (*held[:3], Made(10, "r10"))
    assert remember(Made(35, "r35"), held, 4) == (held[0], held[1], Made(35, "r35"), held[2])


def test_a_record_remembered_keeps_what_it_emitted_first() -> None:
    held = (Made(20, "r20", "first"), Made(10, "r10", "first"))
    assert remember(Made(20, "r20", "second"), held, 4) == held
    assert recall(held, 20, "r20") == Made(20, "r20", "first")
    assert recall(held, 20, "other") is None
    assert recall(held, 30, "r20") is None
