"""The shipped PrometheusRule, checked and unit-tested by promtool (Debian's prometheus package)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from tests.kustomize_render import ROOT, base_docs

TESTS = ROOT / "tests" / "prometheus" / "rules_test.yaml"


def promtool(*args: str, cwd: Path) -> str:
    tool = shutil.which("promtool")
    assert tool, "promtool is required (Debian's prometheus package; .ci/run installs it)"
    done = subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def rules_file(folder: Path) -> Path:
    (rule,) = [d for d in base_docs() if d["kind"] == "PrometheusRule"]
    path = folder / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def test_rules_are_valid(tmp_path: Path) -> None:
    out = promtool("check", "rules", str(rules_file(tmp_path)), cwd=tmp_path)
    assert "SUCCESS: 8 rules found" in out


def test_rules_unit_tests_pass(tmp_path: Path) -> None:
    rules_file(tmp_path)
    shutil.copy(TESTS, tmp_path / "rules_test.yaml")
    out = promtool("test", "rules", "rules_test.yaml", cwd=tmp_path)
    assert "SUCCESS" in out


def test_a_broken_expectation_fails(tmp_path: Path) -> None:
    """The unit tests can fail: one wrong expected value is reported by promtool."""
    rules_file(tmp_path)
    broken = TESTS.read_text().replace(
        "gpuattr:devices_idle:count', value: 1", "gpuattr:devices_idle:count', value: 2"
    )
    assert broken != TESTS.read_text()
    (tmp_path / "rules_test.yaml").write_text(broken)
    done = subprocess.run(
        ["promtool", "test", "rules", "rules_test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
