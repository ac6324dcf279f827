"""Idle, XID and orphaned-memory step functions over event time (no clock, no sleep)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from contract.outputs import Alert, AttributionEvent, ExporterView, Holder, Telemetry, Usage
from contract.records import replace
from infra.settings import AlertSettings
from streams.core.alerts.alerts import DeviceAlerts, policy_for, step

POLICY = AlertSettings(
    idle_threshold_pct=5,
    idle_hysteresis_pct=2,
    idle_window_s=60,
    cooldown_s=300,
    orphan_fb_mib=1024,
    orphan_window_s=30,
)
H1 = Holder("ml", "a", "c", "nvidia.com/gpu", ("GPU-1",), 1, 1.0, "uid-a", "resolved")
H2 = replace(H1, pod="b", uid="uid-b")


def ev(
    ts_s: float,
    util: float | None,
    holders: Sequence[Holder] = (H1,),
    fb: float = 500,
    xid: int | None = 0,
) -> AttributionEvent:
    return AttributionEvent(
        node="n",
        ts_ms=int(ts_s * 1000),
        device_uuid="GPU-1",
        gpu_uuid="GPU-1",
        gpu_index=0,
        model="A100",
        mig=None,
        state="exclusive" if len(holders) == 1 else ("shared" if holders else "unallocated"),
        sharing="none" if len(holders) < 2 else "mps",
        replicas=None,
        tenant_count=len({h.pod for h in holders}),
        holders=tuple(holders),
        usage=Usage("device", util, "DCGM_FI_DEV_GPU_UTIL", fb, 1000, 60, 30, xid),
        credit="holder",
        exporter=ExporterView((), True, ""),
        notes=(),
        summary="",
    )


def run(events: Sequence[AttributionEvent], policy: AlertSettings = POLICY) -> list[Alert]:
    state: DeviceAlerts | None = None
    out: list[Alert] = []
    for e in events:
        state, alerts = step(state, e, policy)
        out.extend(alerts)
    return out


def kinds(alerts: Sequence[Alert]) -> list[tuple[str, str, int]]:
    return [(a.kind, a.status, a.ts_ms // 1000) for a in alerts]


def series(
    utils: Sequence[float | None], every_s: float = 10, **kw: object
) -> list[AttributionEvent]:
    return [ev(i * every_s, u, **kw) for i, u in enumerate(utils)]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("utils", "expected"),
    [
        pytest.param([1] * 8, [("idle", "firing", 60)], id="fires-once-after-window"),
        pytest.param([1] * 6, [], id="window-not-yet-elapsed"),
        pytest.param(
            [1] * 7 + [50, 50],
            [("idle", "firing", 60), ("idle", "resolved", 70)],
            id="resolves-on-recovery",
        ),
        pytest.param(
            [1, 1, 1, 1, 1, 1, 6, 1, 6, 1],
            [("idle", "firing", 70)],
            id="no-reset-inside-hysteresis-band",
        ),
        pytest.param(
            [1] * 7 + [6, 1, 6, 1, 6], [("idle", "firing", 60)], id="no-flapping-at-threshold-edge"
        ),
        pytest.param(
            [1, 1, 1, 50, 1, 1, 1, 1, 1, 1, 1],
            [("idle", "firing", 100)],
            id="recovery-restarts-window",
        ),
        pytest.param([1, None, 1, 1, 1, 1, 1], [("idle", "firing", 60)], id="missing-reading"),
    ],
)
def test_idle(utils: list[float | None], expected: list[tuple[str, str, int]]) -> None:
    assert kinds(run(series(utils))) == expected


def test_cooldown_blocks_refire_then_allows_it() -> None:
    utils = [1] * 7 + [50] + [1] * 10  # fires at 60, resolves at 70, idle again from 80
    assert kinds(run(series(utils))) == [("idle", "firing", 60), ("idle", "resolved", 70)]
    long = [1] * 7 + [50] + [1] * 40  # cool-down (300 s) over at 370: refires then
    assert kinds(run(series(long)))[-1] == ("idle", "firing", 370)


def test_holders_leaving_resolves_and_ids_match() -> None:
    events = [*series([1] * 7), ev(70, 1, holders=())]
    alerts = run(events)
    assert kinds(alerts) == [("idle", "firing", 60), ("idle", "resolved", 70)]
    assert alerts[0].id == alerts[1].id  # one episode, one idempotency key
    assert "holders left" in alerts[1].summary


def test_unallocated_device_never_idles() -> None:
    assert run(series([0] * 20, holders=())) == []


def test_shared_device_names_every_holder_and_says_device_wide() -> None:
    alerts = run(series([1] * 7, holders=(H1, H2)))
    assert len(alerts) == 1
    assert alerts[0].device_wide
    assert [h.pod for h in alerts[0].holders] == ["a", "b"]
    assert "2 tenants" in alerts[0].summary
    assert "device-wide" in alerts[0].summary


def test_ids_are_stable_across_replay() -> None:
    assert [a.id for a in run(series([1] * 8))] == [a.id for a in run(series([1] * 8))]


def test_xid_fires_on_each_new_nonzero_value() -> None:
    events = [
        ev(0, 50, xid=0),
        ev(10, 50, xid=79),
        ev(20, 50, xid=79),
        ev(30, 50, xid=0),  # the exporter restarted: its last-XID value reset, nothing new
        ev(40, 50, xid=79),
        ev(50, 50, xid=48),
    ]
    alerts = run(events)
    assert kinds(alerts) == [
        ("xid", "firing", 10),
        ("xid", "resolved", 40),  # superseded by the new XID
        ("xid", "firing", 40),
        ("xid", "resolved", 50),
        ("xid", "firing", 50),
    ]
    assert [a.figures.xid for a in alerts] == [79, 79, 79, 79, 48]
    assert "ml/a" in alerts[0].summary
    assert "superseded by XID 79" in alerts[1].summary


def test_an_xid_already_there_at_first_sight_is_history_not_an_alert() -> None:
    """DCGM_FI_DEV_XID_ERRORS keeps the last XID until the exporter restarts: seen for the first
    time, it happened before we watched, under holders nobody can name."""
    assert run([ev(0, 50, xid=79), ev(10, 50, xid=79), ev(20, 50, xid=79)]) == []
    # a new one while watched does fire
    assert kinds(run([ev(0, 50, xid=79), ev(10, 50, xid=48)])) == [("xid", "firing", 10)]


def test_an_xid_resolves_after_a_quiet_period() -> None:
    quiet = POLICY.model_copy(update={"xid_quiet_s": 60})
    alerts = run(
        [ev(0, 50, xid=0), ev(10, 50, xid=31), ev(40, 50, xid=31), ev(70, 50, xid=31)], quiet
    )
    assert kinds(alerts) == [("xid", "firing", 10), ("xid", "resolved", 70)]
    assert alerts[0].id == alerts[1].id
    assert "no new XID for 1 min" in alerts[1].summary


def test_an_xid_is_never_inherited_by_the_next_holder() -> None:
    """The last XID stays in the exporter's gauge: an hour later, whoever holds the GPU then is
    neither alerted nor left with the previous holder's open alert."""
    events = [ev(0, 50, xid=0), ev(10, 50, xid=79), ev(20, 50, xid=79)]
    events += [ev(3600, 50, holders=(H2,), xid=79), ev(3610, 50, holders=(H2,), xid=79)]
    alerts = run(events)
    assert kinds(alerts) == [("xid", "firing", 10), ("xid", "resolved", 3600)]
    firing, resolved = alerts
    assert [h.pod for h in firing.holders] == ["a"]
    assert resolved.holders == ()  # it names nobody of the new holders
    assert "ml/a" in resolved.summary
    assert "holders changed" in resolved.summary
    assert "ml/b" not in resolved.summary


