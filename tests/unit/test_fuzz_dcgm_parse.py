"""Fuzz dcgm-exporter text → samples (``agents.dcgm.translate.parse_exposition``).

Arbitrary text, exposition-shaped noise, and the genuine captures in
``tests/fixtures/dcgm-exporter`` mutated line by line (see ``tests/dcgm_mutations.py``).
``parse_exposition`` never raises; every GPU none of whose lines was touched still yields exactly
its original sample; every rejected line is one that was mutated, inserted or cut — and
known-malformed lines are always rejected. Every parsed sample can be published.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract import codec
from tests.dcgm_mutations import (
    CAPTURES,
    MALFORMED,
    VALUES,
    Line,
    check_result,
    mutated_captures,
    parse,
)


def test_malformed_templates_are_each_rejected() -> None:
    for line in MALFORMED:
        result = parse(f"{line}\n")
        assert result.samples == (), line
        assert [r.line_no for r in result.rejected] == [1], line


def test_genuine_captures_have_no_rejected_line() -> None:
    assert len(CAPTURES) >= 6
    for name, text in CAPTURES.items():
        result = parse(text)
        assert result.samples, name
        assert result.rejected == (), name


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=400))
def test_arbitrary_text_never_raises(text: str) -> None:
    check_result(text, parse(text))


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(
        st.one_of(
            st.sampled_from(MALFORMED),
            st.builds(
                lambda name, labels, value: f"{name}{{{labels}}} {value}",
                st.sampled_from(["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS", "x", ""]),
                st.lists(
                    st.builds(
                        lambda k, v: f'{k}="{v}"',
                        st.sampled_from(["UUID", "GPU_I_ID", "gpu", "pod", "namespace", "vgpu"]),
                        st.text(st.characters(exclude_characters='"\\\n'), max_size=10),
                    ),
                    max_size=4,
                ).map(",".join),
                st.sampled_from(VALUES),
            ),
            st.text(max_size=40),
        ),
        max_size=20,
    ),
    final_line_feed=st.booleans(),
)
def test_exposition_shaped_noise_never_raises(lines: list[str], final_line_feed: bool) -> None:
    text = "\n".join(lines) + ("\n" if final_line_feed else "")
    check_result(text, parse(text))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutated_captures())
def test_mutated_capture_keeps_every_untouched_gpu(
    case: tuple[str, str, list[Line], set[str], bool],
) -> None:
    name, text, lines, touched, _ = case
    result = parse(text)
    check_result(text, result)
    before = {(s.uuid, s.mig_instance_id): s for s in parse(CAPTURES[name]).samples}
    after = {(s.uuid, s.mig_instance_id): s for s in result.samples}
    for key, sample in before.items():
        if key[0] not in touched:
            assert after.get(key) == sample, f"untouched GPU {key} changed or vanished"
    for bad in result.rejected:
        assert not lines[bad.line_no - 1].genuine, f"untouched line {bad.line_no} rejected"
    for no, line in enumerate(lines, 1):
        if line.text in MALFORMED:
            assert no in {r.line_no for r in result.rejected}, f"line {no} {line.text!r} kept"


# --- found by fuzzing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-a"} 1e20',
        'DCGM_FI_DEV_GPU_UTIL{gpu="99999999999999999999",UUID="GPU-a"} 5',
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_ID="99999999999999999999"} 0.5',
    ],
    ids=["xid-1e20", "20-digit-gpu-index", "20-digit-gpu-instance"],
)
def test_every_parsed_sample_can_be_published(line: str) -> None:
    text = f'{line}\nDCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-b"}} 7\n'
    result = parse(text)
    assert len(result.samples) + len(result.rejected) >= 2
    for sample in result.samples:
        assert codec.decode(codec.encode(sample)) == sample
