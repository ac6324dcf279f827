"""One accounting rule: ``gpuattr report`` and the Prometheus GPUs-held rule agree on every demo
scenario.

Each scenario's nodes go through the worker's processor for an hour of event time at a fixed
allocation (:mod:`tests.scenario_events`). The report sums each pod's share over that hour; the
worker's /metrics series for the same devices (:mod:`streams.present.promseries`), held for an hour,
go through the shipped recording rules with promtool. GPU-hours held over one hour must equal
GPUs held, workload by workload and MIG profile by profile — including the accounting scenario's
pod with two containers, claim of two containers and two claims on one GPU (one GPU each), and
its node whose exporter never answers (held all the same).
"""

from __future__ import annotations

import math
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from contract.outputs import AttributionEvent
from gpuattr.report import accumulate
from sim.scenario import builtin_names, load
from streams.present.promseries import families
from streams.present.views import device_row
from tests.scenario_events import events
from tests.unit.test_prometheus_rules import promtool, rules_file

MINUTES = 60
Key = tuple[str, str, str, str]  # namespace, workload kind, workload name, MIG profile


def latest(evs: list[AttributionEvent]) -> list[AttributionEvent]:
    newest: dict[tuple[str, str], AttributionEvent] = {}
    for ev in evs:
        newest[(ev.node, ev.device_uuid)] = ev
    return [ev for ev in newest.values() if ev.origin != "gone"]


def from_report(evs: list[AttributionEvent]) -> dict[Key, float]:
    """GPU-hours held over the hour, keyed as the rule keys it (a bare pod has no workload)."""
    out: dict[Key, float] = defaultdict(float)
    for line in accumulate(evs, max_gap_s=90, idle_threshold_pct=5):
        kind, _, name = line.workload.partition("/")
        if kind == "Pod":
            kind, name = "", ""
        out[(line.namespace, kind, name, line.mig_profile)] += line.held_gpu_hours
    return out


def rounded(x: float) -> float:
    """As PromQL's ``round(x, 0.0001)`` does it."""
    return math.floor(x * 10_000 + 0.5) / 10_000


def series_file(evs: list[AttributionEvent], expected: dict[Key, float]) -> dict[str, object]:
    rows = [device_row(ev, None) for ev in latest(evs)]
    inputs = []
    for family in families(rows):
        for labels, value in family.samples:
            text = ",".join(f'{k}="{v}"' for k, v in labels)
            inputs.append({"series": f"{family.name}{{{text}}}", "values": f"{value}x{MINUTES}"})
    samples = []
    for (ns, kind, name, profile), hours in sorted(expected.items()):
        # an empty label is no label in Prometheus (a bare pod has no workload)
        pairs = {"namespace": ns, "workload_kind": kind, "workload_name": name}
        pairs["mig_profile"] = profile
        labels = ",".join(f'{k}="{v}"' for k, v in pairs.items() if v)
        samples.append({"labels": "{" + labels + "}", "value": rounded(hours)})
    return {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": inputs,
                "promql_expr_test": [
                    {
                        "expr": "round(namespace_workload:gpuattr_gpus_held:sum, 0.0001)",
                        "eval_time": "30m",
                        "exp_samples": samples,
                    }
                ],
            }
        ],
    }


@pytest.mark.parametrize("name", builtin_names())
def test_report_and_rule_agree(name: str, tmp_path: Path) -> None:
    scenario = load(name)
    evs = events(scenario, at_s=10.0, minutes=MINUTES)
    expected = from_report(evs)
    assert expected, f"{name}: nothing held"
    rules_file(tmp_path)
    (tmp_path / "agree_test.yaml").write_text(yaml.safe_dump(series_file(evs, expected)))
    promtool("test", "rules", "agree_test.yaml", cwd=tmp_path)  # fails on any disagreement


def test_the_accounting_scenario_counts_each_double_hold_once() -> None:
    expected = from_report(events(load("accounting"), at_s=10.0, minutes=MINUTES))
    for job in ("pair", "claimer", "twin"):  # one GPU each, whatever the containers or claims
        assert rounded(expected[("lab", "Job", job, "")]) == 1.0, job
    assert rounded(expected[("lab", "Job", "duo", "")]) == 0.5  # two replicas of four
    # the node whose exporter never answered: its holders' hours are held all the same
    assert rounded(expected[("ml", "StatefulSet", "trainer", "")]) == 1.0
    assert rounded(expected[("inference", "StatefulSet", "mps-b", "")]) == 0.5


def test_a_disagreement_would_fail(tmp_path: Path) -> None:
    """The comparison can fail: the report's figure off by one share."""
    evs = events(load("accounting"), at_s=10.0, minutes=MINUTES)
    expected = from_report(evs)
    expected[("lab", "Job", "twin", "")] = 2.0  # what counting per claim would say
    rules_file(tmp_path)
    (tmp_path / "agree_test.yaml").write_text(yaml.safe_dump(series_file(evs, expected)))
    tool = shutil.which("promtool")
    assert tool
    import subprocess

    done = subprocess.run(
        [tool, "test", "rules", "agree_test.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode != 0
