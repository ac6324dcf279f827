"""The shipped PrometheusRule, checked and unit-tested by promtool (Debian's prometheus package)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.kustomize_render import ROOT, base_docs

TESTS = ROOT / "tests" / "prometheus" / "rules_test.yaml"


def promtool(*args: str, cwd: Path) -> str:
    tool = shutil.which("promtool")
    assert tool, "promtool is required (Debian's prometheus package; .ci/run installs it)"
    done = subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def rule_groups() -> list[dict[str, Any]]:
    (rule,) = [d for d in base_docs() if d["kind"] == "PrometheusRule"]
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def rules_file(folder: Path, *, every_evaluation: bool = False) -> Path:
    """The shipped groups as a Prometheus rule file. ``every_evaluation`` drops the groups' own
    intervals (so a test's short global one applies): no expression depends on them."""
    groups = rule_groups()
    if every_evaluation:
        groups = [{k: v for k, v in g.items() if k != "interval"} for g in groups]
    path = folder / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    return path


def test_rules_are_valid(tmp_path: Path) -> None:
    out = promtool("check", "rules", str(rules_file(tmp_path)), cwd=tmp_path)
    assert "SUCCESS: 27 rules found" in out


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


def test_the_handover_in_the_unit_tests_bites(tmp_path: Path) -> None:
    """rules_test.yaml has a device served by two workers at once (a partition changing hands):
    the GPUs-held rule without its per-identity ``max by`` counts that device twice, and fails."""
    groups = rule_groups()
    (held,) = [r for r in groups[0]["rules"] if r.get("record", "").endswith("gpus_held:sum")]
    held["expr"] = (
        "sum by (namespace, workload_kind, workload_name, mig_profile) (gpuattr_pod_device_share"
        " * on (node, device_uuid, instance) group_left (mig_profile) gpuattr_device_info)"
    )
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    shutil.copy(TESTS, tmp_path / "rules_test.yaml")
    tool = shutil.which("promtool")
    assert tool
    done = subprocess.run(
        [tool, "test", "rules", "rules_test.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert 'workload_name="web"} 2E+00' in done.stdout + done.stderr  # the device counted twice


def test_per_container_holder_series_would_count_twice(tmp_path: Path) -> None:
    """The lab pods of rules_test.yaml hold one GPU each through two containers or two claims:
    a rule over the per-container holder series (1 / tenants each, without the per-pod share
    series) counts them twice; the shipped rule, over one share series per pod, does not."""
    groups = rule_groups()
    (held,) = [r for r in groups[0]["rules"] if r.get("record", "").endswith("gpus_held:sum")]
    held["expr"] = (
        "sum by (namespace, workload_kind, workload_name, mig_profile) ("
        "max by (node, device_uuid, namespace, pod, container, pod_uid, workload_kind, "
        "workload_name, claim) (gpuattr_device_holder_info) / on (node, device_uuid) group_left "
        "(mig_profile) (max by (node, device_uuid) (gpuattr_device_tenants) * on (node, "
        "device_uuid) group_left (mig_profile) max by (node, device_uuid, mig_profile) "
        "(gpuattr_device_info)))"
    )
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    shutil.copy(TESTS, tmp_path / "rules_test.yaml")
    tool = shutil.which("promtool")
    assert tool
    done = subprocess.run(
        [tool, "test", "rules", "rules_test.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode != 0
    out = done.stdout + done.stderr
    for job in ("duo", "claimer", "twin"):
        assert f'workload_name="{job}"}} 2E+00' in out, job


def test_unknown_effective_counted_as_ineffective_bites(tmp_path: Path) -> None:
    """rules_test.yaml has an active device whose exporter exports no profiling field: a rule
    that reads its missing effective series as 0 (active and not effective → ineffective) counts
    it as busy-but-ineffective, and fails; the shipped rule keeps it apart as unknown."""
    groups = rule_groups()
    (rule,) = [r for r in groups[0]["rules"] if r.get("record", "").endswith("ineffective:count")]
    rule["expr"] = (
        "count((max by (node, device_uuid) (gpuattr_device_utilization_ratio) >= 0.05) and on "
        "(node, device_uuid) (max by (node, device_uuid) (gpuattr_device_tenants) > 0) unless on "
        "(node, device_uuid) (max by (node, device_uuid) (gpuattr_device_effective_ratio) >= 0.15))"
        " or vector(0)"
    )
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    shutil.copy(TESTS, tmp_path / "rules_test.yaml")
    tool = shutil.which("promtool")
    assert tool
    done = subprocess.run(
        [tool, "test", "rules", "rules_test.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "gpuattr:devices_ineffective:count" in done.stdout + done.stderr
    assert "2E+00" in done.stdout + done.stderr  # E2 (unknown) counted beside E1


def test_the_requested_step_counts_a_pool_changing_hands_once(tmp_path: Path) -> None:
    """rules_test.yaml has a pool served by two workers at once: a requested rule without its
    per-pool ``max by`` counts its 24 GPUs twice, and fails."""
    groups = rule_groups()
    (rule,) = [r for r in groups[0]["rules"] if r.get("record") == "gpuattr:gpus_requested:count"]
    rule["expr"] = "sum(gpuattr_pool_gpus_requested) or vector(0)"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    shutil.copy(TESTS, tmp_path / "rules_test.yaml")
    tool = shutil.which("promtool")
    assert tool
    done = subprocess.run(
        [tool, "test", "rules", "rules_test.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "4.9E+01" in done.stdout + done.stderr  # 24 + 24 + 1
