"""Translate dcgm-exporter's Prometheus exposition text into one sample per device per scrape.

The only module that gives meaning to dcgm-exporter's metric lines (reading the text itself is
:mod:`agents.dcgm.rows`, with prometheus_client's parser; its field table and units are
:mod:`agents.dcgm.fields`, a helper of this module). Rows are grouped per device —
``(UUID, GPU_I_ID)`` — because the exporter may print one device several times: once per pod
with ``--kubernetes-virtual-gpus`` (a ``vgpu`` label), or once per consuming container on a
DRA-shared GPU. Those copies carry the *same* device-wide value: it is taken once, never added
up, and the pods they name become the sample's ``exporter_claims`` — what the exporter says,
not our attribution.

Exporters from 4.5.3-4.8.2 in that mode also print ``DCGM_FI_DEV_GPU_UTIL`` and
``DCGM_FI_DEV_FB_USED`` per pod, measured from its processes, beside the device's own row:
:mod:`agents.dcgm.perpod` reads those rows into the sample's ``usage`` and keeps the device row
as the device-wide value. Rows of one device that carry *different* values in any other way are
no device-wide reading: the field is left ``None`` and named in ``exporter_split_fields`` rather
than picking one pod's share. Identical copies (the usual case) never trigger this.

Labels read: ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname`` (or the
newer ``hostname``), ``DCGM_FI_DRIVER_VERSION``, MIG ``GPU_I_ID``/``GPU_I_PROFILE``, and the pod
labels ``namespace``/``pod``/``container`` (or ``exported_*`` after Prometheus relabelling, when
the plain ones are the exporter's own pod's and are not read),
``pod_uid`` and ``vgpu``, and with ``--kubernetes-enable-dra`` ``dra_claim_name``,
``dra_claim_namespace``, ``dra_driver_name``, ``dra_pool_name``, ``dra_device_name``,
``dra_mig_profile`` and ``dra_mig_device_uuid``. With ``--use-old-namespace`` (still documented
upstream) the UUID label is ``uuid`` and the pod labels ``pod_namespace``/``pod_name``/
``container_name`` (older builds:
``pod_container_name``); that mode usually goes with the 1.x counters file, whose families are
named ``dcgm_gpu_utilization``, ``dcgm_fb_used``, … — both namings are read.

Which field is which attribute, and in what unit, is :mod:`agents.dcgm.fields`: utilization,
framebuffer, power and temperatures, the profiling ratios (SM, tensor, DRAM, graphics engine;
per MIG instance too), the SM clock, the XID, the row-remap failure flag, the clock-event
reasons bitmask, and the cumulative counters (PCIe replays, double-bit ECC, remapped rows,
throttling time), read as the totals the exporter sends. What a counter did since the previous
scrape is not this module's: the collector asks :mod:`agents.dcgm.counters`.

Every label is cut to the contract's size at the edge (:func:`agents.bounds.bounded`, counted).

Nothing is dropped without a trace: a line that cannot be read is rejected with its reason
(:class:`RejectedLine`), and a family that is read but not used — another exporter's metric on
the same page, a DCGM field we do not map — is listed in ``ParseResult.ignored`` with its reason,
for the collector to count and log once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agents.bounds import bounded_map, oversized
from agents.dcgm.fields import FIELDS, as_bitmask, as_flag, as_us, as_xid
from agents.dcgm.perpod import PerPodRows, split_rows
from agents.dcgm.rows import MetricRow, RejectedLine, read_rows
from contract.inputs import DcgmSample, ExporterClaim
from contract.records import replace

__all__ = [
    "FIELDS",
    "IgnoredFamily",
    "ParseResult",
    "PerPodRows",
    "RejectedLine",
    "parse_exposition",
]

DCGM_PREFIXES = ("DCGM_FI_", "dcgm_")
UUID_LABELS = ("UUID", "uuid")  # uuid: --use-old-namespace
#: (namespace, pod, container, pod_uid, vgpu labels), the first set naming a pod wins. Prometheus
#: with honor_labels=false renames the exporter's own ``namespace``/``pod``/``container`` to
#: ``exported_*`` and writes its target's (the exporter's own pod) under the plain names, so the
#: ``exported_*`` set comes first and the plain one is not read on a relabelled page
#: (:func:`_relabelled`); ``--use-old-namespace`` labels clash with no target label.
_EXPORTED_LABELS = (
    "exported_namespace",
    "exported_pod",
    ("exported_container",),
    ("exported_pod_uid", "pod_uid"),
    ("vgpu",),
)
_OLD_NAMESPACE_LABELS = (  # --use-old-namespace: container_name (4.x), pod_container_name (older)
    "pod_namespace",
    "pod_name",
    ("container_name", "pod_container_name"),
    ("pod_uid",),
    ("vgpu",),
)
_PLAIN_LABELS = ("namespace", "pod", ("container",), ("pod_uid",), ("vgpu",))
_RELABELLED_MARKS = ("exported_namespace", "exported_pod", "exported_container")
NOT_DCGM = "not a DCGM field"
NOT_USED = "a DCGM field gpuattr does not use"
NO_UUID = "row without UUID label"
BAD_MIG_ID = "GPU_I_ID is not an integer of at most 9 digits"
NOT_FINITE = "value is not a finite number (NaN or infinity): no reading"

DeviceKey = tuple[str, int | None]  # (UUID, GPU_I_ID)


@dataclass(frozen=True, slots=True)
class IgnoredFamily:
    """A metric family that was read but not used, and why."""

    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class ParseResult:
    samples: tuple[DcgmSample, ...]
    rejected: tuple[RejectedLine, ...]
    ignored: tuple[IgnoredFamily, ...] = ()


def parse_exposition(
    text: str, *, node: str, ts_ms: int, per_pod: PerPodRows = "auto"
) -> ParseResult:
    """One :class:`DcgmSample` per GPU or MIG instance, and the lines that could not be used.

    Never raises on bad input: a malformed line is rejected alone and every other device still
    yields its sample. ``node`` is the agent's node name (authoritative); the exporter's own
    ``Hostname`` label goes to ``DcgmSample.hostname``. ``per_pod`` says how pod-labelled rows
    of the per-process fields are read (:mod:`agents.dcgm.perpod`).
    """
    rows, rejected = read_rows(text)
    rows = [_bounded(row) for row in rows]
    devices: dict[DeviceKey, list[MetricRow]] = {}
    ignored: dict[str, str] = {}
    for row in rows:
        if not row.name.startswith(DCGM_PREFIXES):
            ignored.setdefault(row.name, NOT_DCGM)  # e.g. another exporter on the same page
            continue
        if row.name not in FIELDS:
            ignored.setdefault(row.name, NOT_USED)  # its device still gets a sample
        elif not math.isfinite(row.value):  # refused here, counted: the field reads as absent
            rejected.append(RejectedLine.at(row.line_no, row.line, NOT_FINITE))
        key = _device_key(row, rejected)
        if key is not None:
            devices.setdefault(key, []).append(row)
    relabelled = _relabelled(rows)
    samples = tuple(
        _sample(key, group, node, ts_ms, relabelled, per_pod, rejected)
        for key, group in devices.items()
    )
    return ParseResult(
        samples,
        tuple(sorted(rejected, key=lambda r: r.line_no)),
        tuple(IgnoredFamily(name, why) for name, why in sorted(ignored.items())),
    )


def _bounded(row: MetricRow) -> MetricRow:
    """The row with its labels cut to the contract's size (``contract.bounds``): a label of any
    length would ride on every record made from it (a ~560 KB ``Hostname`` has been seen)."""
    if not oversized(row.labels):
        return row
    return replace(row, labels=bounded_map(row.labels, "dcgm-exporter label"))


def _device_key(row: MetricRow, rejected: list[RejectedLine]) -> DeviceKey | None:
    uuid = next((row.labels[label] for label in UUID_LABELS if row.labels.get(label)), "")
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


def _dra(labels: Mapping[str, str]) -> dict[str, str | None]:
    """The DRA labels of ``--kubernetes-enable-dra``: claim, device, MIG profile and UUID."""
    claim, claim_ns = labels.get("dra_claim_name"), labels.get("dra_claim_namespace")
    device = [labels.get(f"dra_{k}_name") for k in ("driver", "pool", "device")]
    return {
        "dra_claim": f"{claim_ns or ''}/{claim}" if claim else None,
        "dra_device": "/".join(d or "" for d in device) if all(device) else None,
        "dra_mig_profile": labels.get("dra_mig_profile") or None,
        "dra_mig_uuid": labels.get("dra_mig_device_uuid") or None,
    }


def _relabelled(rows: Sequence[MetricRow]) -> bool:
    """Whether Prometheus relabelled this page (honor_labels=false: a federated or read-back
    scrape): a row carries an ``exported_*`` pod label, so every plain ``namespace``/``pod``/
    ``container`` on the page is a target label, the exporter's own pod, never a holder."""
    return any(row.labels.get(mark) for row in rows for mark in _RELABELLED_MARKS)


