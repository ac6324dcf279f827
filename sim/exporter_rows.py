"""Rows of a simulated dcgm-exporter scrape, and their rendering in the exporter's 4.x text format.

No aiohttp here: scenario code builds :class:`ExporterRow` values, :mod:`sim.exporter_server`
serves :func:`render` of them over HTTP. The format follows the genuine captures in
``shared/fixtures/dcgm-exporter`` (01 and 02 are reproduced line for line by the tests):

- per family a ``# HELP`` and a ``# TYPE`` line, families in DCGM field-id order, a family with
  no value on any row left out entirely (as the exporter skips blank values);
- labels ``gpu,UUID,pci_bus_id,device,modelName,[GPU_I_PROFILE,GPU_I_ID,]Hostname,
  DCGM_FI_DRIVER_VERSION`` (``pci_bus_id`` and the driver version only when set: older
  exporters had neither), then the attributes — pod labels and ``extra_labels`` — sorted by
  name, as the exporter's template prints its attribute map (``container,namespace,pod``,
  ``container,dra_…,namespace,pod``, ``…,pod,pod_uid,vgpu``);
- ``%f`` for DCGM double fields, integers for int64 fields.

One device shared by several pods is several rows with the same ``uuid`` and different ``pod``:
the exporter repeats the device's row once per pod. A row that lists its device's pods
(``listed``) is printed as ``--kubernetes-virtual-gpus`` prints it (:mod:`sim.virtual_gpus`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sim.virtual_gpus import ListedPod, printed_rows


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    help: str
    type: str = "gauge"
    double: bool = False  # DCGM_FT_DOUBLE: printed with %f; int64 fields as integers


#: The fields the double can serve, in DCGM field-id order, HELP texts as the exporter sends them.
FAMILIES: tuple[Family, ...] = (
    Family("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."),
    Family("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz)."),
    # not in upstream's CSVs (its clock-events collector watches it): a user's line for it, with
    # DCGM's own description of field 112 (older name DCGM_FI_DEV_CLOCK_THROTTLE_REASONS)
    Family(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).",
    ),
    Family("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C)."),
    Family("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
    Family("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", double=True),
    Family(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        "counter",
    ),
    Family("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", "counter"),
    Family("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    Family("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."),
    Family("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %)."),
    Family("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %)."),
    Family("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."),
    # optional in etc/default-counters.csv; "(in ns)" since dcgm-exporter #589 (was "(in us)")
    Family(
        "DCGM_FI_DEV_POWER_VIOLATION",
        "Throttling duration due to power constraints (in ns).",
        "counter",
    ),
    Family(
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "Throttling duration due to thermal constraints (in ns).",
        "counter",
    ),
    Family("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    Family("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    Family("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB)."),
    Family(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Total number of double-bit volatile ECC errors.",
        "counter",
    ),
    Family(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for uncorrectable errors",
        "counter",
    ),
    Family(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for correctable errors",
        "counter",
    ),
    Family("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed"),
    Family(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "Total number of NVLink bandwidth counters for all lanes.",
        "counter",
    ),
    Family("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "vGPU License status"),
    Family(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", double=True
    ),
    Family(
        "DCGM_FI_PROF_SM_ACTIVE",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        double=True,
    ),
    Family(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "The ratio of number of warps resident on an SM.",
        double=True,
    ),
    Family(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        double=True,
    ),
    Family(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        double=True,
    ),
    Family(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and"
        " data payloads - in bytes per second.",
    ),
    Family(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "The rate of data received over the PCIe bus - including both protocol headers and"
        " data payloads - in bytes per second.",
    ),
)
_KNOWN = {f.name for f in FAMILIES}
_IDENTITY_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
_IDENTITY_LABELS |= {"DCGM_FI_DRIVER_VERSION", "GPU_I_PROFILE", "GPU_I_ID"}
_POD_LABELS = {"namespace", "pod", "container"}


@dataclass(frozen=True, slots=True)
class ExporterRow:
    """One device (or MIG instance) as one set of exporter rows: labels and DCGM field values.

    ``values`` maps DCGM field names (see :data:`FAMILIES`) to values; a field left out, or
    not finite, is not printed (the exporter skips blank values). ``device`` defaults to
    ``nvidia<gpu>``. ``listed``: the pods the kubelet lists for the device when the exporter
    runs with ``--kubernetes-virtual-gpus`` (then neither ``pod`` nor ``extra_labels``);
    ``pod_uid_label``: it also runs with ``--kubernetes-enable-pod-uid``.
    """

    gpu: int
    uuid: str
    model: str
    hostname: str
    pci_bus_id: str = ""
    device: str = ""
    driver_version: str = "580.95.05"
    mig_profile: str | None = None
    mig_instance_id: int | None = None
    pod: tuple[str, str, str] | None = None  # (namespace, pod, container)
    extra_labels: tuple[tuple[str, str], ...] = ()
    values: tuple[tuple[str, float], ...] = ()
    listed: tuple[ListedPod, ...] = ()
    pod_uid_label: bool = False

    def __post_init__(self) -> None:
        if not self.device:
            object.__setattr__(self, "device", f"nvidia{self.gpu}")
        unknown = sorted({name for name, _ in self.values} - _KNOWN)
        if unknown:
            raise ValueError(f"the exporter double cannot serve DCGM fields {unknown}")
        clash = {name for name, _ in self.extra_labels} & (_IDENTITY_LABELS | _POD_LABELS)
        if clash:
            raise ValueError(f"extra_labels repeat the row's own labels {sorted(clash)}")
        if self.listed and (self.pod is not None or self.extra_labels):
            raise ValueError("a row that lists its device's pods carries no pod labels itself")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def label_pairs(row: ExporterRow) -> list[tuple[str, str]]:
    """The row's labels in the order dcgm-exporter 4.x prints them."""
    pairs = [("gpu", str(row.gpu)), ("UUID", row.uuid)]
    if row.pci_bus_id:
        pairs.append(("pci_bus_id", row.pci_bus_id))
    pairs += [("device", row.device), ("modelName", row.model)]
    if row.mig_instance_id is not None:
        pairs += [("GPU_I_PROFILE", row.mig_profile or ""), ("GPU_I_ID", str(row.mig_instance_id))]
    pairs.append(("Hostname", row.hostname))
    if row.driver_version:
        pairs.append(("DCGM_FI_DRIVER_VERSION", row.driver_version))
    attributes = list(row.extra_labels)
    if row.pod is not None:
        namespace, pod, container = row.pod
        attributes += [("container", container), ("namespace", namespace), ("pod", pod)]
    return pairs + sorted(attributes)


