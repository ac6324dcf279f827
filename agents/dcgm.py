"""Translate dcgm-exporter's Prometheus exposition text into one sample per device per scrape.

The only module that reads metric lines. Parsing uses prometheus_client's text parser. Rows
are grouped per device — ``(UUID, GPU_I_ID)`` — because the exporter may print one device
several times: once per pod with ``--kubernetes-virtual-gpus`` (a ``vgpu`` label) or once per
consuming container on DRA-shared GPUs. Those copies carry the *same* device-wide value: we keep
it once and never add copies up; the pods they name become ``exporter_claims``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from agents.events import DcgmSample, ExporterClaim

FIELDS: Mapping[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gr_engine_active",
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_FB_FREE": "fb_free_mib",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_GPU_TEMP": "temp_c",
    "DCGM_FI_DEV_XID_ERRORS": "xid",
}
_POD_LABELS = (
    ("namespace", "pod", "container"),
    ("exported_namespace", "exported_pod", "exported_container"),
)


@dataclass(frozen=True, slots=True)
class RejectedLine:
    line_no: int
    line: str
    reason: str


@dataclass(frozen=True, slots=True)
class ParseResult:
    samples: tuple[DcgmSample, ...]
    rejected: tuple[RejectedLine, ...]


Row = tuple[str, Mapping[str, str], float, int]  # metric name, labels, value, line number


def _rows(text: str) -> tuple[list[Row], list[RejectedLine]]:
    """Every sample of the text; a malformed line is rejected alone, the rest still parse."""
    try:
        return [
            (s.name, s.labels, s.value, 0)
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        ], []
    except (ValueError, IndexError, KeyError, TypeError):
        pass  # fall back to line by line to find the bad line(s)
    rows: list[Row] = []
    rejected: list[RejectedLine] = []
    for no, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            rows.extend(
                (s.name, s.labels, s.value, no)
                for fam in text_string_to_metric_families(line + "\n")
                for s in fam.samples
            )
        except (ValueError, IndexError, KeyError, TypeError) as exc:
            rejected.append(RejectedLine(no, line[:200], f"unparseable: {exc}"[:200]))
    return rows, rejected


def _claim(labels: Mapping[str, str]) -> ExporterClaim | None:
    for ns_key, pod_key, ctr_key in _POD_LABELS:
        if labels.get(pod_key):
            return ExporterClaim(
                labels.get(ns_key, ""),
                labels[pod_key],
                labels.get(ctr_key, ""),
                labels.get("pod_uid") or None,
                labels.get("vgpu") or None,
            )
    return None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


@dataclass
class _Device:
    labels: Mapping[str, str]
    values: dict[str, float | None] = field(default_factory=dict)
    split: set[str] = field(default_factory=set)
    copies: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    claims: dict[ExporterClaim, None] = field(default_factory=dict)

    def add(self, name: str, labels: Mapping[str, str], value: float) -> None:
        claim = _claim(labels)
        if claim is not None:
            self.claims.setdefault(claim, None)
        self.copies[name] += 1
        attr = FIELDS.get(name)
        if attr is None:
            return
        reading = None if math.isnan(value) else value
        if attr not in self.values:  # copies repeat one device-wide value: take it once
            self.values[attr] = reading
        elif self.values[attr] != reading and attr not in self.split:
            self.split.add(attr)  # per-process rows, not copies: no device-wide reading here

    def sample(self, node: str, ts_ms: int) -> DcgmSample:
        lb = self.labels
        v = {k: (None if k in self.split else x) for k, x in self.values.items()}
        xid = v.get("xid")
        return DcgmSample(
            node=node,
            ts_ms=ts_ms,
            uuid=lb["UUID"],
            gpu_index=_int(lb.get("gpu")),
            model=lb.get("modelName", ""),
            hostname=lb.get("Hostname") or lb.get("hostname", ""),
            device=lb.get("device", ""),
            pci_bus_id=lb.get("pci_bus_id", ""),
            driver_version=lb.get("DCGM_FI_DRIVER_VERSION", ""),
            mig_instance_id=_int(lb.get("GPU_I_ID")),
            mig_profile=lb.get("GPU_I_PROFILE") or None,
            util_pct=v.get("util_pct"),
            gr_engine_active=v.get("gr_engine_active"),
            fb_used_mib=v.get("fb_used_mib"),
            fb_free_mib=v.get("fb_free_mib"),
            power_w=v.get("power_w"),
            temp_c=v.get("temp_c"),
            xid=None if xid is None else int(xid),
            exporter_claims=tuple(self.claims),
            exporter_row_copies=max(self.copies.values(), default=1),
            exporter_split_fields=tuple(sorted(self.split)),
        )


def _devices(rows: list[Row], rejected: list[RejectedLine]) -> Iterator[_Device]:
    devices: dict[tuple[str, str], _Device] = {}
    for name, labels, value, no in rows:
        if not name.startswith("DCGM_FI_"):
            continue
        uuid = labels.get("UUID")
        if not uuid:
            rejected.append(RejectedLine(no, f"{name}{dict(labels)}"[:200], "row without UUID"))
            continue
        key = (uuid, labels.get("GPU_I_ID", ""))
        device = devices.get(key)
        if device is None:
            device = devices[key] = _Device(labels)
        device.add(name, labels, value)
    return iter(devices.values())


def parse_exposition(text: str, *, node: str, ts_ms: int) -> ParseResult:
    """One :class:`DcgmSample` per GPU or MIG instance, and the lines that could not be read."""
    rows, rejected = _rows(text)
    samples = tuple(d.sample(node, ts_ms) for d in _devices(rows, rejected))
    return ParseResult(samples, tuple(rejected))
