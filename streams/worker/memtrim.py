"""Give the C allocator's free memory back to the system, every few seconds.

What the worker frees stays in the process: Python's own allocator returns an arena only when
every object in it is gone, and glibc's ``malloc`` (which serves everything larger than 512
bytes: the fetch responses, the produce requests, the encoded batches, big dicts) returns only
the top of its heap. A worker that has read a backlog or rebalanced keeps that high-water mark
as RSS, and RSS is what a memory limit and the OOM killer count. ``malloc_trim(0)`` hands every
whole free page of glibc's heaps back (``madvise``): on the bench's 10,000 devices, ~17 MiB of
a 199 MiB worker; a trim of the same core's state in one process took 0.27 ms
(bench.run).

Every second by default: at 10,000 devices a worker at saturation held ~18 MiB of freed buffers
resident between trims 10 s apart (bench.run). And one arena for all
threads (:func:`libc_arenas`), so that one trim reaches every freed block.

glibc only: where the C library has no ``malloc_trim`` (musl, macOS) the trimmer is off and says
so once. A thin adapter: no state of the join, no output depends on it.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable

from streams.worker import selfmetrics

log = logging.getLogger(__name__)

Trim = Callable[[], object]


def libc_trim(library: object | None = None) -> Trim | None:
    """The C library's ``malloc_trim(0)`` as a call, or ``None`` where it has none. ``library``:
    where to look (the process's own symbols, the C library included, by default)."""
    lib = ctypes.CDLL(None) if library is None else library
    fn = getattr(lib, "malloc_trim", None)
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return lambda: fn(0)


#: glibc's ``mallopt`` parameter for the most arenas its ``malloc`` makes (``M_ARENA_MAX``)
M_ARENA_MAX = -8


def libc_arenas(most: int, library: object | None = None) -> bool:
    """Let the C allocator make at most ``most`` arenas (glibc's ``mallopt(M_ARENA_MAX)``);
    whether it took it (``False`` where the C library has no ``mallopt``, or refused).

    glibc gives each thread that allocates its own arena (up to 8 per core), and each arena
    keeps its freed blocks resident apart from the others: the worker's consumer and producer
    threads fill theirs with fetch and produce buffers, a trim later. One arena is shared by
    all threads, which hardly contend (the interpreter's own objects are in its small-object
    arenas, under the GIL). Call it before the threads start: an arena once made stays."""
    lib = ctypes.CDLL(None) if library is None else library
    fn = getattr(lib, "mallopt", None)
    if fn is None:
        log.info("mallopt: the C library has none (not glibc); its arenas are left as they are")
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return bool(fn(M_ARENA_MAX, most))


def resident_bytes() -> int | None:
    """This process's resident set in bytes (``/proc/self/statm``), ``None`` off Linux."""
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


class Trimmer:
    """One trim per call: what it gave back is counted
    (``gpuattr_worker_malloc_released_bytes_total``, as the resident set fell across it)."""

    def __init__(
        self, trim: Trim | None, resident: Callable[[], int | None] = resident_bytes
    ) -> None:
        self._trim = trim
        self._resident = resident
        if trim is None:
            log.info("malloc_trim: the C library has none (not glibc); memory is not trimmed")

    @property
    def enabled(self) -> bool:
        return self._trim is not None

    def __call__(self) -> int | None:
        """Trim now; the bytes the resident set fell by (``None``: off, or RSS unreadable)."""
        if self._trim is None:
            return None
        before = self._resident()
        self._trim()
        after = self._resident()
        selfmetrics.MALLOC_TRIMS.inc()
        if before is None or after is None:
            return None
        released = max(before - after, 0)
        selfmetrics.MALLOC_RELEASED.inc(released)
        return released
