"""The low-efficiency alert over event time: decision tables (start, fire, hysteresis, resolve,
cool-down, holders change, gone, effective unknown, overrides), and a property: it never shares
an episode with the idle alert."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract.outputs import (
    Activity,
    Alert,
    AttributionEvent,
    ExporterView,
    Holder,
    Telemetry,
    Usage,
)
from contract.records import replace
from infra.settings import AlertSettings
from streams.core.alerts.alerts import DeviceAlerts, policy_for, step

POLICY = AlertSettings(
    idle_threshold_pct=5,
    idle_hysteresis_pct=2,
    idle_window_s=60,
    cooldown_s=300,
    low_eff_busy_pct=50,
    low_eff_threshold_pct=15,
    low_eff_hysteresis_pct=5,
    low_eff_window_s=60,
)
H1 = Holder("ml", "a", "c", "nvidia.com/gpu", ("GPU-1",), 1, 1.0, "uid-a", "resolved")
H2 = replace(H1, pod="b", uid="uid-b")
Reading = tuple[float | None, float | None]  # (busy %, effective %)


def ev(
    ts_s: float, busy: float | None, eff: float | None, holders: Sequence[Holder] = (H1,)
) -> AttributionEvent:
    return AttributionEvent(
        node="n",
        ts_ms=int(ts_s * 1000),
        device_uuid="GPU-1",
        gpu_uuid="GPU-1",
        gpu_index=0,
        model="H100",
        mig=None,
        state="exclusive" if len(holders) == 1 else ("shared" if holders else "unallocated"),
        sharing="none" if len(holders) < 2 else "mps",
        replicas=None,
        tenant_count=len({h.pod for h in holders}),
        holders=tuple(holders),
        usage=Usage("device", busy, "DCGM_FI_DEV_GPU_UTIL", 500, 1000, 300, 60, 0),
        credit="holder",
        exporter=ExporterView((), True, ""),
        notes=(),
        summary="",
        activity=Activity(
            busy_pct=busy,
            effective_pct=eff,
            effective_source=None if eff is None else "DCGM_FI_PROF_SM_ACTIVE",
        ),
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
    readings: Sequence[Reading], every_s: float = 10, **kw: object
) -> list[AttributionEvent]:
    return [ev(i * every_s, b, e, **kw) for i, (b, e) in enumerate(readings)]  # type: ignore[arg-type]


WASTE: Reading = (100.0, 3.0)  # busy, effective 3 %: the GPU that looks fully used


@pytest.mark.parametrize(
    ("readings", "expected"),
    [
        pytest.param([WASTE] * 8, [("low-efficiency", "firing", 60)], id="fires-once-after-window"),
        pytest.param([WASTE] * 6, [], id="window-not-yet-elapsed"),
        pytest.param([(100.0, 40.0)] * 10, [], id="busy-and-effective"),
        pytest.param([(30.0, 3.0)] * 10, [], id="not-busy-enough"),
        pytest.param([(100.0, None)] * 10, [], id="effective-unknown-never-starts"),
        pytest.param(
            [WASTE] * 7 + [(100.0, 20.0)],
            [("low-efficiency", "firing", 60), ("low-efficiency", "resolved", 70)],
            id="resolves-when-effective-recovers",
        ),
        pytest.param(
            [WASTE] * 7 + [(44.0, 3.0)],
            [("low-efficiency", "firing", 60), ("low-efficiency", "resolved", 70)],
            id="resolves-when-busy-falls",
        ),
        pytest.param(
            [WASTE] * 6 + [(100.0, 19.0), WASTE],
            [("low-efficiency", "firing", 70)],
            id="effective-inside-hysteresis-band-neither-fires-nor-ends",
        ),
        pytest.param(
            [WASTE] * 6 + [(46.0, 3.0), WASTE],
            [("low-efficiency", "firing", 70)],
            id="busy-inside-hysteresis-band-neither-fires-nor-ends",
        ),
        pytest.param(
            [WASTE] * 7 + [(100.0, 16.0), WASTE, (100.0, 17.0)],
            [("low-efficiency", "firing", 60)],
            id="no-flapping-at-threshold-edge",
        ),
        pytest.param(
            [WASTE] * 3 + [(100.0, 40.0)] + [WASTE] * 7,
            [("low-efficiency", "firing", 100)],
            id="recovery-restarts-window",
        ),
        pytest.param(
            [WASTE] * 3 + [(100.0, None)] * 2 + [WASTE] * 2,
            [("low-efficiency", "firing", 60)],
            id="effective-unknown-never-ends",
        ),
        pytest.param(
            [WASTE] * 7 + [(100.0, None), (100.0, 90.0)],
            [("low-efficiency", "firing", 60), ("low-efficiency", "resolved", 80)],
            id="unknown-effective-does-not-resolve",
        ),
    ],
)
def test_low_efficiency(readings: list[Reading], expected: list[tuple[str, str, int]]) -> None:
    assert kinds(run(series(readings))) == expected


def test_fires_with_figures_and_names_the_source() -> None:
    [alert] = run(series([WASTE] * 7))
    f = alert.figures
    assert (f.util_pct, f.busy_threshold_pct, f.effective_pct, f.effective_threshold_pct) == (
        100.0,
        50,
        3.0,
        15,
    )
    assert f.effective_source == "DCGM_FI_PROF_SM_ACTIVE"
    assert alert.window_s == 60
    assert "ml/a" in alert.summary
    assert "busy 100%" in alert.summary
    assert "effective activity 3%" in alert.summary


def test_cooldown_blocks_refire_then_allows_it() -> None:
    readings = [WASTE] * 7 + [(100.0, 50.0)] + [WASTE] * 10
    assert kinds(run(series(readings))) == [
        ("low-efficiency", "firing", 60),
        ("low-efficiency", "resolved", 70),
    ]
    long = [WASTE] * 7 + [(100.0, 50.0)] + [WASTE] * 40  # cool-down over at 370
    assert kinds(run(series(long)))[-1] == ("low-efficiency", "firing", 370)


def test_shared_device_names_every_holder_and_says_device_wide() -> None:
    [alert] = run(series([WASTE] * 7, holders=(H1, H2)))
    assert alert.device_wide
    assert [h.pod for h in alert.holders] == ["a", "b"]
    assert "2 tenants" in alert.summary
    assert "device-wide" in alert.summary


def test_holders_change_resolves_and_is_never_inherited() -> None:
    events = [*series([WASTE] * 7), *(ev(t, *WASTE, holders=(H2,)) for t in range(70, 140, 10))]
    alerts = run(events, POLICY.model_copy(update={"cooldown_s": 0}))
    assert kinds(alerts) == [
        ("low-efficiency", "firing", 60),
        ("low-efficiency", "resolved", 70),
        ("low-efficiency", "firing", 130),  # b's own window, from 70
    ]
    fired, resolved, again = alerts
    assert resolved.id == fired.id
    assert resolved.holders == ()
    assert "holders changed" in resolved.summary
    assert "ml/b" not in resolved.summary
    assert again.started_ms == 70_000
    assert [h.pod for h in again.holders] == ["b"]


def test_holders_leaving_and_device_gone_resolve() -> None:
    left = run([*series([WASTE] * 7), ev(70, 0, None, holders=())])
    assert kinds(left)[-1] == ("low-efficiency", "resolved", 70)
    assert "holders left" in left[-1].summary
    gone = replace(
        ev(80, None, None, holders=()),
        state="unknown",
        origin="gone",
        telemetry=Telemetry("unknown", "gone", "the node was deleted from the API", 80_000),
    )
    alerts = run([*series([WASTE] * 7), gone])
    assert kinds(alerts)[-1] == ("low-efficiency", "resolved", 80)
    assert "the device is gone" in alerts[-1].summary


def test_events_without_a_reading_or_holders_unknown_change_nothing() -> None:
    unknown = Telemetry("unknown", "exporter-unreachable", "dcgm-exporter failing", 0)
    blind = [replace(ev(t, None, None), telemetry=unknown) for t in range(0, 600, 60)]
    assert run(blind) == []
    pending = [*series([WASTE] * 3), *(replace(e, state="unknown") for e in series([WASTE] * 3))]
    state: DeviceAlerts | None = None
    for e in pending[3:]:
        state, _ = step(state, e, POLICY)
    assert state is None or state.low_eff is None


def test_overrides_most_lenient_holder_wins() -> None:
    p = policy_for(
        POLICY,
        [
            {"gpuattr.io/low-efficiency-threshold-pct": "2"},
            {
                "gpuattr.io/low-efficiency-threshold-pct": "10",
                "gpuattr.io/low-efficiency-window-s": "600",
            },
            {"gpuattr.io/low-efficiency-window-s": "120"},
            {"gpuattr.io/low-efficiency-threshold-pct": "nan"},
            {"gpuattr.io/low-efficiency-window-s": "soon"},
        ],
    )
    assert (p.low_eff_threshold_pct, p.low_eff_window_s) == (2, 600)
    assert (p.idle_threshold_pct, p.idle_window_s) == (5, 60)  # idle untouched
    assert run(series([WASTE] * 8), p) == []  # 3 % is not under 2 %
    assert kinds(run(series([(100.0, 1.0)] * 61), p)) == [("low-efficiency", "firing", 600)]


def test_an_idle_override_above_the_busy_band_lifts_the_band() -> None:
    p = policy_for(POLICY, [{"gpuattr.io/idle-threshold-pct": "60"}])
    assert p.idle_threshold_pct == 60
    assert (
        p.low_eff_busy_pct - p.low_eff_hysteresis_pct
        >= p.idle_threshold_pct + p.idle_hysteresis_pct
    )


def test_idle_and_low_efficiency_on_their_own_episodes() -> None:
    """A GPU busy-but-ineffective, then idle: each alert fires on its own episode, the first
    resolved when the second starts."""
    readings = [WASTE] * 7 + [(1.0, 0.5)] * 8
    assert kinds(run(series(readings))) == [
        ("low-efficiency", "firing", 60),
        ("low-efficiency", "resolved", 70),
        ("idle", "firing", 130),
    ]


READING = st.tuples(
    st.one_of(st.none(), st.floats(0, 100)), st.one_of(st.none(), st.floats(0, 100))
)
OVERRIDES = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "gpuattr.io/idle-threshold-pct": st.integers(0, 100).map(str),
            "gpuattr.io/low-efficiency-threshold-pct": st.integers(0, 100).map(str),
        },
    ),
    max_size=2,
)


@settings(max_examples=300, deadline=None)
@given(
    readings=st.lists(READING, max_size=40),
    annotations=OVERRIDES,
    holders_change=st.integers(0, 40),
)
def test_idle_and_low_efficiency_never_share_an_episode(
    readings: list[Reading], annotations: list[dict[str, str]], holders_change: int
) -> None:
    """Whatever the readings and overrides, after every event at most one of the two has an
    episode open (pending or firing), so no episode is ever both."""
    policy = policy_for(POLICY.model_copy(update={"cooldown_s": 0}), annotations)
    state: DeviceAlerts | None = None
    for i, (busy, eff) in enumerate(readings):
        holders = (H1,) if i < holders_change else (H2,)
        state, alerts = step(state, ev(i * 10, busy, eff, holders=holders), policy)
        assert state.idle is None or state.low_eff is None or state.low_eff.episode is None
        firing = {a.kind for a in alerts if a.status == "firing"}
        assert not {"idle", "low-efficiency"} <= firing
