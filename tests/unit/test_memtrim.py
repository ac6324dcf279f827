"""The worker gives the C allocator's free pages back: for real on this glibc machine, counted,
off where the C library cannot, and wired to its setting."""

from __future__ import annotations

import logging
import platform
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from infra.settings import AlertSettings, KafkaSettings, WorkerSettings
from streams.worker.app import build_app
from streams.worker.memtrim import Trimmer, libc_trim, resident_bytes

MIB = 2**20


def _released_total() -> float:
    return REGISTRY.get_sample_value("gpuattr_worker_malloc_released_bytes_total") or 0.0


def _trims_total() -> float:
    return REGISTRY.get_sample_value("gpuattr_worker_malloc_trims_total") or 0.0


def test_a_trim_gives_freed_heap_pages_back_to_the_system() -> None:
    """32 MiB in 4 KB buffers (malloc's, not Python's small-object arenas), every 16th kept so
    the heap's top stays in use and glibc's own trimming on free cannot return the rest: after
    the free they stay resident; one trim gives back most of them, and says how much. The test
    suite runs on Linux with glibc (Debian, as the shipped image): anything else fails here
    rather than skipping what the worker ships."""
    assert (platform.system(), platform.libc_ver()[0]) == ("Linux", "glibc")
    trim = libc_trim()
    assert trim is not None
    trimmer = Trimmer(trim)
    trimmer()  # whatever earlier tests left: out of this test's figures
    size = 4000  # a name, not a literal: b"x" * 4000 would be one folded constant
    buffers = [b"x" * size for _ in range(8192)]  # written: resident
    kept = buffers[15::16]
    del buffers
    before = resident_bytes()
    assert before is not None
    released_before, trims_before = _released_total(), _trims_total()
    released = trimmer()
    assert released is not None
    assert released >= 16 * MIB, f"one trim gave back {released / MIB:.1f} MiB of ~30 freed"
    after = resident_bytes()
    assert after is not None
    assert after <= before - 16 * MIB
    assert _released_total() - released_before == released
    assert _trims_total() - trims_before == 1
    assert len(kept) == 512


def test_a_c_library_without_malloc_trim_leaves_it_off(caplog: pytest.LogCaptureFixture) -> None:
    class Musl:  # no malloc_trim symbol
        pass

    assert libc_trim(Musl()) is None
    with caplog.at_level(logging.INFO, logger="streams.worker.memtrim"):
        trimmer = Trimmer(None)
    assert not trimmer.enabled
    assert "not trimmed" in caplog.text
    trims = _trims_total()
    assert trimmer() is None
    assert _trims_total() == trims


def test_what_a_trim_gave_back_is_the_resident_sets_fall_never_less_than_nothing() -> None:
    calls: list[str] = []
    readings = iter([100 * MIB, 60 * MIB, 50 * MIB, 70 * MIB, None, 10 * MIB])
    trimmer = Trimmer(lambda: calls.append("trim"), lambda: next(readings))
    released = _released_total()
    assert trimmer() == 40 * MIB
    assert trimmer() == 0  # RSS grew across it (another thread): nothing is claimed
    assert trimmer() is None  # unreadable: trimmed, not measured
    assert calls == ["trim"] * 3
    assert _released_total() - released == 40 * MIB


def _timers(tmp_path: Path, **worker: object) -> list[str]:
    settings = WorkerSettings(data_dir=tmp_path, web_enabled=False, **worker)  # type: ignore[arg-type]
    app = build_app(KafkaSettings(bootstrap="localhost:1"), settings, AlertSettings())
    return [t.__qualname__ for t in app._app_tasks]


def test_the_worker_trims_on_its_setting_and_not_when_it_is_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert WorkerSettings().malloc_trim_every_s == 10.0
    assert "_trims.<locals>.trim" in _timers(tmp_path)
    assert "_trims.<locals>.trim" not in _timers(tmp_path, malloc_trim_every_s=0)
    monkeypatch.setenv("GPUATTR_WORKER_MALLOC_TRIM_EVERY_S", "0")
    assert WorkerSettings().malloc_trim_every_s == 0.0
    with pytest.raises(ValueError, match="malloc_trim_every_s"):
        WorkerSettings(malloc_trim_every_s=-1)
