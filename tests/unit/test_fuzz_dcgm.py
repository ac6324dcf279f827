"""Fuzz dcgm-exporter text → samples (``agents.dcgm.translate.parse_exposition``) and its collector.

Arbitrary text, and the genuine captures in ``tests/fixtures/dcgm-exporter`` mutated line by
line (label values replaced, values made NaN/Inf/huge/garbage, lines deleted or duplicated,
garbage inserted, the body cut at any character). ``parse_exposition`` never raises; every GPU
none of whose lines was touched still yields exactly its original sample; every rejected line
is one that was mutated, inserted or cut — and known-malformed lines are always rejected. The
collector counts each rejected line in ``gpuattr_agent_rejected_metric_lines_total`` and logs
it with its line number, reason and the exporter URL.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from agents.dcgm.collect import DcgmCollector
from agents.dcgm.rows import (
    MALFORMED_COMMENT,
    MALFORMED_SAMPLE,
    NO_FINAL_LINE_FEED,
    VALUE_OUT_OF_RANGE,
)
from agents.dcgm.translate import BAD_MIG_ID, NO_UUID, ParseResult, parse_exposition
from agents.types import AgentRecord
from contract import codec
from contract.inputs import DcgmSample
from tests.fuzz_strategies import captured

FIXTURES = sorted(
    (Path(__file__).resolve().parents[1] / "fixtures" / "dcgm-exporter").glob("*.prom")
)
CAPTURES = {p.name: p.read_text() for p in FIXTURES}
NODE, TS = "gpu-node-1", 1_700_000_000_000
REASONS = {
    MALFORMED_SAMPLE,
    MALFORMED_COMMENT,
    VALUE_OUT_OF_RANGE,
    NO_FINAL_LINE_FEED,
    NO_UUID,
    BAD_MIG_ID,
}
UUID_RE = re.compile(r'UUID="([^"]*)"')
LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
#: Lines every exposition parser must refuse (checked alone in a test below).
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


# --- the collector: rejections are counted and logged with their context ---------------------


class _Response:
    def __init__(self, body: bytes) -> None:
        self.status, self.reason, self._body = 200, "OK", body

    async def read(self) -> bytes:
        return self._body

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class _Session:
    """Just enough of ``aiohttp.ClientSession`` for ``DcgmCollector.scrape_once``."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def get(self, url: str, timeout: Any) -> _Response:
        return _Response(self.body)


def rejected_total() -> float:
    return REGISTRY.get_sample_value("gpuattr_agent_rejected_metric_lines_total") or 0.0


URL = "http://dcgm-exporter.test:9400/metrics"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutated_captures())
async def test_collector_counts_and_logs_every_rejected_line(
    case: tuple[str, str, list[Line], set[str], bool],
) -> None:
    _, text, _, _, _ = case
    expected = parse(text)
    published: list[AgentRecord] = []

    async def emit(record: AgentRecord) -> None:
        published.append(record)

    collector = DcgmCollector(
        node=NODE, url=URL, interval_s=5, timeout_s=1, emit=emit, now_ms=lambda: TS
    )
    before = rejected_total()
    with captured("agents.dcgm.collect") as logs:
        count = await collector.scrape_once(_Session(text.encode()))  # type: ignore[arg-type]
    assert rejected_total() - before == len(expected.rejected)
    assert count == len(published) == len(expected.samples)
    assert published == list(expected.samples)
    lines = [r for r in logs.records if "rejected dcgm-exporter line" in r.getMessage()]
    assert len(lines) == len(expected.rejected)  # every one, at WARNING or DEBUG
    warned = [r.getMessage() for r in lines if r.levelno == logging.WARNING]
    assert {r.reason for r in expected.rejected} == {
        reason for reason in REASONS if any(f": {reason}: " in m for m in warned)
    }
    for message in warned:
        assert URL in message
        assert re.search(r"line \d+ ", message)


async def test_invalid_utf8_is_counted_and_read_anyway() -> None:
    published: list[AgentRecord] = []

    async def emit(record: AgentRecord) -> None:
        published.append(record)

    text = CAPTURES[sorted(CAPTURES)[0]]
    body = text.encode().replace(b'modelName="', b'modelName="\xff\xfe', 1)
    collector = DcgmCollector(
        node=NODE, url=URL, interval_s=5, timeout_s=1, emit=emit, now_ms=lambda: TS
    )
    labels = {"source": "dcgm", "error": "encoding"}
    before = REGISTRY.get_sample_value("gpuattr_agent_source_errors_total", labels) or 0.0
    with captured("agents.dcgm.collect") as logs:
        assert await collector.scrape_once(_Session(body)) == 1  # type: ignore[arg-type]
    after = REGISTRY.get_sample_value("gpuattr_agent_source_errors_total", labels)
    assert after == before + 1
    assert any("invalid UTF-8" in m and URL in m for m in logs.messages(logging.WARNING))
    (sample,) = published
    assert isinstance(sample, DcgmSample)
    assert "\ufffd" in sample.model


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
