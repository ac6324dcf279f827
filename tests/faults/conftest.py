"""Print every fault case's figures at the end of the session (CI shows them)."""

from __future__ import annotations

import pytest

from tests.faults.harness import RESULTS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if RESULTS:
        terminalreporter.section("fault suite: each case against its no-fault reference")
        for line in RESULTS:
            terminalreporter.write_line(line)
