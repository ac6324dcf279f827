"""dcgm-exporter's per-pod rows (``--kubernetes-virtual-gpus``, 4.5.3-4.8.2 and later): per-pod
measurements, told apart from the device-wide row.

A helper of :mod:`agents.dcgm.translate` (nothing else should import it). In that mode the
exporter prints, for ``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_FB_USED`` only, the device's own
row first, unchanged and without pod labels, then one row per listed (pod, container, device ID)
with the pod's processes summed (NVML's per-process SM utilisation and framebuffer), keyed by
pod UID: a pod holding two replicas, or two containers on the GPU, prints the same value twice
(``vgpu="0"``, ``vgpu="1"``; dcgm-exporter issue #725), and a listed pod with no process reads
``0``. On a MIG instance NVML samples no per-process utilisation, so those rows read ``0``
without measuring anything: only memory is a reading there. Every other field is printed as
identical copies per pod and is not this module's.

So a device is read in that mode when one of those two fields has both a row without pod
labels and rows with them (``auto``); a setting can force either reading (``on``: pod-labelled
rows of those fields are per-pod readings, ``off``: they are copies of a device-wide value, as
older exporters print them). The per-pod rows then leave the device-wide reading alone and
become one :class:`~contract.inputs.PodUsage` per pod UID, copies taken once, never added up.
A row that cannot be credited honestly — no ``pod_uid``, one that is not a UUID, a negative
value, copies of one pod that disagree — is rejected with its reason, never read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from agents.dcgm.fields import FIELDS
from agents.dcgm.rows import MetricRow, RejectedLine
from contract.inputs import DeviceUsage, ExporterClaim, PodUsage

#: how pod-labelled rows of the per-process fields are read (the agent's setting)
PerPodRows = Literal["auto", "on", "off"]
#: the fields the exporter measures per process and sums per pod
PER_POD_FIELDS = frozenset({"util_pct", "fb_used_mib"})

NO_POD_UID = "per-pod row without pod_uid: cannot be credited"
BAD_POD_UID = "per-pod row whose pod_uid is not a UUID"
NEGATIVE = "per-pod row with a negative value"
COPIES_DISAGREE = "per-pod copies of one pod disagree: no reading for that pod"
UNMAPPED = (
    "every per-pod row reads 0 while the device works: the exporter maps no process to a pod "
    "(it needs hostPID and its pod informer)"
)
#: framebuffer the driver itself may report in use on a GPU without processes, in MiB
UNMAPPED_FB_MIB = 256

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(slots=True)
class _Pod:
    """One pod UID's rows of one device while they are read."""

    claim: ExporterClaim
    values: dict[str, list[MetricRow]] = field(default_factory=dict)


def split_rows(
    rows: Sequence[MetricRow],
    claim_of: Callable[[MetricRow], ExporterClaim | None],
    *,
    mig: bool,
    mode: PerPodRows,
    rejected: list[RejectedLine],
) -> tuple[Sequence[MetricRow], DeviceUsage | None]:
    """The rows that carry device-wide values, and the device's per-pod readings (``None``
    when the rows are not per-pod readings). Refused rows are added to ``rejected``."""
    if mode == "off":
        return rows, None
    per_pod: list[tuple[MetricRow, ExporterClaim]] = []
    bare: set[str] = set()
    device_rows: list[MetricRow] = []
    for row in rows:
        attr = FIELDS.get(row.name)
        claim = claim_of(row) if attr in PER_POD_FIELDS else None
        if claim is None:
            device_rows.append(row)
            if attr in PER_POD_FIELDS:
                bare.add(row.name)
        else:
            per_pod.append((row, claim))
    if not per_pod or (mode == "auto" and not bare & {row.name for row, _ in per_pod}):
        return rows, None
    if _unmapped(per_pod, device_rows):
        rejected.extend(RejectedLine.at(r.line_no, r.line, UNMAPPED) for r, _ in per_pod)
        return device_rows, DeviceUsage(source="exporter", unread=UNMAPPED)
    return device_rows, DeviceUsage(source="exporter", pods=_pods(per_pod, mig, rejected))


def _unmapped(
    per_pod: Sequence[tuple[MetricRow, ExporterClaim]], device_rows: Sequence[MetricRow]
) -> bool:
    """Every per-pod row reads 0 while the device's own rows show work or memory in use: the
    exporter could not map any process to a pod (no ``hostPID``, or no pod informer), and its
    zeros are no measurement."""
    if any(row.value != 0 for row, _ in per_pod):
        return False
    device = {FIELDS[r.name]: r.value for r in device_rows if FIELDS.get(r.name) in PER_POD_FIELDS}
    return device.get("util_pct", 0) > 0 or device.get("fb_used_mib", 0) > UNMAPPED_FB_MIB


def _pods(
    rows: Sequence[tuple[MetricRow, ExporterClaim]], mig: bool, rejected: list[RejectedLine]
) -> tuple[PodUsage, ...]:
    pods: dict[str, _Pod] = {}
    for row, claim in rows:
        uid = (claim.pod_uid or "").strip().lower()
        reason = (
            NO_POD_UID
            if not uid
            else BAD_POD_UID
            if not _UUID.fullmatch(uid)
            else NEGATIVE
            if row.value < 0
            else None
        )
        if reason is not None:
            rejected.append(RejectedLine.at(row.line_no, row.line, reason))
            continue
        pod = pods.setdefault(uid, _Pod(claim))
        pod.values.setdefault(FIELDS[row.name], []).append(row)
    return tuple(_usage(uid, pods[uid], mig, rejected) for uid in sorted(pods))


def _usage(uid: str, pod: _Pod, mig: bool, rejected: list[RejectedLine]) -> PodUsage:
    readings: dict[str, float | None] = {}
    for attr, copies in pod.values.items():
        finite = [row.value for row in copies if row.value == row.value]  # NaN: rejected earlier
        if len(set(finite)) > 1:
            rejected.extend(RejectedLine.at(r.line_no, r.line, COPIES_DISAGREE) for r in copies)
            readings[attr] = None
        else:
            readings[attr] = finite[0] if finite else None
    return PodUsage(
        pod_uid=uid,
        namespace=pod.claim.namespace,
        pod=pod.claim.pod,
        container=pod.claim.container,
        fb_used_mib=readings.get("fb_used_mib"),
        sm_util_pct=None if mig else readings.get("util_pct"),
        copies=max(len(copies) for copies in pod.values.values()),
    )
