"""The crash-point model of ``tests/unit/test_alert_crash_points.py``, shared by every test that
checks outputs survive a crash between a state write and an output write.

After each input ``k``, with the last commit at ``c`` (up to three inputs back), state persisted
for the inputs before ``s`` and outputs delivered for the inputs before ``o``
(``c <= s, o <= k + 1``), the restarted worker starts from ``persisted[s]`` and processes the
inputs again from ``c``. What was delivered must be exactly ``expected``, by the keys the caller
gives (an alert's idempotency key, an event's identity): nothing missing, nothing invented.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

R = TypeVar("R")  # an input record
S = TypeVar("S")  # the persisted tables
Out = TypeVar("Out")  # an output


def every_crash_point(
    records: Sequence[R],
    reference: Sequence[Sequence[Out]],
    persisted: Sequence[S],
    expected: set[str],
    replay: Callable[[Sequence[R], S], Sequence[Sequence[Out]]],
    keys: Callable[[Iterable[Out]], set[str]],
) -> int:
    """Assert every crash point delivers exactly ``expected``; return how many were checked.
    ``reference[i]`` are input ``i``'s outputs without a crash, ``persisted[s]`` the tables once
    the inputs before ``s`` are written (``persisted[0]`` the empty ones), and ``replay`` runs
    inputs from a persisted state and returns their outputs per input."""
    checked = 0
    for k in range(len(records)):
        for c in range(max(0, k - 2), k + 1):
            for s in range(c, k + 2):
                for o in range(c, k + 2):
                    delivered = set().union(*(keys(outs) for outs in reference[:o]))
                    for outs in replay(records[c:], persisted[s]):
                        delivered |= keys(outs)
                    assert delivered == expected, (k, c, s, o, expected - delivered)
                    checked += 1
    return checked
