"""dcgm-exporter fields → sample attributes: every field in both namings, with its unit and scope.

The capture test reads its expectations from the capture text itself (field name → attribute,
the value as the line has it, converted where the unit differs), written here independently of
``agents.dcgm.fields``: a mapped field present in a capture that is not read, read into the wrong
attribute or device, or in the wrong unit fails it. Then both namings field by field, the flag
and bitmask rules, copies and per-process splits of the new fields, and the codec round trip of
a scrape carrying them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.dcgm.fields import FIELDS
from agents.dcgm.translate import NOT_USED
from contract import codec
from contract.inputs import DcgmSample, DcgmScrape, SinceLast
from tests.dcgm_captures import FIXTURES, GPU, fixture, parse, row


def _flag(text: str) -> bool:
    return float(text) != 0


def _ns_as_us(text: str) -> float:
    return float(text) / 1000


def _int(text: str) -> int:
    return int(text)


#: field → (attribute, the value a line's text must become), both namings
READ: dict[str, tuple[str, Callable[[str], Any]]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("util_pct", float),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine_active", float),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", float),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy", float),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active", float),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active", float),
    "DCGM_FI_DEV_FB_USED": ("fb_used_mib", float),
    "DCGM_FI_DEV_FB_FREE": ("fb_free_mib", float),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_copy_util_pct", float),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", float),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", float),
    "DCGM_FI_DEV_MEMORY_TEMP": ("memory_temp_c", float),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", float),
    "DCGM_FI_DEV_XID_ERRORS": ("xid", _int),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("row_remap_failure", _flag),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clock_event_reasons", _int),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clock_event_reasons", _int),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie_replays", float),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_dbe_volatile", float),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("uncorrectable_remapped_rows", float),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("correctable_remapped_rows", float),
    "DCGM_FI_DEV_POWER_VIOLATION": ("power_violation_us", _ns_as_us),
    "DCGM_FI_DEV_THERMAL_VIOLATION": ("thermal_violation_us", _ns_as_us),
    # etc/1.x-compatibility-metrics.csv (go-dcgm's legacy names)
    "dcgm_gpu_utilization": ("util_pct", float),
    "dcgm_fi_prof_gr_engine_active": ("gr_engine_active", float),
    "dcgm_fi_prof_sm_active": ("sm_active", float),
    "dcgm_fi_prof_sm_occupancy": ("sm_occupancy", float),
    "dcgm_fi_prof_pipe_tensor_active": ("tensor_active", float),
    "dcgm_fi_prof_dram_active": ("dram_active", float),
    "dcgm_fb_used": ("fb_used_mib", float),
    "dcgm_fb_free": ("fb_free_mib", float),
    "dcgm_mem_copy_utilization": ("mem_copy_util_pct", float),
    "dcgm_power_usage": ("power_w", float),
    "dcgm_gpu_temp": ("temp_c", float),
    "dcgm_memory_temp": ("memory_temp_c", float),
    "dcgm_sm_clock": ("sm_clock_mhz", float),
    "dcgm_xid_errors": ("xid", _int),
    "dcgm_pcie_replay_counter": ("pcie_replays", float),
    "dcgm_ecc_dbe_volatile_total": ("ecc_dbe_volatile", float),
    "dcgm_power_violation": ("power_violation_us", _ns_as_us),
    "dcgm_thermal_violation": ("thermal_violation_us", _ns_as_us),
}
#: DCGM fields in the captures that gpuattr does not use (reported as ignored)
NOT_READ = {
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
}
LINE_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\} (\S+)$")
LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def test_every_mapped_field_has_an_expectation_here() -> None:
    assert {name: attr for name, (attr, _) in READ.items()} == dict(FIELDS)


def _lines(path: Path) -> list[tuple[str, dict[str, str], str]]:
    """(field, labels, value text) of every sample line of a capture."""
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        match = LINE_RE.match(line)
        assert match, line
        out.append((match[1], dict(LABEL_RE.findall(match[2])), match[3]))
    return out


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_every_field_in_a_capture_is_read_with_its_unit_and_scope(path: Path) -> None:
    result = parse(path.read_text())
    by_key = {(s.uuid, s.mig_instance_id): s for s in result.samples}
    read: set[str] = set()
    for field, labels, text in _lines(path):
        assert field in READ or field in NOT_READ, f"{field}: neither read nor listed as unused"
        if field not in READ:
            continue
        attr, expected = READ[field]
        mig = labels.get("GPU_I_ID")
        key = (labels.get("UUID") or labels["uuid"], None if mig is None else int(mig))
        assert getattr(by_key[key], attr) == expected(text), (field, key)
        read.add(field)
    present_unused = {f for f, _, _ in _lines(path)} & NOT_READ
    assert {(f.name, f.reason) for f in result.ignored} == {(f, NOT_USED) for f in present_unused}
    assert read or path.stem.startswith("06"), "a capture with nothing read checks nothing"


def test_the_fields_the_issue_names_are_read_from_the_genuine_captures() -> None:
    (l4,) = parse(fixture("01").read_text()).samples
    assert (l4.dram_active, l4.tensor_active, l4.gr_engine_active) == (0, 0, 0)
    assert (l4.memory_temp_c, l4.sm_clock_mhz, l4.mem_copy_util_pct) == (0, 210, 0)
    assert (l4.pcie_replays, l4.uncorrectable_remapped_rows, l4.correctable_remapped_rows) == (
        0,
        0,
        0,
    )
    assert l4.row_remap_failure is False  # a reading, not None
    assert (l4.sm_active, l4.clock_event_reasons, l4.power_violation_us) == (None, None, None)
    assert l4.since_last is None  # the translator reads totals; increases are the collector's

    (h100,) = parse(fixture("02").read_text()).samples
    assert (h100.sm_clock_mhz, h100.memory_temp_c, h100.mem_copy_util_pct) == (1755, 0, 0)

    migs = parse(fixture("04").read_text()).samples  # the device's clock, on each instance's key
    assert [(s.uuid[:12], s.mig_instance_id, s.sm_clock_mhz) for s in migs] == [
        ("GPU-265c9814", 3, 1440),
        ("GPU-265c9814", 4, 1440),
        ("GPU-265c9814", 5, 1440),
        ("GPU-265c9814", 6, 1440),
        ("GPU-2d20791a", 3, 1440),
        ("GPU-2d20791a", 4, 1440),
    ]


# -- both namings, field by field --------------------------------------------------------------

OLD_GPU = {"gpu": "0", "uuid": "GPU-1", "device": "nvidia0", "modelName": "Tesla T4"}
#: the Prometheus type each field is declared with upstream (counters change how names parse)
COUNTER_FIELDS = {
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "dcgm_pcie_replay_counter",
    "dcgm_ecc_dbe_volatile_total",
    "dcgm_power_violation",
    "dcgm_thermal_violation",
}
VALUE_TEXT = {
    "xid": "43",
    "row_remap_failure": "1",
    "clock_event_reasons": "72",  # SW thermal + HW slowdown bits
    "power_violation_us": "2500000",
    "thermal_violation_us": "1500",
}


@pytest.mark.parametrize("field", sorted(READ), ids=str)
def test_each_field_in_its_naming(field: str) -> None:
    attr, expected = READ[field]
    text = VALUE_TEXT.get(attr, "0.625" if "prof" in field.lower() else "37")
    labels = OLD_GPU if field.startswith("dcgm_") else GPU
    kind = "counter" if field in COUNTER_FIELDS else "gauge"
    (sample,) = parse(f"# TYPE {field} {kind}\n" + row(field, text, **labels)).samples
    assert getattr(sample, attr) == expected(text)
    assert sample.uuid == "GPU-1"


def test_throttling_nanoseconds_become_microseconds() -> None:
    text = row("DCGM_FI_DEV_POWER_VIOLATION", "2500000", **GPU)
    text += row("DCGM_FI_DEV_THERMAL_VIOLATION", "999", **GPU)
    (sample,) = parse(text).samples
    assert (sample.power_violation_us, sample.thermal_violation_us) == (2500, 0.999)


@pytest.mark.parametrize(
    ("value", "flag"),
    [("0", False), ("1", True), ("2", True), ("0.000000", False), ("NaN", None)],
    ids=["zero", "one", "nonzero", "zero-as-double", "nan-no-reading"],
)
def test_row_remap_failure_flag(value: str, flag: bool | None) -> None:
    (sample,) = parse(row("DCGM_FI_DEV_ROW_REMAP_FAILURE", value, **GPU)).samples
    assert sample.row_remap_failure is flag


@pytest.mark.parametrize(
    ("value", "mask"),
    [
        ("0", 0),
        ("72", 72),
        ("9223372036854774784", 2**63 - 1024),  # the largest float below 2^63
        ("9223372036854775808", None),  # 2^63: beyond what the wire carries
        ("-1", None),
        ("4.5", None),
        ("NaN", None),
        ("+Inf", None),
    ],
    ids=["zero", "bits", "largest", "2^63", "negative", "fraction", "nan", "inf"],
)
def test_clock_event_reasons_bitmask(value: str, mask: int | None) -> None:
    (sample,) = parse(row("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", value, **GPU)).samples
    assert sample.clock_event_reasons == mask


def test_new_fields_copies_taken_once_and_per_process_values_left_out() -> None:
    text = "".join(
        row(name, value(i), **GPU, container="c", namespace="ns", pod=f"p{i}")
        for name, value in (
            ("DCGM_FI_PROF_SM_ACTIVE", lambda i: "0.5"),
            ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", lambda i: "12"),
            ("DCGM_FI_PROF_DRAM_ACTIVE", lambda i: f"0.{i + 1}"),
            ("DCGM_FI_DEV_ROW_REMAP_FAILURE", lambda i: str(i)),
        )
        for i in range(3)
    )
    (sample,) = parse(text).samples
    assert (sample.sm_active, sample.pcie_replays) == (0.5, 12)  # not 1.5 / 36
    assert (sample.dram_active, sample.row_remap_failure) == (None, None)
    assert sample.exporter_split_fields == ("dram_active", "row_remap_failure")


def test_both_names_of_the_clock_event_reasons_agree_or_split() -> None:
    same = row("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "4", **GPU)
    same += row("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "4", **GPU)
    (sample,) = parse(same).samples
    assert (sample.clock_event_reasons, sample.exporter_split_fields) == (4, ())


def test_a_scrape_with_the_new_fields_and_since_last_round_trips_the_codec() -> None:
    (l4,) = parse(fixture("01").read_text()).samples
    with_counters = DcgmSample(
        **{
            **{name: getattr(l4, name) for name in l4.__struct_fields__},
            "sm_active": 0.03,
            "clock_event_reasons": 2**63 - 1024,
            "power_violation_us": 2500.0,
            "since_last": SinceLast(
                15_000, pcie_replays=3.0, power_violation_us=0.5, resets=("ecc_dbe_volatile",)
            ),
        }
    )
    scrape = DcgmScrape("node-1", l4.ts_ms, (l4, with_counters), "http://x:9400/metrics", "")
    assert codec.decode(codec.encode(scrape)) == scrape
