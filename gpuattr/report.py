"""Allocation report: GPU-hours held, per namespace and workload, from attribution events.

Pure accounting over the events of one time range. Each event stands for the time until the
same device's next event, capped at ``max_gap_s`` (longer than the heartbeat: a device is
reported at least every heartbeat, telemetry or not, so a longer gap means its node's agent was
silent). A device's last event, and its events as stale or gone, count for nothing: nothing is
charged for a device nobody can vouch for.

- ``held_gpu_hours``: time x each pod's share of the device — the one accounting figure
  (``pods[].share``; for an event without it, :func:`streams.core.devices.accounting.pod_shares`
  applies the same rule to its holders), the same the Prometheus GPUs-held rule sums. An
  exclusive holder of a whole GPU counts 1 per hour; a tenant of a shared device its
  *allocation* share — it is not usage. MIG instances are kept apart from whole GPUs
  (``mig_profile``): an instance-hour is not a GPU-hour.
- ``busy_gpu_hours``: time x measured utilization, only where the hardware measured this holder
  alone (exclusive devices and MIG instances). Shared devices have no per-pod figure: their held
  time is reported as ``shared_held_gpu_hours`` and kept out of busy and idle.
- ``unmeasured_held_gpu_hours``: held time no sample measured (exporter unreachable, refused,
  no row): held, busy unknown — never counted as idle.
- ``idle_share``: of the measured held time, the part below the idle threshold.
- ``effective_gpu_hours``: time x effective activity (SM active, else graphics-engine active),
  by the same share and the same rule as busy (devices held alone), and only over the intervals
  whose event carried an effective figure (a profiling field was exported). Nothing is derived
  from busy where it is missing: ``effective_measured_held_gpu_hours`` says over how many of the
  held hours effective was measured, so a partial figure never reads as the whole; ``None``
  where it never was.
- ``memory_gib_hours``: time x the framebuffer the pod's own processes were measured to use
  (``pods[].measured``: per-process readings our join credited to the pod), on shared devices
  too, and only over the intervals whose event measured it; ``memory_measured_held_gpu_hours``
  says over how many held hours. ``None`` where it never was: never a split of the device's
  memory.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from contract.outputs import AttributionEvent, Workload
from streams.core.devices.accounting import pod_shares

#: (namespace, workload "Kind/name" or "Pod/<name>", MIG profile or "" for whole GPUs)
GroupKey = tuple[str, str, str]
#: events that vouch for nothing after them
NOT_CHARGED = ("stale", "gone")


@dataclass(frozen=True, slots=True)
class Line:
    namespace: str
    workload: str
    held_gpu_hours: float
    shared_held_gpu_hours: float
    busy_gpu_hours: float | None
    idle_share: float | None
    unmeasured_held_gpu_hours: float = 0.0
    mig_profile: str = ""  # "" for whole GPUs; a MIG profile's instance-hours apart
    # additive: effective hours, only where a profiling field measured them
    effective_gpu_hours: float | None = None
    effective_measured_held_gpu_hours: float = 0.0
    # additive: measured memory of the pods' own processes
    memory_gib_hours: float | None = None
    memory_measured_held_gpu_hours: float = 0.0


@dataclass
class _Acc:
    held: float = 0.0
    shared: float = 0.0
    measured: float = 0.0
    busy: float = 0.0
    idle: float = 0.0
    unmeasured: float = 0.0
    effective_measured: float = 0.0
    effective: float = 0.0
    memory_measured: float = 0.0
    memory_gib: float = 0.0


def _workload(namespace: str, pod: str, workload: Workload | None) -> tuple[str, str]:
    return namespace, f"{workload.kind}/{workload.name}" if workload else f"Pod/{pod}"


def _shares(ev: AttributionEvent) -> list[tuple[tuple[str, str], float, float | None]]:
    """Each pod's share of the device, by the core's accounting, and the memory its own
    processes were measured to use (MiB; ``None``: not measured)."""
    return [
        (
            _workload(p.namespace, p.pod, p.workload),
            p.share,
            p.measured.fb_used_mib if p.measured is not None else None,
        )
        for p in pod_shares(ev)
    ]


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
            if hours <= 0 or not ev.holders or ev.origin in NOT_CHARGED:
                continue
            profile = (ev.mig.profile or "unknown") if ev.mig is not None else ""
            measured = ev.telemetry.status == "measured" and ev.usage.util_pct is not None
            effective = ev.activity.effective_pct if ev.telemetry.status == "measured" else None
            for (ns, wl), share, memory_mib in _shares(ev):
                a = acc[(ns, wl, profile)]
                held = hours * share
                a.held += held
                if memory_mib is not None and ev.telemetry.status == "measured":
                    a.memory_measured += held
                    a.memory_gib += hours * memory_mib / 1024
                if ev.state == "shared":
                    a.shared += held
                elif measured and ev.usage.util_pct is not None:
                    a.measured += held
                    a.busy += held * ev.usage.util_pct / 100
                    if ev.usage.util_pct < idle_threshold_pct:
                        a.idle += held
                if ev.state != "shared" and effective is not None:
                    a.effective_measured += held
                    a.effective += held * effective / 100
                if ev.telemetry.status != "measured":
                    a.unmeasured += held
    return [
        Line(
            namespace=ns,
            workload=wl,
            held_gpu_hours=a.held,
            shared_held_gpu_hours=a.shared,
            busy_gpu_hours=a.busy if a.measured else None,
            idle_share=a.idle / a.measured if a.measured else None,
            unmeasured_held_gpu_hours=a.unmeasured,
            mig_profile=profile,
            effective_gpu_hours=a.effective if a.effective_measured else None,
            effective_measured_held_gpu_hours=a.effective_measured,
            memory_gib_hours=a.memory_gib if a.memory_measured else None,
            memory_measured_held_gpu_hours=a.memory_measured,
        )
        for (ns, wl, profile), a in sorted(acc.items())
    ]


def effective_coverage(lines: Iterable[Line]) -> str:
    """The report's caveat line: over how much of the held time effective was measured (whole
    GPUs and MIG instances apart: an instance-hour is not a GPU-hour)."""
    parts = []
    chosen = list(lines)
    for unit, mig in (("GPU-hours", False), ("MIG instance-hours", True)):
        kind = [x for x in chosen if bool(x.mig_profile) == mig]
        if not kind and mig:
            continue
        measured = sum(x.effective_measured_held_gpu_hours for x in kind)
        held = sum(x.held_gpu_hours for x in kind)
        parts.append(f"effective measured over {measured:.3f} of {held:.3f} held {unit}")
    return (
        "; ".join(parts) + " (devices held alone whose dcgm-exporter exports a profiling field;"
        " never derived from busy)"
    )


CSV_HEADER = (
    "namespace",
    "workload",
    "mig_profile",
    "held_gpu_hours",
    "shared_held_gpu_hours",
    "unmeasured_held_gpu_hours",
    "busy_gpu_hours",
    "idle_share",
    "effective_gpu_hours",
    "effective_measured_held_gpu_hours",
    "memory_gib_hours",
    "memory_measured_held_gpu_hours",
)


def csv_rows(lines: Iterable[Line]) -> list[list[str]]:
    def num(x: float | None, digits: int = 4) -> str:
        return "" if x is None else f"{x:.{digits}f}"

    return [
        [
            line.namespace,
            line.workload,
            line.mig_profile,
            num(line.held_gpu_hours),
            num(line.shared_held_gpu_hours),
            num(line.unmeasured_held_gpu_hours),
            num(line.busy_gpu_hours),
            num(line.idle_share, 3),
            num(line.effective_gpu_hours),
            num(line.effective_measured_held_gpu_hours),
            num(line.memory_gib_hours),
            num(line.memory_measured_held_gpu_hours),
        ]
        for line in lines
    ]