def test_idle_time_of_the_previous_holder_is_not_the_next_ones() -> None:
    """Team a idle 29 minutes, its pod ends, team b gets the GPU two seconds later: 65 s after
    that, team b is not "idle for 30.1 min"; its own window starts when it got the GPU."""
    policy = POLICY.model_copy(update={"idle_window_s": 1800})
    a = [ev(t, 1.0) for t in range(0, 29 * 60, 30)]
    b = [ev(29 * 60 + 2 + t, 1.0, holders=(H2,)) for t in range(0, 66, 5)]
    assert run([*a, *b], policy) == []
    # team b alone idle for its own full window: fired, naming b only
    later = [ev(29 * 60 + 2 + t, 1.0, holders=(H2,)) for t in range(0, 1801, 30)]
    [fired] = run([*a, *later], policy)
    assert (fired.kind, fired.started_ms) == ("idle", (29 * 60 + 2) * 1000)
    assert [h.pod for h in fired.holders] == ["b"]


def test_a_firing_idle_episode_resolves_when_holders_change() -> None:
    events = [*series([1] * 8), ev(80, 1, holders=(H2,))]
    alerts = run(events)
    assert kinds(alerts) == [("idle", "firing", 60), ("idle", "resolved", 80)]
    assert "holders changed" in alerts[1].summary
    assert [h.pod for h in alerts[1].holders] == []  # not b's alert


