"""One idle rule: a held device is idle while measured under the idle alert's threshold
(``AlertSettings.idle_threshold_pct``, ``util < threshold``) and active at or over it — in the
alert, the shipped recording rules and the dashboard alike. The rules' effective step follows
the low-efficiency alert the same way (``effective < low_eff_threshold_pct`` is ineffective).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml

from infra.settings import AlertSettings
from tests.kustomize_render import ROOT
from tests.unit.test_prometheus_rules import promtool, rule_groups, rules_file

DEFAULTS = AlertSettings()
IDLE = DEFAULTS.idle_threshold_pct / 100
LOW_EFF = DEFAULTS.low_eff_threshold_pct / 100
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboard.py"


def comparisons(series: str) -> set[tuple[str, float]]:
    """Every ``(... (series)) OP number`` in the shipped rules."""
    found = set()
    for group in rule_groups():
        for rule in group["rules"]:
            for op, value in re.findall(
                rf"\({series}\)\s*(<=|>=|==|!=|<|>)\s*([0-9.]+)", rule["expr"]
            ):
                found.add((op, float(value)))
    return found


def test_the_rules_busy_comparisons_are_the_idle_alerts() -> None:
    assert comparisons("gpuattr_device_utilization_ratio") == {("<", IDLE), (">=", IDLE)}


def test_the_rules_effective_comparisons_are_the_low_efficiency_alerts() -> None:
    assert comparisons("gpuattr_device_effective_ratio") == {("<", LOW_EFF), (">=", LOW_EFF)}


def test_the_dashboard_says_the_same_threshold() -> None:
    said = re.findall(
        r"(>=|>|<=|<|at or over|over|under) (\d+(?:\.\d+)?) % busy", DASHBOARD.read_text()
    )
    assert said, "the dashboard names the active threshold"
    assert {(word, float(pct)) for word, pct in said} <= {
        (">=", DEFAULTS.idle_threshold_pct),
        ("at or over", DEFAULTS.idle_threshold_pct),
    }


def funnel_at(busy: dict[str, float]) -> dict[str, object]:
    """Held devices measured at ``busy`` (device → ratio) for ten minutes; the funnel at 5m."""
    inputs = []
    for device, ratio in busy.items():
        at = f'node="n",device_uuid="{device}"'
        inputs.append({"series": f"gpuattr_device_tenants{{{at}}}", "values": "1x10"})
        inputs.append(
            {
                "series": f'gpuattr_device_utilization_ratio{{{at},scope="device"}}',
                "values": f"{ratio!r}x10",
            }
        )
    return {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": inputs,
                "promql_expr_test": [
                    {
                        "expr": f"gpuattr:devices_{step}:count",
                        "eval_time": "5m",
                        "exp_samples": [{"labels": f"gpuattr:devices_{step}:count", "value": n}],
                    }
                    for step, n in (("active", 1), ("idle", 1))
                ],
            }
        ],
    }


def test_a_device_at_exactly_the_threshold_is_active_and_just_under_it_idle(
    tmp_path: Path,
) -> None:
    # the value the worker exports for a sample at exactly the threshold (util_pct / 100)
    at = DEFAULTS.idle_threshold_pct / 100.0
    assert shutil.which("promtool")
    rules_file(tmp_path, every_evaluation=True)
    (tmp_path / "idle_test.yaml").write_text(
        yaml.safe_dump(funnel_at({"GPU-at": at, "GPU-under": at - 0.0001}))
    )
    promtool("test", "rules", "idle_test.yaml", cwd=tmp_path)
