"""dcgm-exporter's ``--kubernetes-virtual-gpus`` mode with per-process values (4.5.3-4.8.2 and
later), as the exporter double prints it.

Upstream (``internal/pkg/transformation/kubernetes.go``, ``process_metrics.go``) rewrites every
device that the kubelet lists for at least one pod; a device nobody is listed for keeps its
plain rows. For the two fields NVML measures per process, ``DCGM_FI_DEV_GPU_UTIL`` (SM
utilisation) and ``DCGM_FI_DEV_FB_USED`` (MiB), the device's own row stays first, unchanged and
without pod labels, and one row per listed (pod, container, device ID) follows with that pod's
processes summed, as an integer, labelled ``pod_uid`` always and ``vgpu`` for a ``::n`` replica.
The value is keyed by pod UID, so a pod listed twice (two replicas, two containers) prints the
same figure twice, and a listed pod without a process reads ``0``. On a MIG instance NVML samples
no per-process utilisation: its per-pod ``GPU_UTIL`` rows read ``0`` and only memory is real.
Every other field's device row is replaced by one identical copy per listed entry, with ``vgpu``
and, only with ``--kubernetes-enable-pod-uid``, ``pod_uid``.

The agent has to tell those two kinds of rows apart (:mod:`agents.dcgm.perpod`); a double that
printed anything simpler would let a wrong reading pass its tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
#: the fields upstream measures per process (``isPerProcessMetric``), in field-id order
PER_PROCESS_FIELDS = (GPU_UTIL, FB_USED)

Values = tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class ListedPod:
    """One (pod, container, device ID) the kubelet lists for a device, with the figures of the
    pod's own processes on it (what NVML would sum for its UID)."""

    namespace: str
    pod: str
    container: str
    pod_uid: str
    vgpu: str = ""  # the device ID's ``::n`` replica number; "" for a device handed out whole
    sm_util_pct: float = 0.0
    fb_used_mib: float = 0.0

    def labels(self, with_uid: bool) -> tuple[tuple[str, str], ...]:
        """The attributes the exporter adds beside ``container``, ``namespace`` and ``pod``."""
        uid = (("pod_uid", self.pod_uid),) if with_uid else ()
        return uid + ((("vgpu", self.vgpu),) if self.vgpu else ())


@dataclass(frozen=True, slots=True)
class PrintedRow:
    """One row the mode prints for a device: its pod (``None``: the device's own row), the
    attributes added beside the pod labels, and its values."""

    pod: ListedPod | None
    attributes: tuple[tuple[str, str], ...]
    values: Values


def printed_rows(
    values: Values, listed: Sequence[ListedPod], *, mig: bool, pod_uid_label: bool
) -> list[PrintedRow]:
    """What the exporter prints for a device with ``values`` and ``listed`` pods (at least one):
    the per-process fields' device row, their per-pod rows, then the copies of every other
    field (:func:`sim.exporter_rows.render` lays them out per family)."""
    device = dict(values)
    measured = [f for f in PER_PROCESS_FIELDS if f in device and math.isfinite(device[f])]
    others = tuple((f, v) for f, v in values if f not in PER_PROCESS_FIELDS)
    own = [
        PrintedRow(
            entry, entry.labels(with_uid=True), tuple((f, _own(entry, f, mig)) for f in measured)
        )
        for entry in listed
    ]
    copies = [PrintedRow(entry, entry.labels(with_uid=pod_uid_label), others) for entry in listed]
    return [PrintedRow(None, (), tuple((f, device[f]) for f in measured)), *own, *copies]


def _own(entry: ListedPod, field: str, mig: bool) -> float:
    """The pod's figure for a per-process field: whole numbers, as upstream formats its sums."""
    if field == GPU_UTIL:
        return 0.0 if mig else float(round(entry.sm_util_pct))
    return float(round(entry.fb_used_mib))
