"""Strings copied from a source, cut at the edge to the contract's size and counted.

The rule and the size are :func:`contract.bounds.cut`'s; this adds what a translator owes the
operator: each cut string is counted (``gpuattr_agent_cut_values_total{what}``) and the first cut
of each kind is logged with the length that came (a source that sends one sends it on every
scrape: the counter tells how often).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from agents.selfmetrics import CUT_VALUES
from contract.bounds import MAX_TEXT_CHARS, cut

log = logging.getLogger(__name__)
_logged: set[str] = set()  # kinds already logged (bounded: a few per source)
_LOGGED_KINDS = 256


def bounded(text: str, what: str) -> str:
    """``text`` cut to the contract's size; a cut is counted and its first of a kind logged."""
    kept = cut(text)
    if kept is not text:
        CUT_VALUES.labels(what).inc()
        if what not in _logged and len(_logged) < _LOGGED_KINDS:
            _logged.add(what)
            log.warning(
                "%s of %d characters from the source cut to %d (counted in "
                "gpuattr_agent_cut_values_total; logged once)",
                what,
                len(text),
                MAX_TEXT_CHARS,
            )
    return kept


def oversized(values: Mapping[str, str]) -> bool:
    """Whether any key or value of ``values`` is over the size (a cheap test before copying)."""
    return any(len(k) > MAX_TEXT_CHARS or len(v) > MAX_TEXT_CHARS for k, v in values.items())


def bounded_map(values: Mapping[str, str], what: str) -> dict[str, str]:
    """``values`` with every key and value cut (:func:`bounded`; ``what`` names them all: a
    source's key names would make the counter's series unbounded)."""
    return {bounded(k, f"{what} name"): bounded(v, what) for k, v in values.items()}
