"""The committed PodResources stubs are exactly what proto/gen.sh produces from api.proto."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def test_stubs_are_fresh(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run(
        ["bash", str(ROOT / "proto" / "gen.sh"), str(out)], check=True, env=env, capture_output=True
    )
    for name in GENERATED:
        fresh = (out / "proto" / "podresources" / "v1" / name).read_bytes()
        committed = (ROOT / "proto" / "podresources" / "v1" / name).read_bytes()
        assert fresh == committed, f"{name} is stale: run proto/gen.sh"
