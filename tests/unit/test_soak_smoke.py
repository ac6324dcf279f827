"""The soak's core loop, small: table keys do not grow with the number of pod lifecycles."""

from __future__ import annotations

from bench.soak import Checkpoint, bounded, most_tracked_nodes, soak


def test_state_does_not_grow_between_checkpoints() -> None:
    first, second = soak(3_000, 1_500)
    assert (first.lifecycles, second.lifecycles) == (1_500, 3_000)
    assert first.keys["pods"] > 0, "the soak drove no pods"
    assert second.keys.keys() == first.keys.keys()
    assert 0 < first.nodes <= most_tracked_nodes(4)
    assert 0 < second.nodes <= most_tracked_nodes(4)
    assert second.per_node <= 1.1 * first.per_node
    assert bounded([first, second], most_tracked_nodes(4))
    assert first.changelog_writes > 0
    assert second.changelog_bytes > 0


def _checkpoint(n: int, keys: dict[str, int]) -> Checkpoint:
    return Checkpoint(n, keys, 1, 1, 1.0)


def test_the_criterion_catches_growth() -> None:
    live = {"node_state": 5, "slot_holders": 20, "pods": 40}
    assert bounded([_checkpoint(1, live), _checkpoint(2, {**live, "node_state": 6})], 9)
    leaking_pods = {**live, "pods": 60}
    assert not bounded([_checkpoint(1, live), _checkpoint(2, leaking_pods)], 9)
    leaking_nodes = {**live, "node_state": 10, "slot_holders": 40, "pods": 80}
    assert not bounded([_checkpoint(1, live), _checkpoint(2, leaking_nodes)], 9)
