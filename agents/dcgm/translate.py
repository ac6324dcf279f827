"""Translate dcgm-exporter's Prometheus exposition text into one sample per device per scrape.

The only module that gives meaning to dcgm-exporter's metric lines (reading the text itself is
:mod:`agents.dcgm.rows`, with prometheus_client's parser). Rows are grouped per device —
``(UUID, GPU_I_ID)`` — because the exporter may print one device several times: once per pod
with ``--kubernetes-virtual-gpus`` (a ``vgpu`` label), or once per consuming container on a
DRA-shared GPU. Those copies carry the *same* device-wide value: it is taken once, never added
up, and the pods they name become the sample's ``exporter_claims`` — what the exporter says,
not our attribution.

Newer exporters can instead split ``DCGM_FI_DEV_GPU_UTIL``/``DCGM_FI_DEV_FB_USED`` per process,
so the rows of one device then carry *different* values. Such a field is not a device-wide
reading: it is left ``None`` and named in ``exporter_split_fields`` rather than picking one pod's
share. Identical copies (the usual case) never trigger this.

Labels read: ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname`` (or the
newer ``hostname``), ``DCGM_FI_DRIVER_VERSION``, MIG ``GPU_I_ID``/``GPU_I_PROFILE``, and the pod
labels ``namespace``/``pod``/``container`` (or ``exported_*`` after Prometheus relabelling),
``pod_uid`` and ``vgpu``. Other DCGM fields and labels are ignored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agents.dcgm.rows import MetricRow, RejectedLine, read_rows
from contract.inputs import DcgmSample, ExporterClaim

__all__ = ["FIELDS", "ParseResult", "RejectedLine", "parse_exposition"]

#: DCGM field → DcgmSample attribute. Units as the exporter sends them.
FIELDS: Mapping[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gr_engine_active",  # ratio 0-1, works per MIG instance
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_FB_FREE": "fb_free_mib",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_GPU_TEMP": "temp_c",
    "DCGM_FI_DEV_XID_ERRORS": "xid",  # the last XID seen, kept until the exporter restarts
}
_POD_LABEL_SETS = (  # (namespace, pod, container, pod_uid, vgpu)
    ("namespace", "pod", "container", "pod_uid", "vgpu"),
    ("exported_namespace", "exported_pod", "exported_container", "exported_pod_uid", "vgpu"),
)
NO_UUID = "row without UUID label"
BAD_MIG_ID = "GPU_I_ID is not an integer of at most 9 digits"

DeviceKey = tuple[str, int | None]  # (UUID, GPU_I_ID)


@dataclass(frozen=True, slots=True)
class ParseResult:
    samples: tuple[DcgmSample, ...]
    rejected: tuple[RejectedLine, ...]


def parse_exposition(text: str, *, node: str, ts_ms: int) -> ParseResult:
    """One :class:`DcgmSample` per GPU or MIG instance, and the lines that could not be used.

    Never raises on bad input: a malformed line is rejected alone and every other device still
    yields its sample. ``node`` is the agent's node name (authoritative); the exporter's own
    ``Hostname`` label goes to ``DcgmSample.hostname``.
    """
    rows, rejected = read_rows(text)
    devices: dict[DeviceKey, list[MetricRow]] = {}
    for row in rows:
        if not row.name.startswith("DCGM_FI_"):
            continue  # not a DCGM field (another exporter's metric on the same page)
        key = _device_key(row, rejected)
        if key is not None:
            devices.setdefault(key, []).append(row)
    samples = tuple(_sample(key, group, node, ts_ms) for key, group in devices.items())
    return ParseResult(samples, tuple(sorted(rejected, key=lambda r: r.line_no)))


def _device_key(row: MetricRow, rejected: list[RejectedLine]) -> DeviceKey | None:
    uuid = row.labels.get("UUID", "")
    if not uuid:
        rejected.append(RejectedLine.at(row.line_no, row.line, NO_UUID))
        return None
    mig_id = row.labels.get("GPU_I_ID")
    if mig_id is None or mig_id == "":
        return uuid, None
    parsed = _int(mig_id)
    if parsed is None:
        rejected.append(RejectedLine.at(row.line_no, row.line, BAD_MIG_ID))
        return None
    return uuid, parsed


def _int(text: str | None) -> int | None:
    """A label that is an index: 1-9 ASCII digits, else ``None`` (never a number we can't ship)."""
    text = (text or "").strip()
    return int(text) if text.isascii() and text.isdecimal() and len(text) <= 9 else None


def _claim(labels: Mapping[str, str]) -> ExporterClaim | None:
    """The pod the exporter stamped on this row; a row with an empty pod label claims nothing."""
    for ns, pod, container, pod_uid, vgpu in _POD_LABEL_SETS:
        if labels.get(pod):
            return ExporterClaim(
                namespace=labels.get(ns, ""),
                pod=labels[pod],
                container=labels.get(container, ""),
                pod_uid=labels.get(pod_uid) or None,
                vgpu=labels.get(vgpu) or None,
            )
    return None


def _readings(rows: Sequence[MetricRow]) -> tuple[dict[str, float | None], tuple[str, ...]]:
    """Each mapped field's value, taken once; fields whose copies disagree are left out."""
    values: dict[str, float | None] = {}
    split: set[str] = set()
    for row in rows:
        attr = FIELDS.get(row.name)
        if attr is None:
            continue
        reading = row.value if math.isfinite(row.value) else None  # NaN: no reading
        if attr not in values:
            values[attr] = reading
        elif values[attr] != reading:
            split.add(attr)  # per-process rows, not copies: no device-wide value
    for attr in split:
        values[attr] = None
    return values, tuple(sorted(split))


def _xid(value: float | None) -> int | None:
    """XID codes are small integers; a value outside 0..2^31 is not an XID and is dropped."""
    if value is None or not 0 <= value < 2**31:
        return None
    return int(value)


def _sample(key: DeviceKey, rows: Sequence[MetricRow], node: str, ts_ms: int) -> DcgmSample:
    uuid, mig_instance_id = key
    labels = rows[0].labels  # identity labels are the same on every row of a device
    values, split = _readings(rows)
    xid = values.get("xid")
    claims = (_claim(row.labels) for row in rows)
    return DcgmSample(
        node=node,
        ts_ms=ts_ms,
        uuid=uuid,
        gpu_index=_int(labels.get("gpu")),
        model=labels.get("modelName", ""),
        hostname=labels.get("Hostname") or labels.get("hostname", ""),
        device=labels.get("device", ""),
        pci_bus_id=labels.get("pci_bus_id", ""),
        driver_version=labels.get("DCGM_FI_DRIVER_VERSION", ""),
        mig_instance_id=mig_instance_id,
        mig_profile=None if mig_instance_id is None else labels.get("GPU_I_PROFILE") or None,
        util_pct=values.get("util_pct"),
        gr_engine_active=values.get("gr_engine_active"),
        fb_used_mib=values.get("fb_used_mib"),
        fb_free_mib=values.get("fb_free_mib"),
        power_w=values.get("power_w"),
        temp_c=values.get("temp_c"),
        xid=_xid(xid),
        exporter_claims=tuple(dict.fromkeys(c for c in claims if c is not None)),
        exporter_split_fields=split,
    )
