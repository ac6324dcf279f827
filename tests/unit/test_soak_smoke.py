"""The soak's core loop, small: table keys do not grow with the number of pod lifecycles."""

from __future__ import annotations

from bench.soak import bounded, soak


def test_state_does_not_grow_between_checkpoints() -> None:
    first, second = soak(3_000, 1_500)
    assert (first.lifecycles, second.lifecycles) == (1_500, 3_000)
    assert first.keys["pods"] > 0, "the soak drove no pods"
    assert second.total <= first.total + first.keys["pods"] // 10  # live pods jitter, no growth
    assert second.keys.keys() == first.keys.keys()
    assert all(second.keys[t] == first.keys[t] for t in first.keys if t != "pods")
    assert bounded([first, second])
    assert first.changelog_writes > 0
    assert second.changelog_bytes > 0
