"""The doctor's verdict lines (gpuattr/doctor/lines.py): text, JSON and the exit status."""

from __future__ import annotations

import orjson
import pytest

from gpuattr.doctor.lines import (
    Line,
    exit_status,
    fail,
    ok,
    render_json,
    render_text,
    skipped,
    warn,
)

GREEN = ok("kafka.connect", "connected", brokers=3)
RED = fail("kafka.topics", "missing: g.alerts", "run `gpuattr topics`", missing=["g.alerts"])
AMBER = warn("clock.skew", "cannot tell", "rerun closer")
SKIP = skipped("kafka.acls", "Kafka is not reachable")


@pytest.mark.parametrize(
    ("lines", "status"),
    [
        pytest.param([], 0, id="nothing"),
        pytest.param([GREEN], 0, id="green"),
        pytest.param([GREEN, AMBER, SKIP], 0, id="a-warning-alone-passes"),
        pytest.param([GREEN, RED], 1, id="one-failure"),
        pytest.param([RED, AMBER], 1, id="failure-and-warning"),
    ],
)
def test_exit_status(lines: list[Line], status: int) -> None:
    assert exit_status(lines) == status


@pytest.mark.parametrize("status", ["fail", "warn"])
def test_a_red_or_amber_line_must_carry_its_fix(status: str) -> None:
    with pytest.raises(ValueError, match="must say how to fix it"):
        Line("kafka.acls", status, "wrong")  # type: ignore[arg-type]


def test_text_one_line_per_check_aligned_then_the_count() -> None:
    assert render_text([GREEN, RED, AMBER, SKIP]).splitlines() == [
        "✓ kafka.connect  connected",
        "✗ kafka.topics   missing: g.alerts → fix: run `gpuattr topics`",
        "! clock.skew     cannot tell → fix: rerun closer",
        "- kafka.acls     not checked: Kafka is not reachable",
        "4 checks: 1 failed, 1 warnings",
    ]


def test_text_colours_only_the_mark_on_a_terminal() -> None:
    first = render_text([RED], colour=True).splitlines()[0]
    assert first.startswith("\x1b[31m✗\x1b[0m kafka.topics")
    assert "\x1b" not in render_text([RED])


def test_json_carries_every_check_its_fix_and_facts() -> None:
    report = orjson.loads(render_json("reader", [GREEN, RED, SKIP]))
    assert report == {
        "role": "reader",
        "ok": False,
        "checks": [
            {
                "check": "kafka.connect",
                "status": "ok",
                "said": "connected",
                "fix": None,
                "facts": {"brokers": 3},
            },
            {
                "check": "kafka.topics",
                "status": "fail",
                "said": "missing: g.alerts",
                "fix": "run `gpuattr topics`",
                "facts": {"missing": ["g.alerts"]},
            },
            {
                "check": "kafka.acls",
                "status": "skip",
                "said": "not checked: Kafka is not reachable",
                "fix": None,
                "facts": {},
            },
        ],
    }
    assert orjson.loads(render_json("reader", [GREEN]))["ok"] is True
