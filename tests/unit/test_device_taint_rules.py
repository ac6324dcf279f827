"""DRA ``DeviceTaintRule`` objects (``resource.k8s.io/v1alpha3``, KEP-5055): the API server's JSON
→ ``DeviceTaintRuleRecord`` (what 1.35 serves, what older servers kept and we cannot evaluate,
taints the API would not accept), which DRA devices a rule selects, and the processor keeping a
partition's live rules and judging every device they select — on any node of the partition,
named in the word — healthy again once the rule is deleted."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import REGISTRY

from agents.kube import translate
from agents.kube.dra import taint_rule
from contract import codec
from contract.inputs import DcgmScrape, DeviceTaint, DeviceTaintRuleRecord
from contract.outputs import Alert, AttributionEvent
from contract.records import replace
from streams.core.devices.taintrules import PartitionTaintRules, selects
from streams.core.flow.processor import Processor, Tables
from tests.unit.test_processor_dra import GPU, NODE, SCRAPE, SETUP, D, T

ADDED = "2026-12-01T10:00:00Z"
ADDED_MS = int(datetime(2026, 12, 1, 10, tzinfo=UTC).timestamp() * 1000)


def rule_json(
    selector: dict[str, Any] | None, taint: dict[str, Any] | None = None, name: str = "r"
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "taint": taint or {"key": "example.com/maintenance", "effect": "NoExecute"}
    }
    if selector is not None:
        spec["deviceSelector"] = selector
    return {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name, "resourceVersion": "42", "generation": 1},
        "spec": spec,
        "status": {"conditions": [{"type": "EvictionInProgress", "status": "False"}]},
    }


def refused() -> float:
    labels = {"what": "device_taint"}
    return REGISTRY.get_sample_value("gpuattr_agent_refused_values_total", labels) or 0.0


def test_a_rule_as_1_35_serves_it() -> None:
    raw = rule_json(
        {"driver": D, "pool": NODE, "device": "gpu-3"},
        {
            "key": "example.com/maintenance",
            "value": "swap",
            "effect": "NoExecute",
            "timeAdded": ADDED,
        },
        name="gpu-3-swap",
    )
    record = taint_rule(raw, ts_ms=7, deleted=False)
    assert record == DeviceTaintRuleRecord(
        "gpu-3-swap",
        7,
        D,
        NODE,
        "gpu-3",
        DeviceTaint("example.com/maintenance", "NoExecute", "swap", ADDED_MS),
        resource_version="42",
    )
    assert codec.decode(codec.encode(record)) == record
    assert codec.kind_of(record).kind == "k8s.devicetaintrule"


@pytest.mark.parametrize(
    ("selector", "selects_anything", "unevaluable"),
    [
        pytest.param({}, True, "", id="empty-selector-selects-all"),
        pytest.param(None, False, "", id="no-selector-selects-nothing"),
        pytest.param(
            {"driver": D, "deviceClassName": "gpu.nvidia.com"},
            False,
            "its deviceSelector sets deviceClassName, which this reader cannot evaluate",
            id="pre-1.35-device-class",
        ),
        pytest.param(
            {"selectors": [{"cel": {"expression": "device.attributes['x'].y"}}]},
            False,
            "its deviceSelector sets selectors, which this reader cannot evaluate",
            id="pre-1.35-cel",
        ),
    ],
)
def test_what_a_selector_can_say(
    selector: dict[str, Any] | None, selects_anything: bool, unevaluable: str
) -> None:
    record = taint_rule(rule_json(selector), ts_ms=1, deleted=False)
    assert record is not None
    assert record.unevaluable == unevaluable
    assert selects(record, (D, NODE, "gpu-0")) is selects_anything


@pytest.mark.parametrize(
    "taint",
    [
        pytest.param({"key": "example.com/x", "effect": "PreferNoSchedule"}, id="node-effect"),
        pytest.param({"key": "example.com/x"}, id="no-effect"),
        pytest.param({"effect": "NoExecute"}, id="no-key"),
    ],
)
def test_a_taint_the_api_would_not_accept_is_counted_and_says_nothing(
    taint: dict[str, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(translate, "_logged_refusals", set())
    before = refused()
    record = taint_rule(rule_json({}, taint, name="bad"), ts_ms=1, deleted=False)
    assert record is not None
    assert record.taint is None
    assert not selects(record, (D, NODE, "gpu-0"))
    assert refused() == before + 1
    assert any("DeviceTaintRule bad" in r.getMessage() for r in caplog.records)


def test_a_rule_without_a_name_is_no_record() -> None:
    raw = rule_json({})
    del raw["metadata"]["name"]
    assert taint_rule(raw, ts_ms=1, deleted=False) is None
    assert taint_rule("not an object", ts_ms=1, deleted=False) is None


TAINT = DeviceTaint("example.com/maintenance", "NoExecute", "swap")
RULE = DeviceTaintRuleRecord("gpu-3-swap", T + 6000, D, NODE, "gpu-3", TAINT)


@pytest.mark.parametrize(
    ("rule", "ref", "selected"),
    [
        pytest.param(RULE, (D, NODE, "gpu-3"), True, id="driver-pool-device"),
        pytest.param(RULE, (D, NODE, "gpu-4"), False, id="another-device"),
        pytest.param(RULE, (D, "other-node", "gpu-3"), False, id="another-pool"),
        pytest.param(RULE, ("example.com", NODE, "gpu-3"), False, id="another-driver"),
        pytest.param(replace(RULE, device=None), (D, NODE, "gpu-4"), True, id="whole-pool"),
        pytest.param(
            replace(RULE, driver=None, pool=None), ("x.com", "p", "gpu-3"), True, id="by-name"
        ),
        pytest.param(replace(RULE, deleted=True), (D, NODE, "gpu-3"), False, id="deleted"),
        pytest.param(replace(RULE, taint=None), (D, NODE, "gpu-3"), False, id="bad-taint"),
    ],
)
def test_which_devices_a_rule_selects(
    rule: DeviceTaintRuleRecord, ref: tuple[str, str, str], selected: bool
) -> None:
    assert selects(rule, ref) is selected


def test_a_partition_keeps_its_live_rules_by_name() -> None:
    other = replace(RULE, name="a-rule")
    rules = PartitionTaintRules().apply(RULE).apply(other)
    assert [r.name for r in rules.rules] == ["a-rule", "gpu-3-swap"]
    moved = rules.apply(replace(RULE, device="gpu-4"))
    assert [r.device for r in moved.rules] == ["gpu-3", "gpu-4"]
    assert moved.apply(replace(RULE, deleted=True)).rules == (other,)


def scrape(processor: Processor, at_ms: int) -> tuple[dict[str, AttributionEvent], list[Alert]]:
    samples = tuple(replace(s, ts_ms=at_ms) for s in SCRAPE.samples)
    out = processor.handle(DcgmScrape(NODE, at_ms, samples))
    events = {o.device_uuid: o for o in out if isinstance(o, AttributionEvent)}
    alerts = [o for o in out if isinstance(o, Alert) and o.kind == "device-unhealthy"]
    return events, alerts


def test_a_rule_taints_the_held_device_it_selects_and_lifts_when_deleted() -> None:
    processor = Processor(Tables.in_memory())
    for record in SETUP:
        processor.handle(record)
    events, _ = scrape(processor, T + 5000)
    assert events[GPU[3]].health.sources == ()  # held by ml/train-0: nothing speaks yet

    assert processor.handle(RULE) == []
    assert processor.tables.device_taint_rules["0"].rules == (RULE,)
    events, (firing,) = scrape(processor, T + 10_000)
    said = [(w.source, w.state, w.detail, w.effect) for w in events[GPU[3]].health.sources]
    assert said == [
        (
            "dra-taint",
            "unhealthy",
            "DeviceTaintRule gpu-3-swap: example.com/maintenance=swap:NoExecute",
            "NoExecute",
        ),
        ("dcgm", "healthy", "no memory fault in the reading", None),
    ]
    assert events[GPU[4]].health.sources == ()  # not selected
    assert firing.status == "firing"
    assert [h.pod for h in firing.holders] == ["train-0"]
    assert "the holders will be evicted" in firing.summary

    processor.handle(replace(RULE, ts_ms=T + 11_000, deleted=True))
    assert "0" not in processor.tables.device_taint_rules
    events, (resolved,) = scrape(processor, T + 15_000)
    assert (events[GPU[3]].health.sources, events[GPU[3]].health.verdict) == ((), None)
    assert (resolved.status, resolved.id) == ("resolved", firing.id)


def test_a_pool_rule_reaches_every_device_of_the_pool_and_only_its_partitions_nodes() -> None:
    processor = Processor(Tables.in_memory())
    for record in SETUP:
        processor.handle(record, 1)
    pool = replace(RULE, name="drain", device=None, taint=replace(TAINT, effect="NoSchedule"))
    processor.handle(pool, 0)  # another partition's copy: not this node's
    events, _ = scrape_on(processor, T + 10_000, 1)
    assert all(e.health.sources == () for e in events.values())
    processor.handle(pool, 1)
    events, _ = scrape_on(processor, T + 11_000, 1)
    tainted = {
        uuid
        for uuid, e in events.items()
        if any(w.detail.startswith("DeviceTaintRule drain:") for w in e.health.sources)
    }
    # every GPU and the static MIG instance (the dynamic one has no UUID to be named by)
    assert tainted == {*GPU, "MIG-77777777-0000-5000-8000-000000000007"}


def test_a_rule_we_cannot_evaluate_or_without_a_taint_says_nothing() -> None:
    processor = Processor(Tables.in_memory())
    for record in SETUP:
        processor.handle(record)
    processor.handle(replace(RULE, unevaluable="its deviceSelector sets selectors"))
    processor.handle(replace(RULE, name="no-taint", taint=None))
    events, alerts = scrape(processor, T + 10_000)
    assert events[GPU[3]].health.sources == ()
    assert alerts == []


def scrape_on(
    processor: Processor, at_ms: int, partition: int
) -> tuple[dict[str, AttributionEvent], list[Alert]]:
    samples = tuple(replace(s, ts_ms=at_ms) for s in SCRAPE.samples)
    out = processor.handle(DcgmScrape(NODE, at_ms, samples), partition)
    events = {o.device_uuid: o for o in out if isinstance(o, AttributionEvent)}
    return events, [o for o in out if isinstance(o, Alert)]
