"""A shared device's tenants judged by their own measured figures: an idle tenant while the others
work, a memory hog, an orphan process's memory — and never from an allocation share, never
while the device as a whole is idle (the device-wide idle alert speaks then)."""

from __future__ import annotations

from collections.abc import Mapping

from contract.inputs import DcgmSample, DeviceUsage, PodUsage, ProcessUsage
from contract.inputs import DeviceAssignment as A
from contract.outputs import Alert, AttributionEvent, Telemetry
from infra.settings import AlertSettings
from streams.core.alerts import alerts
from streams.core.devices.attribution import (
    DeviceContext,
    DeviceFacts,
    PodIdentity,
    attribute,
    describe,
)
from streams.core.devices.sharing import sharing_from_labels

G = "GPU-5f2c9d3e-1a7b-4c6d-8e9f-0a1b2c3d4e5f"
UIDS = {
    "train": "6b1e9a4c-2d3f-4e5a-8b7c-9d0e1f2a3b4c",
    "infer": "0c9d8e7f-6a5b-4c3d-9e2f-1a0b9c8d7e6f",
    "notebook": "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d",
}
CTX = DeviceContext(
    node_sharing=sharing_from_labels(
        {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}
    ),
    resolve_pod=lambda ns, pod, ts: PodIdentity(UIDS[pod], "resolved"),
)
ROWS = (
    A("ml", "train", "main", "nvidia.com/gpu", f"{G}::0"),
    A("ml", "train", "main", "nvidia.com/gpu", f"{G}::1"),
    A("web", "infer", "server", "nvidia.com/gpu", f"{G}::2"),
    A("lab", "notebook", "jupyter", "nvidia.com/gpu", f"{G}::3"),
)
POLICY = AlertSettings(idle_window_s=600, memory_hog_window_s=120, reading_gap_s=180)
MIN = 60_000


def event(
    ts_ms: int,
    device_util: float,
    per_pod: Mapping[str, tuple[float, float | None]],
    orphans: tuple[ProcessUsage, ...] = (),
    rows: tuple[A, ...] = ROWS,
) -> AttributionEvent:
    usage = DeviceUsage(
        "exporter",
        pods=tuple(
            PodUsage(UIDS[pod], "", pod, "main", fb, sm) for pod, (fb, sm) in per_pod.items()
        ),
        orphans=orphans,
    )
    sample = DcgmSample(
        node="n1",
        ts_ms=ts_ms,
        uuid=G,
        gpu_index=0,
        model="A100",
        hostname="n1",
        util_pct=device_util,
        fb_used_mib=sum(fb for fb, _ in per_pod.values()),
        fb_free_mib=40960 - sum(fb for fb, _ in per_pod.values()),
        usage=usage,
    )
    ev, _ = attribute(sample, rows, CTX)
    return ev


def gone_at(ts_ms: int) -> AttributionEvent:
    """The device's last event: its node was deleted."""
    return describe(
        DeviceFacts("n1", G, 0, "A100"),
        ts_ms,
        (),
        DeviceContext(holders_known=False, holders_note="node deleted"),
        "gone",
        Telemetry("unknown", "gone", "the node was deleted", ts_ms),
    )


def run(events: list[AttributionEvent]) -> list[Alert]:
    state, out = None, []
    previous: int | None = None
    for ev in events:
        state, fired = alerts.step(state, ev, POLICY, previous)
        previous = ev.ts_ms
        out.extend(fired)
    return out


WORKING = {"train": (12000.0, 60.0), "infer": (12000.0, 60.0), "notebook": (5000.0, 0.0)}


def test_idle_tenant_fires_for_that_pod_alone_and_no_device_idle_fires() -> None:
    fired = run([event(t * MIN, 83, WORKING) for t in range(12)])
    assert [(a.kind, a.status) for a in fired] == [("idle-tenant", "firing")]
    (alert,) = fired
    assert {h.pod for h in alert.holders} == {"notebook"}
    assert alert.device_wide is False
    assert alert.figures.util_pct == 0.0
    assert alert.figures.fb_used_mib == 5000.0
    assert "lab/notebook" in alert.summary
    assert alert.started_ms == 0


def test_two_tenants_with_equal_readings_are_two_tenants() -> None:
    both_idle = {"train": (100.0, 1.0), "infer": (100.0, 1.0), "notebook": (9000.0, 90.0)}
    fired = run([event(t * MIN, 91, both_idle) for t in range(12)])
    assert sorted(h.pod for a in fired for h in a.holders) == ["infer", "train"]
    assert len({a.id for a in fired}) == 2  # one id per tenant


def test_device_idle_as_a_whole_raises_the_device_alert_not_tenant_ones() -> None:
    idle = {"train": (100.0, 0.0), "infer": (100.0, 0.0), "notebook": (100.0, 0.0)}
    fired = run([event(t * MIN, 0, idle) for t in range(40)])
    assert [a.kind for a in fired] == ["idle"]


