"""One owner per rule inside the core: replay memory (:mod:`streams.core.replays`), key formats
(:mod:`streams.core.keys`), lifetimes (:mod:`streams.core.lifetimes`) and the allocation path
(:mod:`streams.core.devices.allocation`). Each rule is checked through its owner, and the core's
source is read for a second copy of it."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contract.inputs import DeviceAssignment
from streams.core import keys, lifetimes, replays
from streams.core.devices import allocation
from streams.core.lifetimes import Lifetimes, Phase

CORE = Path(__file__).resolve().parents[2] / "streams" / "core"
MIN = 60_000


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(CORE.rglob("*.py")):
        yield path.relative_to(CORE).as_posix(), ast.parse(path.read_text(), str(path))


def _where(found: Callable[[ast.AST], bool], owner: str) -> list[str]:
    """``module:line`` of every node ``found`` accepts outside the ``owner`` module."""
    return [
        f"{name}:{getattr(node, 'lineno', 0)}"
        for name, tree in _modules()
        if name != owner
        for node in ast.walk(tree)
        if found(node)
    ]


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


# --- replay memory


@pytest.mark.parametrize(
    ("held", "limit", "expected"),
    [
        pytest.param((), 4, ("new",), id="empty"),
        pytest.param(("a", "b"), 4, ("new", "a", "b"), id="room"),
        pytest.param(("a", "b", "c", "d"), 4, ("new", "a", "b", "c"), id="full-last-made-leaves"),
        pytest.param(("a",), 1, ("new",), id="one"),
    ],
)
def test_latest_keeps_the_last_made_newest_first(
    held: tuple[str, ...], limit: int, expected: tuple[str, ...]
) -> None:
    assert replays.latest("new", held, limit) == expected


def test_latest_keeps_the_emissions_remembered_per_input_by_default() -> None:
    assert len(replays.latest(0, tuple(range(10)))) == replays.REMEMBERED


@pytest.mark.parametrize(
    ("times", "ts_ms", "limit", "expected"),
    [
        pytest.param((), 5, 2, (5,), id="empty"),
        pytest.param((30, 10), 20, 4, (30, 20, 10), id="in-order"),
        pytest.param((30, 20), 10, 2, (30, 20), id="older-than-a-full-memory"),
        pytest.param((30, 20), 40, 2, (40, 30), id="newest-pushes-the-oldest-out"),
    ],
)
def test_newest_keeps_the_latest_times(
    times: tuple[int, ...], ts_ms: int, limit: int, expected: tuple[int, ...]
) -> None:
    assert replays.newest(times, ts_ms, limit) == expected


def test_replay_memories_are_bounded_only_in_replays() -> None:
    """No other module defines a memory's bound or slices a bounded memory by hand."""

    def bound(node: ast.AST) -> bool:
        return isinstance(node, ast.Assign) and any(
            "REMEMBERED" in _name(t) or _name(t).endswith(("_KEPT", "EMITTED_MAX"))
            for t in node.targets
        )

    def sliced(node: ast.AST) -> bool:
        if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice)):
            return False
        made = node.value
        if isinstance(made, ast.Tuple):  # (entry, *held)[:n]
            return any(isinstance(e, ast.Starred) for e in made.elts)
        return isinstance(made, ast.Call) and _name(made.func) == "sorted"  # sorted(...)[:n]

    assert _where(bound, "replays.py") == []
    assert _where(sliced, "replays.py") == []


# --- lifetimes

LIFE = Lifetimes()  # heartbeat 1 min, stale 3 min, TTL 10 min, quantum 15 s
Q = LIFE.quantum_ms


@pytest.mark.parametrize(
    ("silent_ms", "before_ms", "expected"),
    [
        pytest.param(MIN, None, "live", id="live"),
        pytest.param(3 * MIN + Q, None, "stale", id="stale-judged-a-quantum-later"),
        pytest.param(3 * MIN + Q - 1, None, "live", id="not-stale-early"),
        pytest.param(10 * MIN + Q, None, "stale", id="past-ttl-at-the-first-tick-only"),
        pytest.param(10 * MIN + 2 * Q, 10 * MIN + Q - 1, "stale", id="before-tick-not-past-ttl"),
        pytest.param(10 * MIN + 2 * Q, 10 * MIN + Q, "gone", id="past-ttl-at-both-ticks"),
        pytest.param(10 * MIN + Q - 1, 10 * MIN, "stale", id="not-gone-early"),
    ],
)
def test_judged_phase_lags_a_quantum_and_leaves_at_the_second_tick(
    silent_ms: int, before_ms: int | None, expected: Phase
) -> None:
    last = 1_000 * Q  # a quantum's start
    now = last + silent_ms
    before = None if before_ms is None else last + before_ms
    assert lifetimes.judged_phase(last, now, before, LIFE) == expected


@pytest.mark.parametrize(
    ("age_ms", "kept"),
    [(0, True), (2 * MIN, True), (2 * MIN + 1, False)],
    ids=["now", "two-heartbeats", "older"],
)
def test_a_departure_is_kept_two_heartbeats(age_ms: int, kept: bool) -> None:
    assert LIFE.departure_ms == 2 * LIFE.heartbeat_ms
    assert lifetimes.departure_kept(10 * MIN, 10 * MIN + age_ms, LIFE.departure_ms) is kept


