"""Windows measure what was measured: an idle, low-efficiency or thermal episode never spans a gap
without readings longer than ``reading_gap_s``, and unknown is never idle in any view."""

from __future__ import annotations

import pytest

from contract.inputs import (
    AgentStatus,
    ClockTick,
    DcgmSample,
    DeviceAssignment,
    NodeRecord,
    NodeSupply,
    PodRecord,
    PodResourcesSnapshot,
    SourceStatus,
)
from contract.outputs import (
    Activity,
    Alert,
    AttributionEvent,
    Health,
    Telemetry,
    Usage,
)
from contract.records import replace
from infra.settings import AlertSettings
from streams.core.alerts.alerts import DeviceAlerts, step
from streams.core.alerts.episodes import gap_ended
from streams.core.flow.processor import Output, Processor, Tables
from streams.core.keys import alert_key
from streams.present.promseries import families
from streams.present.views import Filter, device_row, select
from tests.unit.test_alerts import ev as alerts_ev
from tests.unit.test_spine import UNBOUNDED

POLICY = AlertSettings(
    idle_window_s=60,
    low_eff_window_s=60,
    thermal_window_s=60,
    cooldown_s=0,
)  # reading_gap_s: its default, 180 s
IDLE = (1.0, None, None)  # busy, effective, GPU temperature
WASTE = (100.0, 3.0, None)
HOT = (80.0, None, 90.0)


def ev(ts_s: float, reading: tuple[float, float | None, float | None]) -> AttributionEvent:
    busy, effective, temp = reading
    return replace(
        alerts_ev(ts_s, busy),
        activity=Activity(busy_pct=busy, effective_pct=effective),
        health=Health(gpu_temp_c=temp),
    )


def unread(ts_s: float, last_sample_s: float) -> AttributionEvent:
    """A heartbeat: the exporter stopped answering; its last sample at ``last_sample_s``."""
    why = Telemetry(
        "unknown", "exporter-unreachable", "dcgm-exporter failing", None, int(last_sample_s * 1000)
    )
    blank = Usage("device", None, None, None, None, None, None, None)
    return replace(
        ev(ts_s, IDLE),
        origin="heartbeat",
        telemetry=why,
        usage=blank,
        activity=Activity(),
        health=Health(),
    )


def run(events: list[AttributionEvent]) -> tuple[DeviceAlerts | None, list[Alert]]:
    state: DeviceAlerts | None = None
    out: list[Alert] = []
    for e in events:
        state, alerts = step(state, e, POLICY)
        out.extend(alerts)
    return state, out


KINDS = [
    pytest.param("idle", IDLE, id="idle"),
    pytest.param("low-efficiency", WASTE, id="low-efficiency"),
    pytest.param("thermal", HOT, id="thermal"),
]


