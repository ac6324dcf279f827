"""The genuine dcgm-exporter captures, their golden samples, and how the parse tests read them.

The captures live in ``shared/fixtures/dcgm-exporter`` beside the repository (or under
``$GPUATTR_SHARED_DIR``); ``tests/fixtures/dcgm-exporter`` keeps copies so the suite also runs
from a bare checkout. Golden samples are in ``tests/golden/dcgm/<capture>.json``; rewrite them
with ``GPUATTR_REGEN_GOLDEN=1`` and check the diff by hand.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import orjson

from agents.dcgm.translate import ParseResult, parse_exposition
from contract.inputs import DcgmSample

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(
    os.environ.get("GPUATTR_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared"
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
    return orjson.loads(orjson.dumps([msgspec.to_builtins(s) for s in samples]))


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