def test_a_uid_resolving_later_is_the_same_holder() -> None:
    pending = replace(H1, uid=None, uid_status="pending")
    events = [ev(0, 1, holders=(pending,)), *[ev(t, 1) for t in range(10, 80, 10)]]
    assert kinds(run(events)) == [("idle", "firing", 60)]


def test_a_device_gone_resolves_what_is_open() -> None:
    gone = replace(
        ev(200, None, holders=(), xid=None),
        state="unknown",
        origin="gone",
        telemetry=Telemetry("unknown", "gone", "the node was deleted from the API", 200_000),
    )
    events = [ev(0, 1, xid=0), *series([1] * 8, xid=13)[1:], replace(gone, ts_ms=75_000)]
    alerts = run(events)
    assert kinds(alerts) == [
        ("xid", "firing", 10),
        ("idle", "firing", 60),
        ("idle", "resolved", 75),
        ("xid", "resolved", 75),
    ]
    assert all("the device is gone" in a.summary for a in alerts[2:])
    # a gone event at a time the device's state already passed (the partition's clock behind
    # the node's) still resolves
    late = run([*series([1] * 8), replace(gone, ts_ms=30_000)])
    assert kinds(late) == [("idle", "firing", 60), ("idle", "resolved", 30)]


def test_events_without_a_reading_neither_start_nor_end_an_idle_window() -> None:
    unknown = Telemetry("unknown", "exporter-unreachable", "dcgm-exporter failing", 0)
    blind = [replace(ev(t, None), telemetry=unknown) for t in range(0, 600, 60)]
    assert run(blind) == []
    # an idle episode under way is not ended by a gap in telemetry
    mixed = [*series([1] * 4), *(replace(e, ts_ms=e.ts_ms + 40_000) for e in blind[:2])]
    mixed += [ev(t, 1) for t in range(110, 140, 10)]
    assert kinds(run(mixed)) == [("idle", "firing", 110)]


def test_orphaned_memory_fires_and_resolves() -> None:
    events = [ev(t, 0, holders=(), fb=21383) for t in range(0, 50, 10)]
    events.append(ev(50, 0, holders=(), fb=200))
    assert kinds(run(events)) == [
        ("orphaned-memory", "firing", 30),
        ("orphaned-memory", "resolved", 50),
    ]


def test_held_memory_is_not_orphaned() -> None:
    assert [a for a in run(series([50] * 10, fb=30000)) if a.kind == "orphaned-memory"] == []


def test_annotation_overrides_most_lenient_wins() -> None:
    p = policy_for(
        POLICY,
        [
            {"gpuattr.io/idle-window-s": "120"},
            {"gpuattr.io/idle-window-s": "600", "gpuattr.io/idle-threshold-pct": "1"},
            {"gpuattr.io/idle-threshold-pct": "oops"},
            {"gpuattr.io/idle-threshold-pct": "nan"},
            {"gpuattr.io/idle-threshold-pct": "-inf"},
            {"gpuattr.io/idle-window-s": "inf"},
            {"gpuattr.io/idle-window-s": "1e400"},
        ],
    )
    assert (p.idle_window_s, p.idle_threshold_pct) == (600, 1)
    assert kinds(run(series([0.5] * 8), p)) == []
