"""``python -m bench.core`` runs end to end on a small fleet (figures are not asserted)."""

from __future__ import annotations

import sys

import pytest

from bench import core


def test_bench_core_prints_each_step(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["bench.core", "--nodes", "3", "--intervals", "2"])
    core.main()
    out = capsys.readouterr().out
    assert out.startswith(f"{len(list(core.stream(3, 2, start_ms=core.START_MS)))} input records")
    steps = [line.split()[0] for line in out.splitlines()[1:]]
    assert steps == ["decode", "core", "encode", "total"]
