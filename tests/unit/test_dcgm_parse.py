"""dcgm-exporter text → samples: golden tests on every genuine capture, and the hard cases.

The captures live in ``shared/fixtures/dcgm-exporter`` beside the repository (or under
``$GPUATTR_SHARED_DIR``); ``tests/fixtures/dcgm-exporter`` keeps copies so the suite also runs
from a bare checkout. Golden samples are in ``tests/golden/dcgm/<capture>.json``; rewrite them
with ``GPUATTR_REGEN_GOLDEN=1`` and check the diff by hand.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.dcgm.rows import (
    MALFORMED_COMMENT,
    MALFORMED_SAMPLE,
    MAX_LINE_CHARS,
    NO_FINAL_LINE_FEED,
)
from agents.dcgm.translate import ParseResult, parse_exposition
from contract.inputs import DcgmSample, ExporterClaim

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(
    os.environ.get("GPUATTR_SHARED_DIR") or Path(__file__).resolve().parents[3] / "shared"
)
SHARED_FIXTURES = SHARED / "fixtures" / "dcgm-exporter"
VENDORED_FIXTURES = REPO / "tests" / "fixtures" / "dcgm-exporter"
GOLDEN = REPO / "tests" / "golden" / "dcgm"
REGEN = os.environ.get("GPUATTR_REGEN_GOLDEN") == "1"


def _fixtures() -> list[Path]:
    """Every capture by name; the shared copy wins over the vendored one."""
    found = {p.name: p for d in (VENDORED_FIXTURES, SHARED_FIXTURES) for p in d.glob("*.prom")}
    return [found[name] for name in sorted(found)]


FIXTURES = _fixtures()
#: Devices (GPUs or MIG instances) in each capture, counted by hand.
EXPECTED_SAMPLES = {
    "01-kops-l4-full-scrape-no-holder": 1,
    "02-vks-h100-vgpu-full-scrape-pod-attributed": 1,
    "03-gpu-operator-340-t4-pod-attributed-excerpt": 1,
    "04-dcgm-exporter-317-a30-mig-instances-excerpt": 6,  # gpu 0: GI 3..6, gpu 1: GI 3, 4
    "05-dcgm-exporter-363-a5000-no-pod-labels": 1,
    "06-dcgm-exporter-pr570-gh200-dra-shared-and-free": 2,
}
TS = 1_700_000_000_000


def parse(text: str) -> ParseResult:
    return parse_exposition(text, node="node-1", ts_ms=TS)


def fixture(prefix: str) -> Path:
    return next(p for p in FIXTURES if p.name.startswith(prefix))


def as_json(samples: tuple[DcgmSample, ...]) -> Any:
    return orjson.loads(orjson.dumps([dataclasses.asdict(s) for s in samples]))


def golden(name: str, got: Any) -> Any:
    """The golden JSON for ``name``; with GPUATTR_REGEN_GOLDEN=1, (re)written from ``got`` first."""
    path = GOLDEN / f"{name}.json"
    if REGEN:
        path.write_bytes(orjson.dumps(got, option=orjson.OPT_INDENT_2) + b"\n")
    return orjson.loads(path.read_bytes())


def row(name: str, value: str, **labels: str) -> str:
    """One exposition line, labels in the order given."""
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{text}}} {value}\n"


GPU = {"gpu": "0", "UUID": "GPU-1", "device": "nvidia0", "modelName": "Tesla T4", "Hostname": "h"}


# -- the genuine captures ------------------------------------------------------------------------


def test_all_captures_are_found() -> None:
    assert [p.stem for p in FIXTURES] == sorted(EXPECTED_SAMPLES), (
        f"captures under {SHARED_FIXTURES} / {VENDORED_FIXTURES} differ from the expected set: "
        "a new capture needs its sample count here and a golden file"
    )


def test_vendored_copies_match_the_shared_captures() -> None:
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(f"no shared captures at {SHARED_FIXTURES}")
    for copy in VENDORED_FIXTURES.glob("*.prom"):
        original = SHARED_FIXTURES / copy.name
        if original.exists():
            assert copy.read_bytes() == original.read_bytes(), copy.name


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_capture_parses_to_its_golden_samples(path: Path) -> None:
    result = parse(path.read_text())
    assert result.rejected == ()
    assert len(result.samples) == EXPECTED_SAMPLES[path.stem]
    got = as_json(result.samples)
    assert got == golden(path.stem, got)


def test_hand_checked_figures() -> None:
    (l4,) = parse(fixture("01").read_text()).samples
    assert (l4.model, l4.gpu_index, l4.driver_version) == ("NVIDIA L4", 0, "580.105.08")
    assert (l4.util_pct, l4.gr_engine_active, l4.fb_used_mib, l4.fb_free_mib) == (0, 0, 0, 22563)
    assert (l4.power_w, l4.temp_c, l4.xid, l4.exporter_claims) == (16.365, 31, None, ())

    (h100,) = parse(fixture("02").read_text()).samples
    assert h100.exporter_claims == (ExporterClaim("default", "cuda-75454ffb9f-jpwkc", "cuda"),)
    assert h100.hostname == "cluster-tkr1341-ubu2204-1xh100-20c-np-lcqbg-49wfm-rhpj8"
    assert (h100.xid, h100.fb_free_mib, h100.power_w) == (0, 19762, None)  # no power row sent

    (t4,) = parse(fixture("03").read_text()).samples
    assert t4.hostname == "nvidia-dcgm-exporter-ml2wh"  # the exporter pod's name, not the node
    assert (t4.pci_bus_id, t4.driver_version, t4.fb_free_mib) == ("", "", 15109)

    migs = parse(fixture("04").read_text()).samples
    assert [(s.gpu_index, s.mig_instance_id, s.mig_profile) for s in migs] == [
        (0, 3, "1g.6gb"),
        (0, 4, "1g.6gb"),
        (0, 5, "1g.6gb"),
        (0, 6, "1g.6gb"),
        (1, 3, "1g.6gb"),
        (1, 4, "1g.6gb"),
    ]

    (a5000,) = parse(fixture("05").read_text()).samples
    assert (a5000.fb_used_mib, a5000.util_pct, a5000.exporter_claims) == (21383, 0, ())

    shared, free = parse(fixture("06").read_text()).samples
    assert [(c.namespace, c.pod, c.container) for c in shared.exporter_claims] == [
        ("gpu-test2", "pod", "ctr0"),
        ("gpu-test2", "pod", "ctr1"),
    ]
    assert (len(shared.exporter_claims), shared.pci_bus_id) == (2, "00000009:01:00.0")
    assert free.exporter_claims == ()


# -- one bad line is rejected alone ----------------------------------------------------------------


def test_malformed_line_in_the_middle_of_fixture_01() -> None:
    text = fixture("01").read_text()
    lines = text.splitlines(keepends=True)
    lines.insert(20, 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID= 12\n')
    result = parse("".join(lines))
    assert [(r.line_no, r.reason) for r in result.rejected] == [(21, MALFORMED_SAMPLE)]
    assert result.rejected[0].line == 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID= 12'
    assert result.samples == parse(text).samples  # the whole sample, every field still read


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_a_garbage_line_anywhere_costs_only_that_line(path: Path) -> None:
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    clean = parse(text).samples
    for at in sorted({1, len(lines) // 2, len(lines)}):
        broken = [
            *lines[: at - 1],
            'DCGM_FI_DEV_FB_USED{UUID="x" 1 2 3 garbage\n',
            *lines[at - 1 :],
        ]
        result = parse("".join(broken))
        assert [r.line_no for r in result.rejected] == [at]
        assert result.samples == clean


def test_malformed_type_line_is_rejected_and_the_samples_still_read() -> None:
    text = (
        fixture("05")
        .read_text()
        .replace("# TYPE DCGM_FI_DEV_FB_USED gauge", "# TYPE DCGM_FI_DEV_FB_USED")
    )
    result = parse(text)
    assert [(r.line_no, r.reason) for r in result.rejected] == [(5, MALFORMED_COMMENT)]
    assert result.samples == parse(fixture("05").read_text()).samples


def test_a_body_cut_mid_line_rejects_the_cut_line() -> None:
    text = fixture("01").read_text()
    cut = text[: text.index("} 22563") + 5]  # FB_FREE's value cut to "225"
    result = parse(cut)
    assert [(r.line_no, r.reason) for r in result.rejected] == [(36, NO_FINAL_LINE_FEED)]
    (sample,) = result.samples
    assert (sample.util_pct, sample.fb_free_mib, sample.fb_used_mib) == (0, None, None)


def test_rows_without_uuid_are_rejected_with_their_line() -> None:
    text = row("DCGM_FI_DEV_GPU_UTIL", "5", gpu="1") + row("DCGM_FI_DEV_GPU_UTIL", "7", **GPU)
    result = parse(text)
    assert [(r.line_no, r.reason) for r in result.rejected] == [(1, "row without UUID label")]
    assert [(s.uuid, s.util_pct) for s in result.samples] == [("GPU-1", 7)]


def test_non_integer_mig_instance_is_rejected() -> None:
    text = row("DCGM_FI_DEV_FB_USED", "5", **GPU, GPU_I_PROFILE="1g.6gb", GPU_I_ID="x")
    result = parse(text)
    assert (result.samples, [r.line_no for r in result.rejected]) == ((), [1])


def test_long_rejected_lines_are_truncated() -> None:
    result = parse("x" * 1000 + "{\n")
    assert len(result.rejected[0].line) == MAX_LINE_CHARS


# -- labels and values -----------------------------------------------------------------------------


def test_lowercase_hostname_label_is_accepted() -> None:
    labels = {**GPU, "hostname": "node-9"}
    del labels["Hostname"]
    (sample,) = parse(row("DCGM_FI_DEV_GPU_TEMP", "40", **labels)).samples
    assert (sample.hostname, sample.temp_c) == ("node-9", 40)


def test_virtual_gpu_copies_are_one_sample_with_values_taken_once() -> None:
    text = "".join(
        row(name, value, **GPU, container="c", namespace="ns", pod=f"p{i}", vgpu=str(i))
        for name, value in (("DCGM_FI_DEV_GPU_UTIL", "30"), ("DCGM_FI_DEV_FB_USED", "1000"))
        for i in range(4)
    )
    (sample,) = parse(text).samples
    assert (sample.util_pct, sample.fb_used_mib) == (30, 1000)  # not 120 / 4000
    assert sample.exporter_claims == tuple(
        ExporterClaim("ns", f"p{i}", "c", vgpu=str(i)) for i in range(4)
    )
    assert (len(sample.exporter_claims), sample.exporter_split_fields) == (4, ())


def test_exported_pod_labels_and_pod_uid() -> None:
    text = row(
        "DCGM_FI_DEV_GPU_UTIL",
        "1",
        **GPU,
        exported_container="c",
        exported_namespace="ns",
        exported_pod="p",
        pod_uid="",
    ) + row("DCGM_FI_DEV_GPU_UTIL", "1", **GPU, container="d", namespace="ns", pod="q", pod_uid="u")
    (sample,) = parse(text).samples
    assert sample.exporter_claims == (
        ExporterClaim("ns", "p", "c", pod_uid=None),
        ExporterClaim("ns", "q", "d", pod_uid="u"),
    )


def test_empty_pod_label_is_no_claim() -> None:
    text = row("DCGM_FI_DEV_GPU_UTIL", "1", **GPU, container="", namespace="", pod="")
    (sample,) = parse(text).samples
    assert sample.exporter_claims == ()


def test_nan_is_no_reading_and_unknown_fields_are_ignored() -> None:
    text = (
        row("DCGM_FI_DEV_GPU_UTIL", "NaN", **GPU)
        + row("DCGM_FI_DEV_SM_CLOCK", "1440", **GPU)
        + row("DCGM_FI_DEV_XID_ERRORS", "43", **GPU)
        + row("go_goroutines", "7")
    )
    (sample,) = parse(text).samples
    assert (sample.util_pct, sample.xid) == (None, 43)


def test_per_process_rows_are_recognised_and_left_out() -> None:
    text = "".join(
        row(name, value(i), **GPU, container="c", namespace="ns", pod=f"p{i}")
        for name, value in (
            ("DCGM_FI_DEV_GPU_UTIL", lambda i: str(10 * (i + 1))),
            ("DCGM_FI_DEV_GPU_TEMP", lambda i: "40"),
        )
        for i in range(3)
    )
    (sample,) = parse(text).samples
    assert sample.exporter_split_fields == ("util_pct",)
    assert sample.util_pct is None  # 10/20/30 per process: not a device-wide reading
    assert sample.temp_c == 40  # identical copies stay
    assert len(sample.exporter_claims) == 3


# -- garbage never raises --------------------------------------------------------------------------

FIXTURE_LINES = sorted({line for p in FIXTURES for line in p.read_text().splitlines()})


@st.composite
def mangled_exposition(draw: st.DrawFn) -> str:
    """Lines of the real captures, some cut, spliced or sprinkled with odd characters."""
    lines = draw(st.lists(st.sampled_from(FIXTURE_LINES), max_size=12))
    out = []
    for line in lines:
        start = draw(st.integers(0, len(line)))
        end = draw(st.integers(start, len(line)))
        noise = draw(st.text(alphabet='{}",=# \t\\\nNaE+-.0123456789', max_size=4))
        out.append(draw(st.sampled_from([line, line[:start] + noise + line[end:]])))
    return "\n".join(out) + draw(st.sampled_from(["", "\n"]))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=400), mangled_exposition()))
def test_garbage_never_raises(text: str) -> None:
    result = parse(text)
    n_lines = text.count("\n") + 1
    assert all(1 <= r.line_no <= n_lines for r in result.rejected)
    assert all(len(r.line) <= MAX_LINE_CHARS for r in result.rejected)
    assert len({(s.uuid, s.mig_instance_id) for s in result.samples}) == len(result.samples)
