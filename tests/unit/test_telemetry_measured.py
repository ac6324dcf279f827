"""The devices a fresh reading speaks for (:func:`streams.core.node.telemetry.measured`, what the
node's supply reads once per record) are exactly those :func:`streams.core.node.telemetry.unknown`
finds nothing to say against, whatever the node's state and the time asked about."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agents.types import AgentRecord
from bench import fleet as bench_fleet
from contract import codec
from streams.core.flow.processor import Processor, Tables, UnusableRecord
from streams.core.node import telemetry
from tests.fuzz_strategies import START_MS
from tests.unit.test_fuzz_processor import record_streams


def _per_device(proc: Processor, node: str, at_ms: int) -> tuple[str, ...]:
    state = proc.tables.node_state[node]
    return tuple(k for k in state.scraped if telemetry.unknown(state, k, at_ms, proc.life) is None)


def _check(stream: list[AgentRecord], later_s: int) -> tuple[int, int]:
    """Processes the stream and checks the two rules agree after every record, at the node's
    time and ``later_s`` after it; returns how many checks found some device measured, and
    how many found none."""
    proc = Processor(Tables.in_memory())
    some = none = 0
    for record in (codec.decode(codec.encode(r)) for r in stream):
        try:
            proc.handle(record)
        except UnusableRecord:
            continue
        for node, state in proc.tables.node_state.items():
            for at_ms in (state.last_ms, state.last_ms + later_s * 1000):
                rule = _per_device(proc, node, at_ms)
                assert telemetry.measured(state, at_ms, proc.life) == rule
                some, none = some + bool(rule), none + (not rule)
    return some, none


@settings(max_examples=60, deadline=None)
@given(stream=record_streams(), later_s=st.sampled_from([0, 10, 60, 600, 7200]))
def test_measured_is_the_per_device_rule(stream: list[AgentRecord], later_s: int) -> None:
    _check(stream, later_s)


def test_a_fleet_is_measured_while_fresh_and_not_once_stale() -> None:
    """On the benchmark fleet the check meets both answers: devices measured after scrapes, and
    none an hour after the last one (samples stopped)."""
    some, none = _check(list(bench_fleet.stream(2, 3, start_ms=START_MS)), 3600)
    assert some > 0
    assert none > 0
