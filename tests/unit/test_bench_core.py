"""``python -m bench.core`` runs end to end on a small fleet (figures are not asserted)."""

from __future__ import annotations

import sys

import pytest

from bench import bytecodes, core
from bench.kafka_io import outputs_of
from bench.run import CpuClock
from contract import codec
from contract.inputs import DcgmScrape


def test_bench_core_prints_each_step(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["bench.core", "--nodes", "3", "--intervals", "2"])
    core.main()
    out = capsys.readouterr().out
    assert out.startswith(f"{len(list(core.stream(3, 2, start_ms=core.START_MS)))} input records")
    steps = [line.split()[0] for line in out.splitlines()[1:]]
    assert steps == ["decode", "core", "demand", "encode", "state", "total", "changelog"]


def test_a_steady_fleet_writes_at_most_one_changelog_record_per_node_per_scrape() -> None:
    """No churn, every device at its level: once past the warm-up, what changes per sample
    (last-seen times, running figures) is kept compact per node — never a write per device."""
    nodes, intervals = 6, 4
    writes = core.steady_writes(nodes, intervals) * core.sample_count(nodes, intervals)
    assert round(writes) <= nodes * intervals


def test_the_like_for_like_line_counts_a_scrapes_devices_without_decoding_it() -> None:
    records = list(core.stream(2, 1, start_ms=core.START_MS))
    scrapes = [r for r in records if isinstance(r, DcgmScrape)]
    assert [outputs_of(codec.encode(r)) for r in scrapes] == [len(r.samples) for r in scrapes]
    others = [r for r in records if not isinstance(r, DcgmScrape)]
    assert {outputs_of(codec.encode(r)) for r in others} == {0}


def test_each_run_starts_with_the_core_memos_empty() -> None:
    """A repeat must not read faster for the memo entries the run before it made."""
    from streams.core.devices import identity
    from streams.core.node import pods

    payloads = [codec.encode(r) for r in core.stream(3, 2, start_ms=core.START_MS)]
    core.once(payloads, core.sample_count(3, 2))
    assert identity.parse_device_id.size() > 0
    assert pods._resolved.size() > 0
    assert core.clear_memos() >= 2
    assert identity.parse_device_id.size() == 0
    assert pods._resolved.size() == 0


def test_cpu_of_a_span_shorter_than_the_sampling_step_is_its_share_not_zero() -> None:
    """Regression (a CI run of the bench smoke test read 0 samples/s): a small fleet's whole
    run fits between two CPU samples, so the nearest-sample reading gave the span no CPU."""
    clock = CpuClock([])
    clock.samples = [(10.0, 1.0), (10.2, 1.1), (10.4, 1.3)]
    assert clock.between(10.05, 10.15) == pytest.approx(0.05)
    assert clock.between(10.1, 10.3) == pytest.approx(0.05 + 0.1)
    assert clock.between(9.0, 11.0) == pytest.approx(0.3)  # outside: the ends


def test_the_cores_bytecode_count_is_the_same_on_every_run() -> None:
    """``bench.bytecodes`` counts rather than times: two runs of the same input agree exactly,
    every counted bytecode is some function's, and only the samples after the warm-up count."""
    first, second = bytecodes.count(3, 3), bytecodes.count(3, 3)
    assert first.bytecodes > 0
    assert first.calls > 0
    assert (first.bytecodes, first.calls, first.samples) == (
        second.bytecodes,
        second.calls,
        second.samples,
    )
    assert sum(first.by_function.values()) == first.bytecodes
    records = list(core.stream(3, 3, start_ms=core.START_MS))
    after_warm_up = records[len(records) // 3 :]
    assert first.samples == sum(len(r.samples) for r in after_warm_up if isinstance(r, DcgmScrape))
    assert ("processor.py", "handle") in {(f, fn) for f, fn, _ in first.by_function}