def format_value(family: Family, value: float) -> str:
    return f"{value:f}" if family.double else str(round(value))


def expand(row: ExporterRow) -> list[ExporterRow]:
    """``row`` as the plain rows the exporter prints for it: itself, or, where it lists its
    device's pods, what ``--kubernetes-virtual-gpus`` makes of it."""
    if not row.listed:
        return [row]
    return [
        replace(
            row,
            listed=(),
            pod=None if p.pod is None else (p.pod.namespace, p.pod.pod, p.pod.container),
            extra_labels=p.attributes,
            values=p.values,
        )
        for p in printed_rows(
            row.values,
            row.listed,
            mig=row.mig_instance_id is not None,
            pod_uid_label=row.pod_uid_label,
        )
    ]


def render(rows: Sequence[ExporterRow]) -> str:
    """The text a dcgm-exporter ``/metrics`` would answer for these rows."""
    out: list[str] = []
    printed = [plain for row in rows for plain in expand(row)]
    labels = [",".join(f'{k}="{_escape(v)}"' for k, v in label_pairs(row)) for row in printed]
    values = [dict(row.values) for row in printed]
    for family in FAMILIES:
        lines = [
            f"{family.name}{{{text}}} {format_value(family, value)}"
            for text, row_values in zip(labels, values, strict=True)
            if (value := row_values.get(family.name)) is not None and math.isfinite(value)
        ]
        if lines:
            out += [f"# HELP {family.name} {family.help}", f"# TYPE {family.name} {family.type}"]
            out += lines
    return "".join(f"{line}\n" for line in out)
