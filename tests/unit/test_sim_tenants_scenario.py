"""The ``tenants`` demo scenario tells its story on the demo's own worker settings: what its agents
would publish (:mod:`tests.golden.scripted`, the agents' own translators over the doubles'
views) through the worker's core (:func:`tests.golden.record.replay`), in scenario time.

On the time-sliced GPU the idle notebook gets an ``idle-tenant`` alert after the demo's idle
window, the trainer a ``memory-hog`` alert after the default hog window (120 s: the demo does
not shorten it), the GPU as a whole is never idle, and each tenant's measured figures are its
own — the trainer's two replicas counted once."""

from __future__ import annotations

from functools import cache
from typing import Any

import orjson

from sim.scenario import gpu_uuid, load
from tests.golden.record import generate
from tests.golden.scripted import EPOCH_S

SHARED = gpu_uuid("tenants-a", 0)
WHOLE = gpu_uuid("tenants-a", 1)
TRAINER = "llm-finetune-7c9d8b6f5-k2x8q"
NOTEBOOK = "notebook-lin-0"
Value = dict[str, Any]


@cache
def outputs() -> tuple[tuple[str, Value], ...]:
    _, lines = generate("tenants")
    return tuple((doc["kind"], doc["value"]) for doc in map(orjson.loads, lines))


def alerts(kind: str | None = None) -> list[Value]:
    return [v for k, v in outputs() if k == "Alert" and (kind is None or v["kind"] == kind)]


def events(gpu: str) -> list[Value]:
    return [v for k, v in outputs() if k == "AttributionEvent" and v["gpu_uuid"] == gpu]


def second(value: Value) -> float:
    return float(value["ts_ms"]) / 1000 - EPOCH_S


def test_only_the_tenant_alerts_fire_and_never_a_device_wide_idle() -> None:
    assert {(a["kind"], a["gpu_uuid"]) for a in alerts()} == {
        ("idle-tenant", SHARED),
        ("memory-hog", SHARED),
    }


def test_the_idle_notebook_alone_is_named_within_the_demos_idle_window() -> None:
    firing = [a for a in alerts("idle-tenant") if a["status"] == "firing"]
    assert [[h["pod"] for h in a["holders"]] for a in firing] == [[NOTEBOOK]]
    (alert,) = firing
    assert not alert["device_wide"]
    assert second(alert) <= 30  # the demo's idle window is 20 s
    assert alert["figures"]["util_pct"] == 0
    resolved = [a for a in alerts("idle-tenant") if a["status"] == "resolved"]
    assert [a["id"] for a in resolved] == [alert["id"]]  # the notebook runs a cell at 150 s


def test_the_trainer_is_the_memory_hog_with_its_own_memory_counted_once() -> None:
    (alert,) = alerts("memory-hog")
    assert alert["status"] == "firing"
    assert [h["pod"] for h in alert["holders"]] == [TRAINER]
    assert alert["figures"]["fb_used_mib"] == 24576  # not twice: two replicas, one pod
    assert 160 <= second(alert) <= 170  # over half of the GPU from 40 s, window 120 s


def test_each_tenant_is_measured_with_its_own_figures() -> None:
    scenario = load("tenants")
    specs = {p.name: p for p in scenario.pods}
    measured = [e for e in events(SHARED) if any(p.get("measured") for p in e["pods"])]
    assert measured
    for ev in measured:
        t = second(ev)
        own = {p["pod"]: p["measured"] for p in ev["pods"]}
        for pod, m in own.items():
            assert m["source"] == "exporter"
            assert m["sm_util_pct"] == specs[pod].util_at(t)
            assert m["fb_used_mib"] == specs[pod].memory_at(t)
        # the device row stays the device-wide figure: the tenants' sum, the trainer once
        assert ev["usage"]["util_pct"] == min(100, sum(m["sm_util_pct"] for m in own.values()))
        assert ev["usage"]["fb_used_mib"] == sum(m["fb_used_mib"] for m in own.values())
    (whole, *_) = [e for e in events(WHOLE) if any(p.get("measured") for p in e["pods"])]
    (eval_pod,) = whole["pods"]
    assert (eval_pod["measured"]["sm_util_pct"], eval_pod["measured"]["fb_used_mib"]) == (80, 30720)
