"""Allocation report: GPU-hours held, per namespace and workload, from attribution events.

Pure accounting over the events of one time range. Each event stands for the time until the
same device's next event, capped at ``max_gap_s`` (a gap longer than that — an exporter outage —
is not counted as held). The last event of a device counts for nothing.

- ``held_gpu_hours``: time x allocation share. An exclusive holder of a whole GPU or MIG instance
  counts 1 per hour; a tenant of a shared device counts its *allocation* share (slots held /
  slots in use), labelled as such — it is not usage.
- ``busy_gpu_hours``: time x measured utilization, only where the hardware measured this holder
  alone (exclusive devices and MIG instances). Shared devices have no per-pod figure: their held
  time is reported as ``shared_held_gpu_hours`` and kept out of busy and idle.
- ``idle_share``: of the measurable held time, the part below the idle threshold.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from contract.outputs import AttributionEvent, Holder

GroupKey = tuple[str, str]  # (namespace, workload "Kind/name" or "pod/<name>")


@dataclass(frozen=True, slots=True)
class Line:
    namespace: str
    workload: str
    held_gpu_hours: float
    shared_held_gpu_hours: float
    busy_gpu_hours: float | None
    idle_share: float | None


@dataclass
class _Acc:
    held: float = 0.0
    shared: float = 0.0
    measured: float = 0.0
    busy: float = 0.0
    idle: float = 0.0


def group_of(h: Holder) -> GroupKey:
    workload = f"{h.workload.kind}/{h.workload.name}" if h.workload else f"Pod/{h.pod}"
    return h.namespace, workload


def _share(ev: AttributionEvent, h: Holder) -> float:
    if h.allocation_share is not None:
        return h.allocation_share
    return 1.0 / max(1, len(ev.holders))


def accumulate(
    events: Iterable[AttributionEvent], *, max_gap_s: float, idle_threshold_pct: float
) -> list[Line]:
    by_device: dict[tuple[str, str], list[AttributionEvent]] = defaultdict(list)
    for ev in events:
        by_device[(ev.node, ev.device_uuid)].append(ev)
    acc: dict[GroupKey, _Acc] = defaultdict(_Acc)
    for series in by_device.values():
        series.sort(key=lambda e: e.ts_ms)
        for ev, nxt in pairwise(series):
            hours = min((nxt.ts_ms - ev.ts_ms) / 1000, max_gap_s) / 3600
            if hours <= 0 or not ev.holders:
                continue
            for h in ev.holders:
                a = acc[group_of(h)]
                held = hours * _share(ev, h)
                a.held += held
                if ev.state == "shared":
                    a.shared += held
                elif ev.usage.util_pct is not None:
                    a.measured += held
                    a.busy += held * ev.usage.util_pct / 100
                    if ev.usage.util_pct < idle_threshold_pct:
                        a.idle += held
    return [
        Line(
            namespace=ns,
            workload=wl,
            held_gpu_hours=a.held,
            shared_held_gpu_hours=a.shared,
            busy_gpu_hours=a.busy if a.measured else None,
            idle_share=a.idle / a.measured if a.measured else None,
        )
        for (ns, wl), a in sorted(acc.items())
    ]


CSV_HEADER = (
    "namespace",
    "workload",
    "held_gpu_hours",
    "shared_held_gpu_hours",
    "busy_gpu_hours",
    "idle_share",
)


def csv_rows(lines: Iterable[Line]) -> list[list[str]]:
    def num(x: float | None, digits: int = 4) -> str:
        return "" if x is None else f"{x:.{digits}f}"

    return [
        [
            line.namespace,
            line.workload,
            num(line.held_gpu_hours),
            num(line.shared_held_gpu_hours),
            num(line.busy_gpu_hours),
            num(line.idle_share, 3),
        ]
        for line in lines
    ]
