"""dcgm-exporter text → samples, against every genuine capture in shared/fixtures."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.dcgm import parse_exposition
from agents.events import ExporterClaim
from sim.exporter_rows import ExporterRow, render

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("GPUATTR_SHARED_DIR", ROOT.parent / "shared"))
VENDORED = ROOT / "tests" / "fixtures" / "dcgm-exporter"  # copies of shared/, with SOURCES.md
# Every genuine capture: the vendored copies, plus any newer one in shared/ beside the repo.
FIXTURES = sorted(
    {
        p.name: p
        for d in (VENDORED, SHARED / "fixtures" / "dcgm-exporter")
        for p in d.glob("*.prom")
    }.values(),
    key=lambda p: p.name,
)
GOLDEN = ROOT / "tests" / "golden" / "dcgm"


def test_fixtures_are_present() -> None:
    assert len(FIXTURES) >= 6, f"dcgm-exporter captures missing under {VENDORED}"


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_every_capture_parses_to_its_golden_samples(path: Path) -> None:
    result = parse_exposition(path.read_text(), node="node-1", ts_ms=1_700_000_000_000)
    assert result.rejected == ()
    got = orjson.loads(orjson.dumps([dataclasses.asdict(s) for s in result.samples]))
    golden = GOLDEN / f"{path.stem}.json"
    if os.environ.get("GPUATTR_REGEN_GOLDEN") == "1":
        golden.write_bytes(orjson.dumps(got, option=orjson.OPT_INDENT_2))
    assert got == orjson.loads(golden.read_bytes())


def parse_fixture(prefix: str) -> list:  # type: ignore[type-arg]
    path = next(p for p in FIXTURES if p.name.startswith(prefix))
    return list(parse_exposition(path.read_text(), node="n", ts_ms=1).samples)


def test_hand_checked_figures() -> None:
    (l4,) = parse_fixture("01")
    assert (l4.model, l4.util_pct, l4.xid, l4.exporter_claims) == ("NVIDIA L4", 0, None, ())
    assert l4.power_w == pytest.approx(16.365)
    (h100,) = parse_fixture("02")
    assert h100.exporter_claims == (ExporterClaim("default", "cuda-75454ffb9f-jpwkc", "cuda"),)
    assert h100.hostname == "cluster-tkr1341-ubu2204-1xh100-20c-np-lcqbg-49wfm-rhpj8"
    (a5000,) = parse_fixture("05")
    assert (a5000.fb_used_mib, a5000.exporter_claims) == (21383, ())
    migs = parse_fixture("04")
    assert [(s.gpu_index, s.mig_instance_id, s.mig_profile) for s in migs[:4]] == [
        (0, 3, "1g.6gb"),
        (0, 4, "1g.6gb"),
        (0, 5, "1g.6gb"),
        (0, 6, "1g.6gb"),
    ]
    shared, free = parse_fixture("06")
    assert [c.container for c in shared.exporter_claims] == ["ctr0", "ctr1"]
    assert shared.exporter_row_copies == 2
    assert free.exporter_claims == ()


def test_malformed_line_is_rejected_alone() -> None:
    lines = FIXTURES[0].read_text().splitlines()
    lines.insert(20, 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID= 12')
    result = parse_exposition("\n".join(lines) + "\n", node="n", ts_ms=1)
    assert [r.line_no for r in result.rejected] == [21]
    assert len(result.samples) == 1
    assert result.samples[0].util_pct == 0


def test_lowercase_hostname_and_copies_not_summed() -> None:
    rows = [
        ExporterRow(
            0,
            "GPU-1",
            "T4",
            "h",
            pod=("ns", f"p{i}", "c"),
            extra_labels=(("vgpu", str(i)),),
            values=(("DCGM_FI_DEV_GPU_UTIL", 30),),
        )
        for i in range(4)
    ]
    text = render(rows).replace('Hostname="h"', 'hostname="node-9"')
    (sample,) = parse_exposition(text, node="n", ts_ms=1).samples
    assert sample.util_pct == 30
    assert sample.hostname == "node-9"
    assert [c.vgpu for c in sample.exporter_claims] == ["0", "1", "2", "3"]
    assert sample.exporter_row_copies == 4


def test_rows_without_uuid_are_rejected() -> None:
    result = parse_exposition('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 5\n', node="n", ts_ms=1)
    assert result.samples == ()
    assert [r.reason for r in result.rejected] == ["row without UUID"]


@settings(max_examples=200)
@given(st.text(max_size=300))
def test_garbage_never_raises(text: str) -> None:
    result = parse_exposition(text, node="n", ts_ms=1)
    assert isinstance(result.rejected, tuple)


def test_per_process_rows_are_recognised_and_left_out() -> None:
    rows = [
        ExporterRow(
            0,
            "GPU-1",
            "T4",
            "h",
            pod=("ns", f"p{i}", "c"),
            values=(("DCGM_FI_DEV_GPU_UTIL", 10.0 * (i + 1)), ("DCGM_FI_DEV_GPU_TEMP", 40.0)),
        )
        for i in range(3)
    ]
    (sample,) = parse_exposition(render(rows), node="n", ts_ms=1).samples
    assert sample.exporter_split_fields == ("util_pct",)
    assert sample.util_pct is None  # 10/20/30 per process: not a device-wide reading
    assert sample.temp_c == 40  # identical copies stay
    assert len(sample.exporter_claims) == 3
