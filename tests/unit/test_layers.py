"""The import contracts in pyproject.toml (run by ``make lint``) hold, and catch a wrong import.

Each case copies the source packages to a temporary directory, adds one import that breaks a
contract, and runs ``lint-imports`` on the copy: it must fail naming that import. The real tree
must pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bench", "gpuattr", "sim", "agents", "streams", "sinks", "infra", "contract", "proto")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("layers")
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    result = lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "bad_import", "broken"),
    [
        pytest.param(
            "contract/codec.py",
            "import streams.core.flow.state",
            "Layers",
            id="contract-imports-a-role",
        ),
        pytest.param(
            "agents/main.py",
            "import streams.core.devices.holders",
            "Layers",
            id="agent-imports-worker",
        ),
        pytest.param("sinks/runner.py", "import agents.publish", "Layers", id="sink-imports-agent"),
        pytest.param(
            "infra/settings.py", "import gpuattr.cli", "Layers", id="platform-imports-cli"
        ),
        pytest.param(
            "streams/core/devices/sharing.py",
            "import streams.worker.app",
            "Inside the worker",
            id="core-imports-adapter",
        ),
        pytest.param(
            "streams/core/devices/identity.py",
            "import streams.core.flow.tables",
            "Inside the core",
            id="device-concept-imports-the-pass",
        ),
        pytest.param(
            "streams/core/node/telemetry.py",
            "import streams.core.stack.operatorstack",
            "Inside the core",
            id="node-imports-stack",
        ),
        pytest.param(
            "streams/core/stack/nodestack.py",
            "import streams.core.demand.supply",
            "Inside the core",
            id="stack-imports-its-sibling-demand",
        ),
        pytest.param(
            "streams/core/demand/supply.py",
            "import streams.present.views",
            "Inside the worker",
            id="core-imports-presentation",
        ),
        pytest.param(
            "streams/core/keys.py",
            "import streams.core.lifetimes",
            "Inside the core",
            id="key-formats-import-a-foundation",
        ),
        pytest.param(
            "streams/core/devices/holders.py",
            "import aiokafka",
            "no I/O library",
            id="core-imports-kafka",
        ),
        pytest.param(
            "agents/podresources/collect.py", "import agents.main", "cycle", id="sibling-cycle"
        ),
    ],
)
def test_a_wrong_import_fails_the_lint(
    tree: Path, module: str, bad_import: str, broken: str
) -> None:
    path = tree / module
    original = path.read_text()
    path.write_text(f"{original}\n{bad_import}  # noqa\n")
    try:
        result = lint(tree)
    finally:
        path.write_text(original)
    assert result.returncode != 0
    broken_lines = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(broken in line for line in broken_lines), result.stdout