@pytest.mark.parametrize(("kind", "reading"), KINDS)
def test_a_gap_longer_than_the_bound_restarts_a_pending_window(
    kind: str, reading: tuple[float, float | None, float | None]
) -> None:
    """30 s of the condition, the exporter down for two hours, then the condition again: the
    window restarts at the first reading after the gap, and fires only a window later."""
    events = [ev(0, reading), ev(30, reading), unread(240, 30), unread(7200, 30)]
    events += [ev(7230 + t, reading) for t in range(0, 70, 10)]
    _, alerts = run(events)
    assert [(a.kind, a.status, a.started_ms // 1000, a.ts_ms // 1000) for a in alerts] == [
        (kind, "firing", 7230, 7290)
    ]


@pytest.mark.parametrize(("kind", "reading"), KINDS)
@pytest.mark.parametrize(
    ("previous_s", "started_s"),
    [
        pytest.param(30, 7230, id="gap-of-two-hours-restarts"),
        pytest.param(7200, 0, id="gap-within-the-bound-keeps-the-window"),
        pytest.param(None, 0, id="previous-scrape-not-known"),
    ],
)
def test_a_reading_after_a_gap_no_event_showed_restarts_the_window(
    kind: str,
    reading: tuple[float, float | None, float | None],
    previous_s: int | None,
    started_s: int,
) -> None:
    """Nothing came between two readings (no heartbeat): the reading's own interval since the
    agent's previous scrape of the device says how long the device went unread."""
    state, _ = run([ev(0, reading), ev(30, reading)])
    previous_ms = None if previous_s is None else previous_s * 1000
    state, alerts = step(state, ev(7230, reading), POLICY, previous_ms)
    for t in range(7240, 7300, 10):
        state, more = step(state, ev(t, reading), POLICY, (t - 10) * 1000)
        alerts += more
    assert [(a.kind, a.status, a.started_ms // 1000) for a in alerts] == [
        (kind, "firing", started_s)
    ]


@pytest.mark.parametrize(("kind", "reading"), KINDS)
def test_a_gap_longer_than_the_bound_resolves_a_firing_alert(
    kind: str, reading: tuple[float, float | None, float | None]
) -> None:
    events = [ev(t, reading) for t in range(0, 70, 10)] + [unread(150, 60), unread(250, 60)]
    _, alerts = run(events)
    assert [(a.kind, a.status, a.ts_ms // 1000) for a in alerts] == [
        (kind, "firing", 60),
        (kind, "resolved", 250),  # 190 s without a reading: more than the 180 s bound
    ]
    assert "no reading for 190s" in alerts[1].summary
    assert [h.uid for h in alerts[1].holders] == ["uid-a"]


@pytest.mark.parametrize(("kind", "reading"), KINDS)
def test_a_gap_within_the_bound_neither_starts_nor_ends_a_window(
    kind: str, reading: tuple[float, float | None, float | None]
) -> None:
    events = [ev(0, reading), ev(10, reading), unread(100, 10), unread(185, 10)]
    events += [ev(t, reading) for t in range(200, 260, 10)]  # 250 s: the window from 0 is over
    _, alerts = run(events)
    assert [(a.kind, a.status, a.started_ms // 1000, a.ts_ms // 1000) for a in alerts] == [
        (kind, "firing", 0, 200)
    ]


# --- the whole worker: the exporter down for two hours between idle readings

G0 = "GPU-00000000-aaaa"
P0 = DeviceAssignment("ml", "p0", "main", "nvidia.com/gpu", G0)
MIN = 60_000


def idle_sample(ts_ms: int) -> DcgmSample:
    return DcgmSample("n", ts_ms, G0, 0, "A100", "n", util_pct=0.0)


def exporter_down(ts_ms: int, since_ms: int) -> AgentStatus:
    return AgentStatus(
        "n",
        ts_ms,
        (SourceStatus("dcgm", "failing", since_ms, "unreachable", "connection refused"),),
    )


def test_two_hours_without_readings_are_not_idle_time_in_alerts_views_or_supply() -> None:
    # records minutes apart with no tick between them: no jump bound
    p = Processor(
        Tables.in_memory(), POLICY.model_copy(update={"idle_window_s": 1800.0}), UNBOUNDED
    )
    p.handle(NodeRecord("n", 0, (("nvidia.com/gpu.product", "A100"),)))
    p.handle(PodRecord("n", 0, "uid-p0", "ml", "p0", 0))
    p.handle(PodResourcesSnapshot("n", 0, (P0,)))
    outputs: list[Output] = []
    for t in range(0, 5 * MIN + 1, 30_000):  # five minutes at 0 %
        outputs += p.handle(idle_sample(t))
    last = 5 * MIN
    during: list[AttributionEvent] = []
    for t in range(last + 30_000, last + 120 * MIN, 30_000):  # the exporter down for two hours
        out = p.handle(exporter_down(t, last + 30_000))
        during += [o for o in out if isinstance(o, AttributionEvent) and o.device_uuid == G0]
        outputs += out
    assert during
    assert during[-1].telemetry.status == "unknown"
    state = p.tables.alert_state.get(alert_key("n", G0))
    row = device_row(during[-1], state)
    assert (row.idle_since_ms, row.idle_s) == (None, None)  # unknown is never idle
    assert select([row], Filter(idle=True)) == []
    idle_series = [f for f in families([row]) if f.name == "gpuattr_device_idle_seconds"]
    assert [f.samples for f in idle_series] == [[]]
    back = last + 125 * MIN
    outputs += p.handle(AgentStatus("n", back, (SourceStatus("dcgm", "ok", back),)))
    outputs += p.handle(idle_sample(back))  # one 0 % reading
    assert not [o for o in outputs if isinstance(o, Alert) and o.status == "firing"]
    state = p.tables.alert_state.get(alert_key("n", G0))
    assert state is not None
    assert state.idle is not None
    assert state.idle.since_ms == back  # a new window, from the first reading after the gap
    supplied = [o for o in outputs if isinstance(o, NodeSupply) and o.devices]
    assert supplied[-1].devices[0].idle_since_ms == back  # not the idle start before the gap


# --- an idle alert resolved because the node was deleted names its holders


def test_an_alert_resolved_by_the_node_deleted_names_its_holders_with_uids() -> None:
    p = Processor(Tables.in_memory(), POLICY)
    p.handle(NodeRecord("n", 0, ()))
    p.handle(PodRecord("n", 0, "uid-p0", "ml", "p0", 0))
    p.handle(PodResourcesSnapshot("n", 0, (P0,)))
    outputs: list[Output] = []
    for t in range(0, 70_000, 10_000):
        outputs += p.handle(idle_sample(t))
    outputs += p.handle(NodeRecord("n", 80_000, (), deleted=True))
    idle = [o for o in outputs if isinstance(o, Alert) and o.kind == "idle"]
    assert [a.status for a in idle] == ["firing", "resolved"]
    resolved = idle[1]
    assert "deleted" in resolved.summary
    assert [(h.namespace, h.pod, h.uid) for h in resolved.holders] == [("ml", "p0", "uid-p0")]


def test_a_device_row_whose_latest_event_has_no_reading_is_not_idle() -> None:
    """Inside the bound the idle episode is still open, but the row (and the series built from
    it) shows only measured idle time."""
    state, _ = run([ev(0, IDLE), ev(30, IDLE)])
    assert state is not None
    assert state.idle is not None
    measured = device_row(ev(60, IDLE), state)
    unknown = device_row(unread(90, 60), state)
    assert (measured.idle_since_ms, measured.idle_s) == (0, 60.0)
    assert (unknown.idle_since_ms, unknown.idle_s) == (None, None)
    assert select([measured, unknown], Filter(idle=True)) == [measured]


def test_a_node_reported_stale_ends_its_windows_and_its_return_starts_new_ones() -> None:
    """The agent itself went silent (its restart loses the previous scrape: no interval)."""
    # records minutes apart with no tick between them: no jump bound
    p = Processor(
        Tables.in_memory(), POLICY.model_copy(update={"idle_window_s": 1800.0}), UNBOUNDED
    )
    p.handle(NodeRecord("n", 0, ()))
    p.handle(PodRecord("n", 0, "uid-p0", "ml", "p0", 0))
    p.handle(PodResourcesSnapshot("n", 0, (P0,)))
    for t in range(0, 5 * MIN + 1, 30_000):
        p.handle(idle_sample(t))
    stale = p.handle(ClockTick(0, 8 * MIN + 30_000))  # silent over three minutes: stale
    assert any(isinstance(o, AttributionEvent) and o.origin == "stale" for o in stale)
    back = 9 * MIN
    p.handle(AgentStatus("n", back, (SourceStatus("dcgm", "ok", back),)))
    p.handle(idle_sample(back))
    state = p.tables.alert_state.get(alert_key("n", G0))
    assert state is not None
    assert state.idle is not None
    assert state.idle.since_ms == back


@pytest.mark.parametrize(
    ("event", "previous_ms", "ends"),
    [
        pytest.param(unread(250, 60), None, True, id="unknown-190s-since-the-last-sample"),
        pytest.param(unread(240, 60), None, True, id="unknown-exactly-at-the-bound"),
        pytest.param(unread(239, 60), None, False, id="unknown-inside-the-bound"),
        pytest.param(ev(250, IDLE), 60_000, True, id="reading-190s-after-the-previous"),
        pytest.param(ev(250, IDLE), 240_000, False, id="reading-10s-after-the-previous"),
        pytest.param(ev(250, IDLE), None, False, id="reading-previous-not-known"),
        pytest.param(
            replace(unread(250, 60), telemetry=Telemetry("unknown", "unplaced", "no slot")),
            None,
            False,
            id="unknown-nothing-says-since-when",
        ),
        pytest.param(
            replace(unread(250, 60), origin="gone"), None, False, id="gone-resolves-by-itself"
        ),
    ],
)
def test_gap_ended(event: AttributionEvent, previous_ms: int | None, ends: bool) -> None:
    assert (gap_ended(event, POLICY, previous_ms) is not None) is ends
