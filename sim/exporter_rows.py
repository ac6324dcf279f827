"""Rows of a simulated dcgm-exporter scrape, and their rendering in the exporter's 4.x format."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# (field, HELP text, TYPE, rendered as float) in DCGM field-id order, as the exporter prints them
FAMILIES: tuple[tuple[str, str, str, bool], ...] = (
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gauge", False),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "gauge", True),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "gauge", False),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "gauge", False),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "gauge", False),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "gauge", False),
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "Ratio of time the graphics engine is active.",
        "gauge",
        True,
    ),
)


@dataclass(frozen=True, slots=True)
class ExporterRow:
    """One device as one exporter row set: identity labels, optional pod labels, values."""

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


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels(row: ExporterRow) -> str:
    pairs = [("gpu", str(row.gpu)), ("UUID", row.uuid)]
    if row.pci_bus_id:
        pairs.append(("pci_bus_id", row.pci_bus_id))
    pairs += [("device", row.device or f"nvidia{row.gpu}"), ("modelName", row.model)]
    if row.mig_instance_id is not None:
        pairs += [("GPU_I_PROFILE", row.mig_profile or ""), ("GPU_I_ID", str(row.mig_instance_id))]
    pairs += [("Hostname", row.hostname), ("DCGM_FI_DRIVER_VERSION", row.driver_version)]
    if row.pod is not None:
        ns, pod, ctr = row.pod
        pairs += [("container", ctr), ("namespace", ns), ("pod", pod)]
    pairs += list(row.extra_labels)
    return ",".join(f'{k}="{_esc(v)}"' for k, v in pairs)


def render(rows: Sequence[ExporterRow]) -> str:
    """The text a dcgm-exporter ``/metrics`` would answer for these rows."""
    out: list[str] = []
    for name, help_text, kind, is_float in FAMILIES:
        lines = []
        for row in rows:
            value = dict(row.values).get(name)
            if value is None:
                continue  # the exporter skips a field with no value (blank XID, MIG GPU_UTIL...)
            text = f"{value:f}" if is_float else str(round(value))
            lines.append(f"{name}{{{labels(row)}}} {text}")
        if lines:
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *lines]
    return "\n".join(out) + "\n"
