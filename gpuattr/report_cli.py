"""``gpuattr report --since DURATION``: read the attribution topic back and print the report.

Reads from the first record written at or after ``now - since`` (Kafka's offsets-for-times) up
to the end offsets seen at start, so the report is a fixed range even while workers write.
"""

from __future__ import annotations

import csv
import re
import sys
import time
from collections.abc import Callable
from typing import TextIO

from aiokafka import AIOKafkaConsumer, TopicPartition
from rich.console import Console
from rich.table import Table

from contract import codec
from contract.outputs import AttributionEvent
from gpuattr.report import CSV_HEADER, Line, accumulate, csv_rows, effective_coverage
from infra.kafka import client_options
from infra.settings import KafkaSettings

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``2h``, ``1d``, ``1h30m`` → seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhdw])", text.strip())
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ValueError(f"not a duration: {text!r} (use e.g. 30m, 2h, 1d, 1h30m)")
    return sum(float(n) * _UNITS[u] for n, u in parts)


async def read_events(
    kafka: KafkaSettings, since_s: float, now: Callable[[], float] = time.time
) -> list[AttributionEvent]:
    topic = kafka.topic("attribution")
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        **client_options(kafka),
    )
    await consumer.start()
    events: list[AttributionEvent] = []
    try:
        parts = await consumer._client._wait_on_metadata(topic)  # raises if unknown
        tps = [TopicPartition(topic, p) for p in parts]
        if not tps:
            raise RuntimeError(f"topic {topic} does not exist (is the prefix right?)")
        consumer.assign(tps)
        start_ms = int((now() - since_s) * 1000)
        starts = await consumer.offsets_for_times(dict.fromkeys(tps, start_ms))
        ends = await consumer.end_offsets(tps)
        pending = set()
        for tp in tps:
            found = starts.get(tp)
            if found is not None and found.offset < ends[tp]:
                consumer.seek(tp, found.offset)
                pending.add(tp)
        while pending:
            batch = await consumer.getmany(*pending, timeout_ms=1000, max_records=10_000)
            for tp, msgs in batch.items():
                for m in msgs:
                    if m.offset >= ends[tp]:
                        break
                    record = codec.decode(m.value or b"")
                    if isinstance(record, AttributionEvent):
                        events.append(record)
                if msgs and msgs[-1].offset >= ends[tp] - 1:
                    pending.discard(tp)
    finally:
        await consumer.stop()
    return events


def _busy(line: Line) -> str:
    if line.busy_gpu_hours is not None:
        return f"{line.busy_gpu_hours:.3f}"
    if line.unmeasured_held_gpu_hours and not line.shared_held_gpu_hours:
        return "unknown (no sample)"
    return "n/a (shared)"


def _effective(line: Line) -> str:
    """Effective GPU-hours where measured, else why not: never 0 for unknown, never busy's."""
    if line.effective_gpu_hours is not None:
        return f"{line.effective_gpu_hours:.3f}"
    alone = line.held_gpu_hours - line.shared_held_gpu_hours
    if line.shared_held_gpu_hours and alone <= 0:
        return "n/a (shared)"
    if alone <= line.unmeasured_held_gpu_hours:
        return "unknown (no sample)"
    return "unknown (no effective figure)"


def _effective_over(line: Line) -> str:
    return f"{line.effective_measured_held_gpu_hours:.3f} of {line.held_gpu_hours:.3f}"


def print_table(lines: list[Line], title: str) -> None:
    table = Table(title=title, caption=effective_coverage(lines))
    columns = (
        "namespace",
        "workload",
        "MIG profile",
        "GPU-h held",
        "of which shared",
        "of which unmeasured",
        "busy GPU-h",
        "idle",
        "effective GPU-h",
        "effective measured over (h held)",
    )
    for name in columns:
        table.add_column(
            name,
            justify="right" if name not in ("namespace", "workload", "MIG profile") else "left",
        )
    for line in lines:
        table.add_row(
            line.namespace,
            line.workload,
            line.mig_profile or "whole GPUs",
            f"{line.held_gpu_hours:.3f}",
            f"{line.shared_held_gpu_hours:.3f}" if line.shared_held_gpu_hours else "",
            f"{line.unmeasured_held_gpu_hours:.3f}" if line.unmeasured_held_gpu_hours else "",
            _busy(line),
            f"{line.idle_share:.0%}" if line.idle_share is not None else "",
            _effective(line),
            _effective_over(line),
        )
    Console().print(table)


def write_csv(lines: list[Line], out: TextIO) -> None:
    writer = csv.writer(out)
    writer.writerow(CSV_HEADER)
    writer.writerows(csv_rows(lines))


def report(
    events: list[AttributionEvent],
    since: str,
    *,
    csv_path: str | None,
    max_gap_s: float,
    idle_threshold_pct: float,
) -> list[Line]:
    lines = accumulate(events, max_gap_s=max_gap_s, idle_threshold_pct=idle_threshold_pct)
    if csv_path == "-":
        write_csv(lines, sys.stdout)
    else:
        print_table(lines, f"GPU allocation, last {since} ({len(events)} attribution events)")
        if csv_path:
            with open(csv_path, "w", newline="") as f:
                write_csv(lines, f)
    return lines


async def run(
    kafka: KafkaSettings,
    since: str,
    *,
    csv_path: str | None,
    max_gap_s: float,
    idle_threshold_pct: float,
) -> int:
    events = await read_events(kafka, parse_duration(since))
    report(
        events, since, csv_path=csv_path, max_gap_s=max_gap_s, idle_threshold_pct=idle_threshold_pct
    )
    return 0
