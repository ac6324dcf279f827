"""dcgm-exporter text → samples: golden tests on every genuine capture, and the hard cases.

Every capture parses to its golden samples with no rejected line; one bad line (garbage,
malformed ``# TYPE``, no UUID, a bad MIG instance, a body cut mid-line) is rejected alone and
costs only that line; garbage never raises. The captures and golden files are described in
``tests/dcgm_captures.py``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.dcgm.rows import MALFORMED_COMMENT, MALFORMED_SAMPLE, MAX_LINE_CHARS, NO_FINAL_LINE_FEED
from contract.inputs import ExporterClaim
from tests.dcgm_captures import (
    EXPECTED_SAMPLES,
    FIXTURES,
    GPU,
    SHARED_FIXTURES,
    VENDORED_FIXTURES,
    as_json,
    golden,
    parse,
    row,
)
from tests.dcgm_captures import fixture as fixture  # re-exported: test_exporter_render uses it

# -- the genuine captures ------------------------------------------------------------------------


def test_all_captures_are_found() -> None:
    assert [p.stem for p in FIXTURES] == sorted(EXPECTED_SAMPLES), (
        f"captures under {SHARED_FIXTURES} / {VENDORED_FIXTURES} differ from the expected set: "
        "a new capture needs its sample count here and a golden file"
    )


def test_vendored_copies_are_the_shared_captures_byte_for_byte() -> None:
    """The vendored captures are the genuine ones: their SHA-256 sums were recorded from
    ../shared/fixtures when they were copied (SHA256SUMS, beside them); where ../shared is
    present (a developer's checkout), every shared capture must be vendored and identical too."""
    recorded = dict(
        reversed(line.split(maxsplit=1))
        for line in (VENDORED_FIXTURES / "SHA256SUMS").read_text().splitlines()
    )
    vendored = {p.name: p for p in VENDORED_FIXTURES.glob("*.prom")}
    assert set(vendored) == set(recorded), "a vendored capture without a recorded sum (or gone)"
    for name, path in vendored.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == recorded[name], name
    for original in SHARED_FIXTURES.glob("*.prom"):  # nothing to compare outside a checkout
        assert original.name in vendored, f"{original.name} is not vendored"
        assert vendored[original.name].read_bytes() == original.read_bytes(), original.name


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
