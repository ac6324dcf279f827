"""``gpuattr report --since DURATION``: read the attribution topic back and print the report.

Reads from the first record written at or after ``now - since`` (Kafka's offsets-for-times) up
to the end offsets seen at start, so the report is a fixed range even while workers write.
The demand-events topic is read over the same range for the GPU-hours waited
(:mod:`gpuattr.waited`); where it cannot be read (no such topic, or a reader without its ACL)
the report says so and prints the held hours all the same.
"""

from __future__ import annotations

import csv
import logging
import re
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from rich.console import Console
from rich.table import Table

from contract import codec
from contract.inputs import PendingPod, PendingPodList, QueuedWorkload, QueuedWorkloadList
from contract.outputs import AttributionEvent
from contract.topics import TopicRole
from gpuattr.report import CSV_HEADER, Line, accumulate, csv_rows, effective_coverage
from gpuattr.waited import WAIT_CSV_HEADER, WaitLine, accumulate_waits, wait_csv_rows
from infra.kafka import client_options
from infra.settings import KafkaSettings

log = logging.getLogger(__name__)

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
    start_ms = int((now() - since_s) * 1000)
    return await read_topic(kafka, "attribution", start_ms, (AttributionEvent,))


async def read_topic(
    kafka: KafkaSettings, role: TopicRole, start_ms: int, kinds: tuple[type, ...]
) -> list[Any]:
    """The records of ``kinds`` on the role's topic written at or after ``start_ms``, up to the
    end offsets seen at start. A record that does not decode is skipped, logged and counted."""
    topic = kafka.topic(role)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        **client_options(kafka),
    )
    await consumer.start()
    records: list[Any] = []
    skipped = 0
    try:
        if topic not in await consumer.topics():  # unknown, or not ours to describe
            raise RuntimeError(f"topic {topic} does not exist (is the prefix right?)")
        parts = await consumer._client._wait_on_metadata(topic)  # raises if unknown
        tps = [TopicPartition(topic, p) for p in parts]
        if not tps:
            raise RuntimeError(f"topic {topic} does not exist (is the prefix right?)")
        consumer.assign(tps)
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
                    try:
                        record = codec.decode(m.value or b"")
                    except codec.DecodeError as exc:
                        skipped += 1
                        log.error("%s[%d]@%d skipped: %s", topic, tp.partition, m.offset, exc)
                        continue
                    if isinstance(record, kinds):
                        records.append(record)
                if msgs and msgs[-1].offset >= ends[tp] - 1:
                    pending.discard(tp)
    finally:
        await consumer.stop()
    if skipped:
        print(f"{skipped} records of {topic} did not decode and were skipped", file=sys.stderr)
    return records


async def read_waits(
    kafka: KafkaSettings, start_ms: int
) -> list[PendingPod | PendingPodList | QueuedWorkload | QueuedWorkloadList] | None:
    """The pending pods and their lists over the range; ``None`` where the topic cannot be read."""
    try:
        return await read_topic(
            kafka,
            "demand-events",
            start_ms,
            (PendingPod, PendingPodList, QueuedWorkload, QueuedWorkloadList),
        )
    except (KafkaError, RuntimeError) as exc:
        topic = kafka.topic("demand-events")
        print(f"GPU-hours waited: {topic} not read ({exc!r})", file=sys.stderr)
        return None


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


def _memory(line: Line) -> str:
    """The pods' own measured memory over time, and over how many held hours it was measured;
    blank where nothing measured it (never a split of the device's memory)."""
    if line.memory_gib_hours is None:
        return ""
    held = f"{line.memory_measured_held_gpu_hours:.3f} of {line.held_gpu_hours:.3f} h held"
    return f"{line.memory_gib_hours:.3f} (over {held})"


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
        "measured memory GiB-h",
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
            _memory(line),
        )
    Console().print(table)


def write_csv(lines: list[Line], out: TextIO) -> None:
    writer = csv.writer(out)
    writer.writerow(CSV_HEADER)
    writer.writerows(csv_rows(lines))


def print_waits(lines: list[WaitLine], title: str) -> None:
    table = Table(
        title=title,
        caption="GPUs asked for and not given (wait x GPUs asked; MIG pools in instance-hours):"
        " never added to the hours held",
    )
    for name in ("namespace", "workload", "pool"):
        table.add_column(name)
    for name in ("pods", "GPU-h waited", "longest wait (h)", "still waiting"):
        table.add_column(name, justify="right")
    queued = any(line.workloads for line in lines)
    if queued:  # Kueue's queued Workloads: the part of the hours that waited for quota
        table.add_column("of it for quota (GPU-h)", justify="right")
    for line in lines:
        cells = [
            line.namespace,
            line.workload,
            line.pool,
            str(line.pods),
            f"{line.gpu_hours_waited:.3f}",
            f"{line.longest_wait_h:.3f}",
            str(line.waiting_at_end) if line.waiting_at_end else "",
        ]
        if queued:
            cells.append(f"{line.quota_gpu_hours:.3f}" if line.workloads else "")
        table.add_row(*cells)
    Console().print(table)


def write_waits_csv(lines: list[WaitLine], out: TextIO) -> None:
    writer = csv.writer(out)
    writer.writerow(WAIT_CSV_HEADER)
    writer.writerows(wait_csv_rows(lines))


def report_waits(
    records: list[PendingPod | PendingPodList | QueuedWorkload | QueuedWorkloadList] | None,
    since: str,
    *,
    start_ms: int,
    end_ms: int,
    csv_path: str | None,
) -> list[WaitLine]:
    """The GPU-hours waited; nothing printed where demand-events could not be read."""
    if records is None:
        return []
    lines = accumulate_waits(records, start_ms=start_ms, end_ms=end_ms)
    print_waits(lines, f"GPU-hours waited, last {since} ({len(records)} pending-pod records)")
    if csv_path:
        with open(csv_path, "w", newline="") as f:
            write_waits_csv(lines, f)
    return lines


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
    waited_csv_path: str | None = None,
    now: Callable[[], float] = time.time,
) -> int:
    end_ms = int(now() * 1000)
    start_ms = end_ms - int(parse_duration(since) * 1000)
    events = await read_topic(kafka, "attribution", start_ms, (AttributionEvent,))
    report(
        events, since, csv_path=csv_path, max_gap_s=max_gap_s, idle_threshold_pct=idle_threshold_pct
    )
    if csv_path != "-":  # CSV to stdout is the held hours alone
        waits = await read_waits(kafka, start_ms)
        report_waits(waits, since, start_ms=start_ms, end_ms=end_ms, csv_path=waited_csv_path)
    return 0
