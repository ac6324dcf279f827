"""The committed PodResources stubs are exactly what proto/gen.sh makes from api.proto.

The script runs on a copy of its inputs in a temp dir (same relative paths), so the check never
writes into the tree; the committed files must match the fresh ones byte for byte.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = Path("proto/podresources/v1")
INPUTS = (Path("proto/gen.sh"), PROTO_DIR / "api.proto", Path("pyproject.toml"))
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("gen")
    for rel in INPUTS:
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, work / rel)
    done = subprocess.run(
        ["bash", str(work / "proto" / "gen.sh")],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"proto/gen.sh failed:\n{done.stderr}"
    return work / PROTO_DIR


@pytest.mark.parametrize("name", GENERATED)
def test_committed_stub_is_fresh(fresh: Path, name: str) -> None:
    committed = ROOT / PROTO_DIR / name
    assert committed.exists(), f"{PROTO_DIR / name} is missing: run proto/gen.sh"
    assert committed.read_bytes() == (fresh / name).read_bytes(), (
        f"{PROTO_DIR / name} is stale (api.proto or the generators changed): "
        "run proto/gen.sh (PYTHON=.venv/bin/python proto/gen.sh) and commit the result"
    )