def test_idle_tenant_resolves_when_it_works_and_when_it_leaves() -> None:
    busy = dict(WORKING, notebook=(5000.0, 40.0))
    fired = run(
        [event(t * MIN, 83, WORKING) for t in range(12)]
        + [event(12 * MIN, 83, busy)]
        + [event((13 + t) * MIN, 83, WORKING) for t in range(12)]
        + [
            event(
                25 * MIN, 83, {k: v for k, v in WORKING.items() if k != "notebook"}, rows=ROWS[:3]
            )
        ]
    )
    kinds = [(a.kind, a.status, a.summary.split(":")[-1].strip()) for a in fired]
    assert kinds[0][:2] == ("idle-tenant", "firing")
    assert kinds[1][:2] == ("idle-tenant", "resolved")
    assert kinds[1][2] == "now 40% SM"
    assert kinds[2][:2] == ("idle-tenant", "firing")
    assert kinds[3][:2] == ("idle-tenant", "resolved")
    assert "no longer holds" in fired[3].summary
    assert {h.pod for h in fired[3].holders} == {"notebook"}  # named from the episode


def test_no_reading_is_never_idle() -> None:
    partial = {"train": (12000.0, 60.0), "infer": (12000.0, 60.0)}
    fired = run([event(t * MIN, 83, partial) for t in range(20)])
    assert fired == []


def test_memory_hog_fires_for_the_tenant_holding_most_of_the_memory() -> None:
    hog = {"train": (30000.0, 60.0), "infer": (2000.0, 60.0), "notebook": (1000.0, 50.0)}
    fired = run([event(t * MIN, 83, hog) for t in range(4)])
    assert [(a.kind, a.status) for a in fired] == [("memory-hog", "firing")]
    assert {h.pod for h in fired[0].holders} == {"train"}
    assert fired[0].figures.fb_used_mib == 30000.0
    assert fired[0].figures.fb_threshold_mib == 20480.0


def test_orphan_process_memory_raises_orphaned_memory_naming_the_pid() -> None:
    orphan = ProcessUsage(4242, container_id="9f" * 32, fb_used_mib=6000, sm_util_pct=0)
    busy = {"train": (12000.0, 60.0), "infer": (12000.0, 60.0), "notebook": (5000.0, 30.0)}
    fired = run([event(t * MIN, 83, busy, orphans=(orphan,)) for t in range(7)])
    assert [(a.kind, a.status) for a in fired] == [("orphaned-memory", "firing")]
    assert "pid 4242 container 9f9f9f9f9f9f" in fired[0].summary
    assert fired[0].figures.fb_used_mib == 6000


def test_replayed_event_re_emits_the_same_tenant_alert() -> None:
    events = [event(t * MIN, 83, WORKING) for t in range(11)]  # fires at 10 min
    state = None
    fired: list[Alert] = []
    for ev in events:
        state, fired = alerts.step(state, ev, POLICY)
    again, replayed = alerts.step(state, events[-1], POLICY)
    assert again is state
    assert [a.id for a in replayed] == [a.id for a in fired]
    assert fired  # the last event is the one that fired


def test_a_firing_tenant_deleted_or_its_device_gone_resolves_naming_it() -> None:
    """Resolutions made from events that measure nothing (the pod left, the node deleted)."""
    left = run(
        [event(t * MIN, 83, WORKING) for t in range(11)]
        + [event(11 * MIN, 83, {k: WORKING[k] for k in ("train", "infer")}, rows=ROWS[:3])]
    )
    assert [(a.kind, a.status) for a in left] == [
        ("idle-tenant", "firing"),
        ("idle-tenant", "resolved"),
    ]
    assert "lab/notebook" in left[1].summary
    fired = [event(t * MIN, 83, WORKING) for t in range(11)]
    state = None
    for ev in fired:
        state, _ = alerts.step(state, ev, POLICY)
    gone = gone_at(12 * MIN)
    _, out = alerts.step(state, gone, POLICY)
    resolved = [a for a in out if a.kind == "idle-tenant"]
    assert [a.status for a in resolved] == ["resolved"]
    assert {h.pod for h in resolved[0].holders} == {"notebook"}  # named from the episode
    assert "lab/notebook" in resolved[0].summary
    assert "gone" in resolved[0].summary


def test_memory_hog_resolves_when_the_device_leaves() -> None:
    hog = {"train": (30000.0, 60.0), "infer": (2000.0, 60.0), "notebook": (1000.0, 50.0)}
    state = None
    for t in range(4):
        state, _ = alerts.step(state, event(t * MIN, 83, hog), POLICY)
    gone = gone_at(5 * MIN)
    _, out = alerts.step(state, gone, POLICY)
    (resolved,) = [a for a in out if a.kind == "memory-hog"]
    assert resolved.status == "resolved"
    assert resolved.figures.fb_used_mib is None
    assert "ml/train" in resolved.summary