def _claim(labels: Mapping[str, str], relabelled: bool) -> ExporterClaim | None:
    """The pod the exporter stamped on this row; a row with an empty pod label claims nothing
    (a DRA claim label without a pod credits no pod either: kept on the pod's claim only)."""
    sets = (_EXPORTED_LABELS, _OLD_NAMESPACE_LABELS, *(() if relabelled else (_PLAIN_LABELS,)))
    for ns, pod, containers, pod_uids, vgpus in sets:
        if labels.get(pod):
            return ExporterClaim(
                namespace=labels.get(ns, ""),
                pod=labels[pod],
                container=_first(labels, containers),
                pod_uid=_first(labels, pod_uids) or None,
                vgpu=_first(labels, vgpus) or None,
                **_dra(labels),
            )
    return None


def _first(labels: Mapping[str, str], names: Sequence[str]) -> str:
    return next((labels[n] for n in names if labels.get(n)), "")


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


def _sample(
    key: DeviceKey,
    rows: Sequence[MetricRow],
    node: str,
    ts_ms: int,
    relabelled: bool,
    per_pod: PerPodRows,
    rejected: list[RejectedLine],
) -> DcgmSample:
    uuid, mig_instance_id = key
    labels = rows[0].labels  # identity labels are the same on every row of a device
    device_rows, usage = split_rows(
        rows,
        lambda row: _claim(row.labels, relabelled),
        mig=mig_instance_id is not None,
        mode=per_pod,
        rejected=rejected,
    )
    values, split = _readings(device_rows)
    claims = (_claim(row.labels, relabelled) for row in rows)
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
        xid=as_xid(values.get("xid")),
        exporter_claims=tuple(dict.fromkeys(c for c in claims if c is not None)),
        exporter_split_fields=split,
        sm_active=values.get("sm_active"),
        sm_occupancy=values.get("sm_occupancy"),
        tensor_active=values.get("tensor_active"),
        dram_active=values.get("dram_active"),
        mem_copy_util_pct=values.get("mem_copy_util_pct"),
        memory_temp_c=values.get("memory_temp_c"),
        sm_clock_mhz=values.get("sm_clock_mhz"),
        row_remap_failure=as_flag(values.get("row_remap_failure")),
        clock_event_reasons=as_bitmask(values.get("clock_event_reasons")),
        pcie_replays=values.get("pcie_replays"),
        ecc_dbe_volatile=values.get("ecc_dbe_volatile"),
        uncorrectable_remapped_rows=values.get("uncorrectable_remapped_rows"),
        correctable_remapped_rows=values.get("correctable_remapped_rows"),
        power_violation_us=as_us(values.get("power_violation_us")),
        thermal_violation_us=as_us(values.get("thermal_violation_us")),
        usage=usage,
    )
