"""A fault measured over a scrape interval that spans a hand-over names the holders before and
after it: it is never opened on the successor alone."""

from __future__ import annotations

import pytest

from contract.inputs import (
    DcgmSample,
    DeviceAssignment,
    NodeRecord,
    PodRecord,
    PodResourcesDiff,
    PodResourcesSnapshot,
    SinceLast,
)
from contract.outputs import Alert, AttributionEvent, Health, Holder
from contract.records import replace
from infra.settings import AlertSettings
from streams.core.alerts.alerts import DeviceAlerts, step
from streams.core.flow.processor import Output, Processor, Tables
from tests.unit.test_alerts import H1, H2
from tests.unit.test_alerts import ev as alerts_ev

POLICY = AlertSettings(xid_quiet_s=60, health_quiet_s=60, pcie_replays_per_min=8)
CLEAN = Health(ecc_dbe_increase=0.0, pcie_replays_per_min=0.0)


def ev(
    ts_s: float, holders: tuple[Holder, ...], xid: int = 0, health: Health = CLEAN
) -> AttributionEvent:
    return replace(alerts_ev(ts_s, 50.0, holders, xid=xid), health=health)


def fired(events: list[AttributionEvent]) -> list[Alert]:
    state: DeviceAlerts | None = None
    out: list[Alert] = []
    for e in events:
        state, alerts = step(state, e, POLICY)
        out.extend(a for a in alerts if a.status == "firing")
    return out


FAULTS = [
    pytest.param({"xid": 79}, "xid", id="xid"),
    pytest.param({"health": Health(ecc_dbe_increase=2.0)}, "memory-fault", id="double-bit-ecc"),
    pytest.param({"health": Health(pcie_replays_per_min=30.0)}, "pcie-replays", id="pcie"),
]


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        pytest.param((H2,), ["a", "b"], id="handed-to-b"),
        pytest.param((), ["a"], id="a-left-nobody-holds-it"),
        pytest.param((H1,), ["a"], id="no-hand-over"),
    ],
)
@pytest.mark.parametrize(("fault", "kind"), FAULTS)
def test_a_fault_over_an_interval_names_whoever_held_the_device_in_it(
    fault: dict[str, object], kind: str, after: tuple[Holder, ...], expected: list[str]
) -> None:
    events = [ev(0, (H1,)), ev(30, (H1,)), ev(60, after, **fault)]  # type: ignore[arg-type]
    alerts = fired(events)
    assert [a.kind for a in alerts] == [kind]
    assert [h.pod for h in alerts[0].holders] == expected
    if len(expected) > 1:
        assert "ml/a until a hand-over within the interval, then ml/b" in alerts[0].summary


def test_the_hand_over_is_judged_against_the_previous_reading_not_the_last_event() -> None:
    """The hand-over's own event (no reading) comes between the two readings."""
    handover = replace(ev(45, (H2,)), origin="allocation")
    handover = replace(handover, telemetry=replace(handover.telemetry, status="unknown"))
    alerts = fired([ev(0, (H1,)), ev(30, (H1,)), handover, ev(60, (H2,), xid=79)])
    assert [[h.pod for h in a.holders] for a in alerts] == [["a", "b"]]
    # the reading after names the successor alone: its interval is all theirs
    later = fired([ev(0, (H1,)), ev(30, (H1,)), ev(60, (H2,)), ev(90, (H2,), xid=79)])
    assert [[h.pod for h in a.holders] for a in later] == [["b"]]


# --- the whole worker: 30 s scrapes, a hand-over between two of them

G0 = "GPU-00000000-aaaa"
PA = DeviceAssignment("ml", "a", "main", "nvidia.com/gpu", G0)
PB = DeviceAssignment("ml", "b", "main", "nvidia.com/gpu", G0)


def test_the_worker_names_both_holders_of_an_xid_and_ecc_rise_over_a_hand_over() -> None:
    p = Processor(Tables.in_memory(), POLICY)
    p.handle(NodeRecord("n", 0, ()))
    p.handle(PodRecord("n", 0, "uid-a", "ml", "a", 0))
    p.handle(PodRecord("n", 0, "uid-b", "ml", "b", 0))
    p.handle(PodResourcesSnapshot("n", 0, (PA,)))
    outputs: list[Output] = []
    for t in (0, 30_000):
        outputs += p.handle(DcgmSample("n", t, G0, 0, "A100", "n", util_pct=50.0, xid=0))
    outputs += p.handle(PodResourcesDiff("n", 45_000, added=(PB,), removed=(PA,)))
    since = SinceLast(30_000, ecc_dbe_volatile=1.0)
    sample = DcgmSample("n", 60_000, G0, 0, "A100", "n", util_pct=50.0, xid=48, since_last=since)
    outputs += p.handle(sample)
    alerts = [o for o in outputs if isinstance(o, Alert) and o.status == "firing"]
    assert sorted(a.kind for a in alerts) == ["memory-fault", "xid"]
    for a in alerts:
        assert [(h.pod, h.uid) for h in a.holders] == [("a", "uid-a"), ("b", "uid-b")]
