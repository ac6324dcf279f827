"""The wall clock is read only where it stands for "when did this happen to us", never for what
a record decides: event time is data (every record carries ``ts_ms``), and timers and deadlines
run on a monotonic clock (``time.monotonic``, ``loop.time``), which is not the wall clock and is
not listed here. Each module below may read the wall clock, for the reason given; any other
module of agents/, streams/, sinks/, contract/ or infra/ that does fails this test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("agents", "streams", "sinks", "contract", "infra")

#: module → why it reads the wall clock
ALLOWED = {
    "agents/main.py": "the node agent's injected now_ms: the event time its records carry",
    "agents/cluster/main.py": "the cluster role's injected now_ms: its records' and ticks' time",
    "agents/health.py": "when a source's state last changed, for the agent.status it reports",
    "streams/worker/app.py": "a dead-letter record's time: when the worker gave up on an input",
    "streams/worker/outbox.py": "the default clock for produced records' CreateTime and for "
    "when an output was refused",
    "sinks/http.py": "the webhook signature's timestamp, which receivers check for replay",
    "sinks/runner.py": "a sink dead-letter record's time: when delivery was given up",
    "sinks/receiver.py": "the receiver's replay check: a signature's timestamp against now",
}

#: ``module.function`` names that read the wall clock (``datetime`` as a module or the class)
WALL = {
    ("time", "time"),
    ("time", "time_ns"),
    ("time", "localtime"),
    ("time", "gmtime"),
    ("time", "ctime"),
    ("time", "asctime"),
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
}


def _dotted(node: ast.expr) -> tuple[str, ...]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return tuple(reversed(parts))


def wall_clock_reads(source: str) -> list[int]:
    """The lines of ``source`` that read the wall clock, called or handed on as a clock."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime"):
            for alias in node.names:
                if (node.module, alias.name) in WALL:
                    lines.append(node.lineno)  # the name then reads it wherever it is called
        elif isinstance(node, ast.Attribute) and _dotted(node)[-2:] in WALL:
            lines.append(node.lineno)
    return sorted(set(lines))


def modules() -> list[str]:
    return sorted(
        str(path.relative_to(ROOT)) for folder in SCANNED for path in (ROOT / folder).rglob("*.py")
    )


def test_the_wall_clock_is_read_only_in_the_allowed_modules() -> None:
    readers = {m for m in modules() if wall_clock_reads((ROOT / m).read_text())}
    assert sorted(readers - set(ALLOWED)) == [], "a new wall-clock read: inject a clock instead"


def test_every_allowed_module_still_reads_it() -> None:
    """The list says where the wall clock is read, not where it once was."""
    readers = {m for m in modules() if wall_clock_reads((ROOT / m).read_text())}
    assert sorted(set(ALLOWED) - readers) == []


@pytest.mark.parametrize(
    ("source", "reads"),
    [
        ("import time\nt = time.time()", [2]),
        ("import time\nt = time.time_ns() // 1_000_000", [2]),
        ("import time\ndef f(clock=time.time): ...", [2]),  # handed on as a clock
        ("from time import time\nt = time()", [1]),
        ("from time import time_ns as ns", [1]),
        ("from datetime import datetime\nt = datetime.now()", [2]),
        ("import datetime\nt = datetime.datetime.utcnow()", [2]),
        ("from datetime import date\nd = date.today()", [2]),
        ("import time\nt = time.monotonic()", []),  # monotonic: not the wall clock
        ("import asyncio\nt = asyncio.get_running_loop().time()", []),
        ("import time\nt = time.perf_counter()", []),
        ("from datetime import UTC, datetime\ns = datetime.fromtimestamp(1, UTC)", []),
        ("# time.time() in a comment\nx = 'datetime.now()'", []),
    ],
)
def test_what_counts_as_a_wall_clock_read(source: str, reads: list[int]) -> None:
    assert wall_clock_reads(source) == reads
