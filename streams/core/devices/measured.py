"""Per-process readings joined with a device's holders: who is credited with what the hardware
measured per pod. Pure, and the only place it is decided.

A reading names a pod by UID (the exporter's ``pod_uid`` label, or the pod cgroup of the
process NVML listed). It is credited to a pod only when our own join (PodResources x pod watch)
finds a pod of that very UID holding the device at the reading's time: an exporter label or a
cgroup path is evidence to check, never the attribution. Otherwise the reading is listed as
uncredited with its reason — its pod holds no slot here (a process on a GPU its pod was not
given, or the exporter's per-replica rows of another pod), our join does not know the holder's
UID yet, or the process belongs to no pod at all (an orphan: its PID and container ID).

The source decides what a holder without a reading means. dcgm-exporter lists every pod the
kubelet gave the device, a pod without a process reading ``0``, so a missing holder was not
read. NVML lists every process on the device, so a holder none of whose processes is there
uses nothing: ``0`` — unless a process could not be placed (an orphan), which might be it.

The device-wide figure stays the event's ``usage``; nothing here divides it.
"""

from __future__ import annotations

from collections.abc import Sequence

from contract.inputs import DeviceUsage, PodUsage, ProcessUsage
from contract.outputs import Measured, PerPodUsage, PodShare, UncreditedReading, UncreditedReason
from contract.records import replace


def credit(
    usage: DeviceUsage, pods: Sequence[PodShare], is_mig: bool
) -> tuple[tuple[PodShare, ...], PerPodUsage]:
    """The pods' shares with what was measured for each, and how the readings were joined."""
    if usage.unread:
        return tuple(pods), PerPodUsage(usage.source, unread=usage.unread)
    by_uid = {p.uid: p for p in pods if p.uid}
    unresolved = {(p.namespace, p.pod) for p in pods if not p.uid}
    measured: dict[str, Measured] = {}
    uncredited: list[UncreditedReading] = []
    for reading in usage.pods:
        if reading.pod_uid in by_uid:
            measured[reading.pod_uid] = Measured(
                usage.source, reading.fb_used_mib, None if is_mig else reading.sm_util_pct
            )
        elif (reading.namespace, reading.pod) in unresolved:
            uncredited.append(_uncredited("holder-uid-unknown", reading))
        else:
            uncredited.append(_uncredited("not-a-holder", reading))
    uncredited.extend(_orphan(process) for process in usage.orphans)
    absent = _absent(usage, is_mig)
    credited = tuple(_with(p, measured.get(p.uid) if p.uid else None, absent) for p in pods)
    return credited, PerPodUsage(
        usage.source,
        credited=sum(p.measured is not None for p in credited),
        uncredited=tuple(uncredited),
    )


def _absent(usage: DeviceUsage, is_mig: bool) -> Measured | None:
    """What a holder none of whose processes was read measured: nothing, where the source lists
    every process and placed them all; else it was not read."""
    if usage.source != "nvml" or usage.orphans:
        return None
    return Measured(usage.source, 0.0, None if is_mig else 0.0)


def _with(pod: PodShare, measured: Measured | None, absent: Measured | None) -> PodShare:
    if measured is None and (absent is None or not pod.uid):
        return pod
    return replace(pod, measured=measured or absent)


def _uncredited(reason: UncreditedReason, reading: PodUsage) -> UncreditedReading:
    return UncreditedReading(
        reason,
        pod_uid=reading.pod_uid,
        namespace=reading.namespace,
        pod=reading.pod,
        fb_used_mib=reading.fb_used_mib,
        sm_util_pct=reading.sm_util_pct,
    )


def _orphan(process: ProcessUsage) -> UncreditedReading:
    return UncreditedReading(
        "no-pod",
        pod_uid=process.pod_uid,
        pid=process.pid,
        container_id=process.container_id,
        fb_used_mib=process.fb_used_mib,
        sm_util_pct=process.sm_util_pct,
    )
