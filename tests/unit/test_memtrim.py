"""The worker gives the C allocator's free pages back: for real on this glibc machine, counted,
off where the C library cannot, and wired to its setting."""

from __future__ import annotations

import logging
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from infra.settings import AlertSettings, KafkaSettings, WorkerSettings
from streams.worker.app import build_app
from streams.worker.memtrim import Trimmer, libc_arenas, libc_trim, resident_bytes

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
    assert WorkerSettings().malloc_trim_every_s == 1.0
    assert "_trims.<locals>.trim" in _timers(tmp_path)
    assert "_trims.<locals>.trim" not in _timers(tmp_path, malloc_trim_every_s=0)
    monkeypatch.setenv("GPUATTR_WORKER_MALLOC_TRIM_EVERY_S", "0")
    assert WorkerSettings().malloc_trim_every_s == 0.0
    with pytest.raises(ValueError, match="malloc_trim_every_s"):
        WorkerSettings(malloc_trim_every_s=-1)


#: a fresh interpreter: ``ARENAS`` (``None``: glibc's own) as the worker sets it, then four
#: threads that each allocate from glibc's malloc; prints how many arenas (heaps) glibc has
_ARENAS_PROBE = """
import ctypes, os, sys, tempfile, threading
from streams.worker.memtrim import libc_arenas
most = None if sys.argv[1] == "none" else int(sys.argv[1])
if most is not None:
    assert libc_arenas(most)
kept = []
def work():
    kept.append([bytearray(4000) for _ in range(64)])  # over 512 bytes: glibc's malloc
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
path = os.path.join(tempfile.mkdtemp(), "info.xml")
fp = libc.fopen(path.encode(), b"w")
assert libc.malloc_info(0, fp) == 0
libc.fclose(fp)
print(open(path).read().count("<heap nr="))
"""


def _arenas(most: int | None) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _ARENAS_PROBE, "none" if most is None else str(most)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(done.stdout)


def test_one_arena_serves_every_thread_where_glibc_would_make_one_each() -> None:
    """For real, in fresh interpreters: threads that allocate get arenas of their own unless
    the worker's setting caps them (glibc's ``malloc_info`` lists the heaps)."""
    assert _arenas(None) > 1
    assert _arenas(1) == 1


def test_a_c_library_without_mallopt_leaves_its_arenas_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Musl:  # no mallopt symbol
        pass

    with caplog.at_level(logging.INFO, logger="streams.worker.memtrim"):
        assert libc_arenas(1, Musl()) is False
    assert "left as they are" in caplog.text


def test_the_worker_caps_its_arenas_by_its_setting() -> None:
    assert WorkerSettings().malloc_arenas == 1
    assert WorkerSettings(malloc_arenas=0).malloc_arenas == 0
    with pytest.raises(ValueError, match="malloc_arenas"):
        WorkerSettings(malloc_arenas=-1)


def test_the_worker_command_caps_the_arenas_before_it_builds_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuattr import cli
    from infra.settings import SpineSettings
    from streams.worker import app, memtrim, transport

    calls: list[object] = []

    class Worker:
        def __init__(self, *_: object, **__: object) -> None:
            calls.append("worker")

        def execute_from_commandline(self) -> None:
            calls.append("run")

    monkeypatch.setattr(memtrim, "libc_arenas", lambda most: calls.append(("arenas", most)))
    monkeypatch.setattr(app, "build_app", lambda *_: calls.append("app"))
    monkeypatch.setattr(transport, "Worker", Worker)
    monkeypatch.setattr(cli, "_tune_gc", lambda _: None)
    kafka, spine = KafkaSettings(bootstrap=None), SpineSettings()
    cli._run_worker(kafka, WorkerSettings(malloc_arenas=2), AlertSettings(), spine)
    assert calls == [("arenas", 2), "app", "worker", "run"]
    calls.clear()
    cli._run_worker(kafka, WorkerSettings(malloc_arenas=0), AlertSettings(), spine)
    assert calls == ["app", "worker", "run"]