@pytest.mark.parametrize("ts_ms", [0, 1, Q - 1, Q, 7 * Q + 3])
def test_quantized_times_start_their_quantum(ts_ms: int) -> None:
    start = lifetimes.quantum_start(ts_ms, Q)
    assert start <= ts_ms < start + Q
    assert start % Q == 0
    assert lifetimes.quantized(None, ts_ms, Q) == start


def test_quanta_are_cut_only_in_lifetimes() -> None:
    def cut(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Mod)
            and "quantum" in _name(node.right).lower()
        )

    assert _where(cut, "lifetimes.py") == []


def test_lifetimes_are_set_only_in_lifetimes() -> None:
    """A module-level time or count bound on kept state (``*_MS``, ``*_MAX``) is lifetimes'."""

    def bound(node: ast.AST) -> bool:
        return isinstance(node, ast.Assign) and any(
            _name(t).isupper() and _name(t).endswith(("_MS", "_MAX")) for t in node.targets
        )

    assert _where(bound, "lifetimes.py") == []


# --- key formats


def test_the_key_formats() -> None:
    assert keys.holder_key("n1", "GPU-a") == "n1/GPU-a"
    assert keys.alert_key("n1", "MIG-b") == "n1/MIG-b"
    assert keys.name_key("n1", "ml", "p-0") == "n1/ml/p-0"
    assert keys.claim_key("n1", "ml", "c-0") == "n1/ml/c-0"
    assert keys.short_name("ml", "p-0") == "ml/p-0"
    assert keys.partition_key(3) == "3"
    assert keys.resource_key("nvidia.com/gpu", "ml/p-0") == "nvidia.com/gpu|ml/p-0"
    assert keys.node_removal("n1") == "node:n1"


def test_a_name_a_node_keeps_is_keyed_as_its_parts() -> None:
    short = keys.short_name("ml", "p-0")
    assert keys.short_key("n1", short) == keys.name_key("n1", "ml", "p-0")
    assert keys.short_key("n1", short) == keys.claim_key("n1", "ml", "p-0")


def test_a_gone_nodes_tombstones_are_the_keys_its_tables_were_written_under() -> None:
    gone = lifetimes.node_keys("n1", ["b2", "b1", "b1"], ["ml/p-0"], ["GPU-a"], ["ml/c-0"])
    assert gone.per_node == ("n1",)
    assert gone.slot_holders == (keys.holder_key("n1", "b1"), keys.holder_key("n1", "b2"))
    assert gone.pods == (keys.name_key("n1", "ml", "p-0"),)
    assert gone.alert_state == (keys.alert_key("n1", "GPU-a"),)
    assert gone.dra_claims == (keys.claim_key("n1", "ml", "c-0"),)
    assert lifetimes.PER_NODE_TABLES is keys.PER_NODE_TABLES


def test_node_keys_are_formatted_only_in_keys() -> None:
    """No other module writes ``f"{node}/..."``."""

    def formatted(node: ast.AST) -> bool:
        if not isinstance(node, ast.JoinedStr) or len(node.values) < 2:
            return False
        first, then = node.values[0], node.values[1]
        return (
            isinstance(first, ast.FormattedValue)
            and _name(first.value) == "node"
            and isinstance(then, ast.Constant)
            and str(then.value).startswith(("/", "|"))
        )

    assert _where(formatted, "keys.py") == []


# --- the allocation path


def _row(resource: str, device_id: str) -> DeviceAssignment:
    return DeviceAssignment("ml", "p-0", "c", resource, device_id)


@pytest.mark.parametrize(
    ("name", "dra", "named"),
    [
        pytest.param("nvidia.com/gpu", False, None, id="plugin-resource"),
        pytest.param("GPU-a", False, None, id="plugin-base"),
        pytest.param("dra:gpu.nvidia.com", True, "gpu.nvidia.com", id="dra-resource"),
        pytest.param("dra:gpu.nvidia.com/pool/gpu-0", True, "gpu.nvidia.com/pool/gpu-0", id="base"),
    ],
)
def test_which_path_a_name_is_on(name: str, dra: bool, named: str | None) -> None:
    assert allocation.via_dra(name) is dra
    assert allocation.dra_name(name) == named


def test_rows_are_through_dra_when_any_is() -> None:
    plugin, dra = _row("nvidia.com/gpu", "GPU-a"), _row("dra:gpu.nvidia.com", "pool/gpu-0")
    assert not allocation.through_dra([plugin])
    assert allocation.through_dra([plugin, dra])
    assert allocation.dra_base(dra) == "dra:gpu.nvidia.com/pool/gpu-0"
    assert allocation.dra_resource("mig.nvidia.com") == "dra:mig.nvidia.com"


#: modules that still test the path inline; the list only shrinks
INLINE_DRA_TEST: set[str] = set()


def test_the_allocation_path_is_told_only_in_allocation() -> None:
    """No other module reads ``DRA_PREFIX`` or spells ``dra:``."""

    def told(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "DRA_PREFIX") or (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("dra:")
        )

    found = {where.split(":")[0] for where in _where(told, "devices/allocation.py")}
    assert found <= INLINE_DRA_TEST, sorted(found - INLINE_DRA_TEST)
