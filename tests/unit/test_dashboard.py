"""The Grafana dashboard: built as code with grafana-foundation-sdk, committed as JSON, and checked
against the SDK's own schema (its generated models for Grafana 11.6's dashboard, panels and
Prometheus queries). tests/integration/test_prometheus_handover.py runs every query."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import jsonpatch
import pytest
from grafana_foundation_sdk.cog import plugins
from grafana_foundation_sdk.cog import runtime as cogruntime
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import prometheus

from tests.kustomize_render import ROOT

FOLDER = ROOT / "deploy" / "grafana"
COMMITTED = FOLDER / "gpuattr.json"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpuattr_dashboard", FOLDER / "dashboard.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(COMMITTED.read_text())
    return loaded


@dataclass(frozen=True)
class PanelQuery:
    panel: str
    ref: str
    expr: str
    instant: bool


def queries(dashboard: dict[str, Any]) -> Iterator[PanelQuery]:
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield PanelQuery(
                panel["title"], target["refId"], target["expr"], bool(target.get("instant"))
            )


def variables(dashboard: dict[str, Any]) -> dict[str, str]:
    """The dashboard's query variables: name → label_values(...) query."""
    return {v["name"]: v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"}


def unknown_to_the_schema(data: dict[str, Any]) -> list[dict[str, Any]]:
    """What the SDK's models drop or change when they read the JSON and write it back (they may
    add their own defaults, such as a table's empty ``custom`` field config: that is not loss)."""
    ops = jsonpatch.make_patch(data, round_trip(data)).patch
    return [op for op in ops if op["op"] != "add"]


def round_trip(data: dict[str, Any]) -> dict[str, Any]:
    """The JSON read into the SDK's models and written back: what the schema knows of it."""
    plugins.register_default_plugins()
    decoded = model.Dashboard.from_json(copy.deepcopy(data))
    again: dict[str, Any] = json.loads(json.dumps(decoded.to_json(), cls=JSONEncoder))
    return again


def test_the_committed_json_is_the_code_s_output() -> None:
    assert COMMITTED.read_text() == generator().render(), "stale: run `make dashboard`"


def test_the_sdk_schema_reads_it_back_whole() -> None:
    data = committed()
    assert unknown_to_the_schema(data) == []  # no key the schema does not know, nothing lost
    plugins.register_default_plugins()
    decoded = model.Dashboard.from_json(copy.deepcopy(data))
    assert decoded.panels
    for panel in decoded.panels:
        if isinstance(panel, model.RowPanel):
            continue
        config = cogruntime.panelcfg_config(panel.type_val)
        assert config is not None, f"{panel.title}: panel type {panel.type_val} unknown to the SDK"
        assert not isinstance(panel.options, dict), f"{panel.title}: options not in the schema"
        assert panel.targets, f"{panel.title}: no query"
        for target in panel.targets:
            assert isinstance(target, prometheus.Dataquery), (
                f"{panel.title}: not a Prometheus query"
            )


def test_a_key_the_schema_does_not_know_is_caught() -> None:
    data = committed()
    data["panels"][1]["gridPoss"] = data["panels"][1].pop("gridPos")  # a typo
    data["panels"][2]["targets"][0]["legendFromat"] = "x"  # another, inside a query
    assert sorted(op["path"] for op in unknown_to_the_schema(data)) == [
        "/panels/1/gridPoss",
        "/panels/2/targets/0/legendFromat",
    ]


def test_layout_ids_and_datasource() -> None:
    data = committed()
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))
    assert 0 not in ids
    cells: set[tuple[int, int]] = set()
    for p in data["panels"]:
        g = p["gridPos"]
        area = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & area, f"{p['title']} overlaps another panel"
        assert g["x"] + g["w"] <= 24
        cells |= area
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert {q.panel for q in queries(data)} == {
        p["title"] for p in data["panels"] if p["type"] != "row"
    }


def test_the_asked_for_views_are_there() -> None:
    exprs = " ".join(q.expr for q in queries(committed()))
    for needed in (
        "gpuattr:devices:count",  # the fleet funnel
        "gpuattr:devices_allocated:count",
        "gpuattr:devices_active:count",
        "gpuattr:devices_idle:count",
        "gpuattr_device_holder_info",  # who holds what on shared devices
        "namespace_workload:gpuattr_gpu_hours_held:1h",  # GPU-hours by namespace/workload
        "verdict:gpuattr_devices_exporter_misattributed:count",  # exporter misattribution
        "gpuattr:devices_effective:count",  # the funnel to effective, and its unknown apart
        "gpuattr:devices_ineffective:count",
        "gpuattr:devices_effective_unknown:count",
        "gpuattr_device_effective_ratio",  # busy versus effective
        "gpuattr_device_health",  # health marks, with their holders
        "gpuattr:gpus_requested:count",  # the funnel to requested
        "gpuattr:pods_pending:count",  # pods waiting, per pool, beside its idle GPUs
        "gpuattr:workloads_queued:count",  # Kueue Workloads waiting for quota
        "gpuattr_pool_queued_workloads",
        "gpuattr_pool_idle_gpus",
    ):
        assert needed in exprs, needed


def unnamed_columns(panel: dict[str, Any]) -> list[str]:
    """The value columns a table would show as Grafana names them by default: ``Value`` for one
    query, ``Value #<ref>`` for several merged — unless a transformation names or drops them."""
    refs = [t["refId"] for t in panel.get("targets", [])]
    columns = ["Value"] if len(refs) == 1 else [f"Value #{ref}" for ref in refs]
    named: set[str] = set()
    for step in panel.get("transformations", []):
        if step["id"] == "organize":
            named |= set(step["options"].get("renameByName", {}))
            named |= {k for k, v in step["options"].get("excludeByName", {}).items() if v}
    return [c for c in columns if c not in named]


def tables(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] == "table"]


@pytest.mark.parametrize("panel", tables(committed()), ids=lambda p: p["title"])
def test_every_table_names_its_columns(panel: dict[str, Any]) -> None:
    assert unnamed_columns(panel) == [], f"{panel['title']}: columns Grafana would call Value #…"
    renamed = [
        name
        for step in panel.get("transformations", [])
        if step["id"] == "organize"
        for name in step["options"].get("renameByName", {}).values()
    ]
    assert all(name and not name.startswith("Value") for name in renamed), renamed


def test_a_table_without_column_names_is_caught() -> None:
    """As rendered by a real Grafana before: "Value #A", "Value #B", "Value #C" headers."""
    panel = copy.deepcopy(tables(committed())[0])
    for step in panel["transformations"]:
        if step["id"] == "organize":
            step["options"]["renameByName"] = {}
            step["options"]["excludeByName"] = {"Time": True}
    assert unnamed_columns(panel) == ["Value #A", "Value #B", "Value #C"]


def test_held_gpus_without_a_reading_are_shown_with_why() -> None:
    exprs = " ".join(q.expr for q in queries(committed()))
    assert "gpuattr_device_telemetry_unknown" in exprs
    assert "gpuattr:devices_unmeasured:count" in exprs
    assert "gpuattr_pod_device_share" in exprs


@pytest.mark.parametrize("query", list(queries(committed())), ids=lambda q: f"{q.panel}/{q.ref}")
def test_no_query_multiplies_a_device_figure_onto_a_holder(query: PanelQuery) -> None:
    """The lie PromQL could recreate: a device-wide usage series joined onto each holder."""
    usage = re.search(
        r"gpuattr_device_(utilization_ratio|memory_used_bytes|effective_ratio)", query.expr
    )
    holders = re.search(r"gpuattr_device_holder_", query.expr)
    assert not (usage and holders), query.expr
