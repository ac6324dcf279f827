"""``gpuattr demo`` on its own fresh broker starts without an error line in any log.

A fresh broker is where start-up races show: topics whose leaders are named before they serve
(``NotLeaderForPartitionError`` on the first sends) and the group coordinator's topic created by
the first consumer to ask (``Group Coordinator Request failed``). Both are waited out before
the clients start (infra/admin.py); this test keeps it that way.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

#: a log line of ours, Faust's or aiokafka's at ERROR or worse, a traceback, or a leader race
BAD = re.compile(r"\[(ERROR|CRITICAL)\]| ERROR | CRITICAL |Traceback|NotLeaderForPartition")


def bad_lines(folder: Path) -> dict[str, list[str]]:
    """Per log file of the demo's children: its bad lines (only files that have any)."""
    logs = sorted(folder.glob("*.log"))
    assert {p.name for p in logs} >= {"worker.log", "kafka.log"}, logs
    found = {}
    for log in logs:
        if log.name == "kafka.log":  # the broker's own log (Java): its WARNs are its business
            continue
        if lines := [ln for ln in log.read_text(errors="replace").splitlines() if BAD.search(ln)]:
            found[log.name] = lines[:5]
    return found


async def test_demo_on_a_fresh_broker_logs_no_error(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpuattr.cli",
        "demo",
        "--duration",
        "20",
        "--json",
        "--workdir",
        str(tmp_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ),
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=240)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert out.count(b'"schema":"attribution"') > 0, "the demo attributed nothing"
    stderr_bad = [ln for ln in err.decode(errors="replace").splitlines() if BAD.search(ln)]
    assert not stderr_bad, stderr_bad[:5]
    bad = bad_lines(tmp_path)
    assert not bad, bad
