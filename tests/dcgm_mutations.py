"""The genuine dcgm-exporter captures, mutated line by line, for the dcgm fuzz tests.

Label values replaced, values made NaN/Inf/huge/garbage, lines deleted or duplicated, garbage
inserted, the body cut at any character — remembering which lines are still genuine and which
GPUs' lines were touched. Also the known-malformed lines every exposition parser must refuse,
and the properties any parse result must have.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from agents.dcgm.rows import (
    MALFORMED_COMMENT,
    MALFORMED_SAMPLE,
    NO_FINAL_LINE_FEED,
    VALUE_OUT_OF_RANGE,
)
from agents.dcgm.translate import BAD_MIG_ID, NO_UUID, NOT_FINITE, ParseResult, parse_exposition

FIXTURES = sorted((Path(__file__).resolve().parent / "fixtures" / "dcgm-exporter").glob("*.prom"))
CAPTURES = {p.name: p.read_text() for p in FIXTURES}
NODE, TS = "gpu-node-1", 1_700_000_000_000
REASONS = {
    MALFORMED_SAMPLE,
    MALFORMED_COMMENT,
    VALUE_OUT_OF_RANGE,
    NO_FINAL_LINE_FEED,
    NO_UUID,
    BAD_MIG_ID,
    NOT_FINITE,
}
UUID_RE = re.compile(r'UUID="([^"]*)"')
LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
#: Lines every exposition parser must refuse (checked alone in
#: tests/unit/test_fuzz_dcgm_parse.py).
MALFORMED = [
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x" 5',
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x"} abc',
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-zz} 5',
    '{gpu="0"} 5',
    "DCGM_FI_DEV_GPU_UTIL",
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x"} 0x10',
    'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-x",UUID="GPU-y"} 1',
    'DCGM_FI_DEV_FB_USED{gpu="0",pod="a"} 5',
    'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-q",GPU_I_ID="x"} 5',
    "# TYPE",
    "# TYPE DCGM_FI_DEV_GPU_UTIL bogus",
]
VALUES = ["NaN", "+Inf", "-Inf", "-0", "1e308", "1" * 30, "1e-320", "abc", "", "0x1p3", "5e"]


def parse(text: str) -> ParseResult:
    return parse_exposition(text, node=NODE, ts_ms=TS)


def check_result(text: str, result: ParseResult) -> None:
    """What holds for any input: no exception (we got here), sane samples and rejections."""
    n_lines = len(text.split("\n"))
    assert [r.line_no for r in result.rejected] == sorted(r.line_no for r in result.rejected)
    for bad in result.rejected:
        assert 1 <= bad.line_no <= n_lines
        assert bad.reason in REASONS
        assert len(bad.line) <= 200
    keys = [(s.uuid, s.mig_instance_id) for s in result.samples]
    assert len(keys) == len(set(keys)), "one sample per device"
    for s in result.samples:
        assert s.uuid
        assert s.node == NODE
        assert s.ts_ms == TS
        assert (s.mig_profile is None) or (s.mig_instance_id is not None)
        for split in s.exporter_split_fields:
            assert getattr(s, split) is None  # per-process values are never a device reading


@dataclass
class Line:
    text: str
    genuine: bool  # an untouched line of the capture


def _with_label(line: str, key: str, value: str) -> str:
    return LABEL_RE.sub(lambda m: f'{key}="{value}"' if m[1] == key else m[0], line)


@st.composite
def mutated_captures(draw: st.DrawFn) -> tuple[str, str, list[Line], set[str], bool]:
    """(capture name, mutated text, its lines, UUIDs whose lines were touched, cut mid-line)."""
    name = draw(st.sampled_from(sorted(CAPTURES)))
    original = CAPTURES[name].split("\n")
    if original[-1] == "":
        original.pop()
    lines = [Line(t, True) for t in original]
    all_uuids = sorted({u for t in original for u in UUID_RE.findall(t)})
    touched: set[str] = set()
    junk = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\n\r"), max_size=60)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["label", "value", "delete", "duplicate", "insert", "malformed"]))
        i = draw(st.integers(0, len(lines)))
        if op in ("insert", "malformed"):
            new = draw(st.sampled_from(MALFORMED)) if op == "malformed" else draw(junk)
            if new.lstrip().startswith("#") and op == "insert":
                new = "x" + new  # a random HELP/TYPE line may legitimately retype a family
            lines.insert(i, Line(new, False))
            continue
        if i == len(lines) or lines[i].text.startswith("#") or not lines[i].text.strip():
            continue
        line = lines[i]
        touched.update(UUID_RE.findall(line.text))
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, Line(line.text, False))
            line.genuine = False
        elif op == "value":
            head = line.text.rsplit(" ", 1)[0]
            line.text, line.genuine = f"{head} {draw(st.sampled_from(VALUES))}", False
        else:
            labels = LABEL_RE.findall(line.text)
            if not labels:
                continue
            key, _ = draw(st.sampled_from(labels))
            value = draw(st.one_of(st.sampled_from(all_uuids), junk)).replace('"', '\\"')
            line.text = _with_label(line.text, key, value)
            line.genuine = False
        for later in lines:
            if not later.genuine:
                touched.update(UUID_RE.findall(later.text))
    text = "".join(f"{line.text}\n" for line in lines)
    cut = draw(st.one_of(st.none(), st.integers(0, len(text))))
    cut_mid_line = False
    if cut is not None:
        kept = text[:cut]
        whole = kept.count("\n")
        cut_mid_line = not kept.endswith("\n") and bool(kept)
        for line in lines[whole:]:
            touched.update(UUID_RE.findall(line.text))
        lines = lines[: whole + (1 if cut_mid_line else 0)]
        if cut_mid_line:
            lines[-1] = Line(lines[-1].text, False)
        text = kept
    for line in lines:
        if not line.genuine:
            touched.update(u for u in all_uuids if u in line.text)
    return name, text, lines, touched, cut_mid_line
