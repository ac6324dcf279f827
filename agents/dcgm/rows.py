"""Prometheus text exposition → metric rows with their line numbers; a bad line is rejected alone.

A helper of :mod:`agents.dcgm.translate` (nothing else should import it). The text is read with
prometheus_client's parser, which raises on the first malformed line and gives up on the rest.
So the whole text is tried first; only if that fails is it read again one sample line at a
time, each line preceded by the last good ``# HELP`` / ``# TYPE`` lines so it is read in the
same family context as in the whole text. Either way every row knows its line number.

The exposition format requires a line feed after the last line: a body whose last line has
none was cut off, and that line is rejected instead of being read as a (possibly shortened)
value.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

#: What prometheus_client's text parser raises on malformed input (it has no error type of its own).
PARSE_ERRORS = (ValueError, IndexError, KeyError, TypeError)
MAX_LINE_CHARS = 200

# Reasons are a small fixed vocabulary (the offending text is in ``RejectedLine.line``), so that
# logs and alerts can group by them.
MALFORMED_SAMPLE = "malformed sample line"
MALFORMED_COMMENT = "malformed HELP/TYPE line"
VALUE_OUT_OF_RANGE = "value out of range"
NO_FINAL_LINE_FEED = "last line has no line feed (response cut off)"


@dataclass(frozen=True, slots=True)
class RejectedLine:
    """A line of the exposition that produced no usable row, and why (1-based ``line_no``)."""

    line_no: int
    line: str
    reason: str

    @classmethod
    def at(cls, line_no: int, line: str, reason: str) -> RejectedLine:
        return cls(line_no, line.strip()[:MAX_LINE_CHARS], reason)


@dataclass(frozen=True, slots=True)
class MetricRow:
    """One sample line: metric name, labels, value (NaN kept as NaN) and where it was."""

    line_no: int
    line: str
    name: str
    labels: Mapping[str, str]
    value: float


def read_rows(text: str) -> tuple[list[MetricRow], list[RejectedLine]]:
    """Every readable sample line of ``text``, in order, and the lines that were rejected."""
    lines = list(io.StringIO(text))  # split exactly as the parser splits: on "\n" only
    rejected: list[RejectedLine] = []
    if lines and not lines[-1].endswith("\n"):
        last = lines.pop()
        if last.strip():
            rejected.append(RejectedLine.at(len(lines) + 1, last, NO_FINAL_LINE_FEED))
    lines = _drop_bad_types(lines, rejected)
    rows = _read_whole(lines, rejected)
    if rows is None:
        rows = _read_line_by_line(lines, rejected)
    return rows, rejected


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped", "unknown")


def _drop_bad_types(lines: list[str], rejected: list[RejectedLine]) -> list[str]:
    """``# TYPE`` lines naming no known type are rejected (and blanked, keeping line numbers):
    the parser would quietly take them as "unknown"."""
    out = []
    for no, line in enumerate(lines, 1):
        parts = line.split()
        is_type = len(parts) >= 2 and parts[0] == "#" and parts[1] == "TYPE"
        if is_type and (len(parts) != 4 or parts[3] not in TYPES):
            rejected.append(RejectedLine.at(no, line, MALFORMED_COMMENT))
            out.append("\n")
            continue
        out.append(line)
    return out


def _is_sample_line(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _row_name(family: Metric, sample_name: str, line: str) -> str:
    """The metric name as the line sent it. The parser renames a counter ``X``'s samples
    ``X_total`` and a counter family ``X_total`` ``X`` (its samples keep ``X_total``), so for a
    counter the name is whichever of the two starts the line."""
    if family.type != "counter":
        return sample_name
    sent = _NAME.match(line.lstrip())
    return sample_name if sent is not None and sent[0] == sample_name else family.name


def _rows_of(
    families: Iterable[Metric], line_nos: Iterable[tuple[int, str]], rejected: list[RejectedLine]
) -> list[MetricRow]:
    rows: list[MetricRow] = []
    samples = ((f, s) for f in families for s in f.samples)
    for (family, sample), (no, line) in zip(samples, line_nos, strict=True):
        try:
            value = float(sample.value)
        except OverflowError:  # an integer too large for a float
            rejected.append(RejectedLine.at(no, line, VALUE_OUT_OF_RANGE))
            continue
        rows.append(MetricRow(no, line, _row_name(family, sample.name, line), sample.labels, value))
    return rows


def _read_whole(lines: list[str], rejected: list[RejectedLine]) -> list[MetricRow] | None:
    """The fast path: the text in one go (None when it does not parse)."""
    sample_lines = [(no, line) for no, line in enumerate(lines, 1) if _is_sample_line(line)]
    try:
        families = list(text_string_to_metric_families("".join(lines)))
    except PARSE_ERRORS:
        return None
    if sum(len(f.samples) for f in families) != len(sample_lines):
        return None  # cannot pin samples to lines: read them one by one instead
    return _rows_of(families, sample_lines, rejected)


def _read_line_by_line(lines: list[str], rejected: list[RejectedLine]) -> list[MetricRow]:
    """The slow path: one sample line at a time, after the last good HELP and TYPE lines."""
    context: dict[str, tuple[int, str]] = {}  # "HELP"/"TYPE" → (line number, line)
    rows: list[MetricRow] = []
    for no, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            try:
                list(text_string_to_metric_families(line + "\n"))
            except PARSE_ERRORS:
                rejected.append(RejectedLine.at(no, line, MALFORMED_COMMENT))
                continue
            parts = line.split(None, 3)
            if len(parts) > 2 and parts[1] in ("HELP", "TYPE"):
                context[parts[1]] = (no, line)
            continue
        preamble = "".join(f"{text}\n" for _, text in sorted(context.values()))
        try:
            families = list(text_string_to_metric_families(f"{preamble}{line}\n"))
        except PARSE_ERRORS:
            families = []
        if sum(len(f.samples) for f in families) != 1:
            rejected.append(RejectedLine.at(no, line, MALFORMED_SAMPLE))
            continue
        rows += _rows_of(families, [(no, line)], rejected)
    return rows
