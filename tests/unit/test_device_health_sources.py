"""A device's health as each source says it — the kubelet in its holders' pod statuses and in its
allocatable list, a taint on its DRA device, DCGM — and the device-unhealthy alert to its owners:
disagreement shown, never resolved by guesswork; one episode however many sources see it."""

from __future__ import annotations

import pytest

from contract.inputs import (
    AllocatableDevice,
    DcgmSample,
    DeviceTaint,
    DraDevice,
    ResourceClaimRecord,
    ResourceHealth,
)
from contract.inputs import DeviceAssignment as A
from contract.outputs import Alert, AttributionEvent, Telemetry, Workload
from contract.records import replace
from infra.settings import AlertSettings
from streams.core.alerts import alerts
from streams.core.devices.attribution import (
    DeviceContext,
    DeviceFacts,
    PodIdentity,
    attribute,
    describe,
)
from streams.core.devices.healthsources import allocatable_words, taint_words
from streams.present.views import device_row, health_text

G = "GPU-5f2c9d3e-1a7b-4c6d-8e9f-0a1b2c3d4e5f"
UID = "6b1e9a4c-2d3f-4e5a-8b7c-9d0e1f2a3b4c"
ROW = A("ml", "train-0", "main", "nvidia.com/gpu", G)
POLICY = AlertSettings()


def kubelet(health: str, device: str = G, container: str = "main") -> ResourceHealth:
    return ResourceHealth(container, "nvidia.com/gpu", device, health)  # type: ignore[arg-type]


def ctx(*entries: ResourceHealth, **more: object) -> DeviceContext:
    identity = PodIdentity(UID, "resolved", Workload("Job", "train"), tuple(entries))
    return DeviceContext(resolve_pod=lambda ns, pod, ts: identity, **more)  # type: ignore[arg-type]


def sample(ts_ms: int = 1000) -> DcgmSample:
    return DcgmSample(
        node="n1", ts_ms=ts_ms, uuid=G, gpu_index=0, model="A100", hostname="n1", util_pct=50.0
    )


def unmeasured(context: DeviceContext, ts_ms: int) -> AttributionEvent:
    """The device's event while its exporter is down (the allocation spine's heartbeat)."""
    return describe(
        DeviceFacts("n1", G, 0, "A100"),
        ts_ms,
        (ROW,),
        context,
        "heartbeat",
        Telemetry("unknown", "exporter-unreachable", "dcgm-exporter unreachable", 0),
    )


def test_nothing_but_dcgm_speaks_so_the_event_is_as_it_was() -> None:
    ev, _ = attribute(sample(), [ROW], ctx())
    assert ev.health.sources == ()
    assert ev.health.verdict is None


def test_the_kubelet_says_unhealthy_and_dcgm_sees_nothing_both_stated() -> None:
    ev, _ = attribute(sample(), [ROW], ctx(kubelet("Unhealthy")))
    assert [(w.source, w.state) for w in ev.health.sources] == [
        ("kubelet", "unhealthy"),
        ("dcgm", "healthy"),
    ]
    assert ev.health.sources[0].holder == "ml/train-0"
    assert ev.health.verdict == "unhealthy"


def test_another_containers_or_devices_entry_says_nothing_of_this_device() -> None:
    other = "GPU-00000000-1111-2222-3333-444444444444"
    ev, _ = attribute(
        sample(),
        [ROW],
        ctx(kubelet("Unhealthy", device=other), kubelet("Unhealthy", container="x")),
    )
    assert ev.health.sources == ()


def test_the_kubelets_healthy_is_a_verdict_while_the_exporter_is_down() -> None:
    ev = unmeasured(ctx(kubelet("Healthy")), 5000)
    assert [(w.source, w.state) for w in ev.health.sources] == [
        ("kubelet", "healthy"),
        ("dcgm", "unknown"),
    ]
    assert ev.health.verdict == "healthy"


def test_a_replica_is_matched_by_its_own_id() -> None:
    row = A("ml", "train-0", "main", "nvidia.com/gpu", f"{G}::2")
    ev, _ = attribute(sample(), [row], ctx(kubelet("Unhealthy", device=f"{G}::2")))
    assert ev.health.verdict == "unhealthy"


def test_a_dra_device_is_matched_by_nvidias_cdi_id_and_its_taints_speak() -> None:
    claim = ResourceClaimRecord("n1", 1, "ml", "gpu-claim", "c1a1-uid")
    row = A("ml", "train-0", "main", "dra:gpu.nvidia.com", "n1/gpu-0", claim="ml/gpu-claim")
    entry = ResourceHealth(
        "main", "claim:gpu/gpu", "k8s.gpu.nvidia.com/claim=c1a1-uid-gpu-0", "Unhealthy", "XID 79"
    )
    taint = DeviceTaint("gpu.nvidia.com/xid", "NoExecute", "79")
    device = DraDevice("gpu-0", type="gpu", uuid=G, taints=(taint,))
    context = ctx(entry, claim=lambda ref: claim, taints=taint_words([device], G))
    ev, _ = attribute(sample(), [row], context)
    said = {(w.source, w.state, w.effect) for w in ev.health.sources}
    assert said == {
        ("kubelet", "unhealthy", None),
        ("dra-taint", "unhealthy", "NoExecute"),
        ("dcgm", "healthy", None),
    }
    assert any(w.detail == "XID 79" for w in ev.health.sources)


G2 = "GPU-00000000-1111-2222-3333-444444444444"
MIG = "MIG-9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"


def listed(*ids: str, resource: str = "nvidia.com/gpu") -> tuple[AllocatableDevice, ...]:
    return tuple(AllocatableDevice(resource, i) for i in ids)


def held(device_id: str, resource: str = "nvidia.com/gpu") -> A:
    return A("ml", "train-0", "main", resource, device_id)


@pytest.mark.parametrize(
    ("rows", "allocatable", "said"),
    [
        pytest.param([held(G)], listed(G, G2), [(G, "healthy")], id="listed-healthy"),
        pytest.param([held(G)], listed(G2), [(G, "unhealthy")], id="dropped-unhealthy"),
        pytest.param([held(G)], (), [], id="no-list-says-nothing"),
        pytest.param(
            [held(G)],
            listed(MIG, resource="nvidia.com/mig-1g.10gb"),
            [],
            id="resource-not-listed-says-nothing",
        ),
        pytest.param(
            [held(f"{G}::1"), held(f"{G}::3")],
            listed(f"{G}::0", f"{G}::1", f"{G2}::0"),
            [(f"{G}::1", "healthy")],
            id="replica-whose-gpu-is-listed-otherwise-says-nothing",
        ),
        pytest.param(
            [held(f"{G}::1")],
            listed(f"{G2}::0", f"{G2}::1"),
            [(f"{G}::1", "unhealthy")],
            id="every-replica-of-the-gpu-dropped",
        ),
        pytest.param(
            [held(G)],
            listed(f"{G}::0", f"{G}::1", resource="nvidia.com/gpu.shared") + listed(G2),
            [],
            id="gpu-now-shared-under-another-id-says-nothing",
        ),
        pytest.param(
            [held(MIG, "nvidia.com/mig-1g.10gb")],
            listed("MIG-00000000-0000-4000-8000-000000000000", resource="nvidia.com/mig-1g.10gb"),
            [(MIG, "unhealthy")],
            id="mig-device-dropped",
        ),
        pytest.param(
            [A("ml", "train-0", "main", "dra:gpu.nvidia.com", "n1/gpu-0", claim="ml/c")],
            listed(G2),
            [],
            id="dra-never-listed-says-nothing",
        ),
    ],
)
def test_what_the_allocatable_list_says_of_each_held_id(
    rows: list[A], allocatable: tuple[AllocatableDevice, ...], said: list[tuple[str, str]]
) -> None:
    words = allocatable_words(rows, allocatable)
    assert [(w.source, w.state) for w in words] == [("allocatable", s) for _, s in said]
    for (device_id, _), word in zip(said, words, strict=True):
        assert device_id in word.detail


def test_a_dropped_id_is_unhealthy_with_the_kubelets_reason_and_fires() -> None:
    sick = ctx(allocatable=listed(G2))
    ev, _ = attribute(sample(2000), [ROW], sick)
    assert [(w.source, w.state) for w in ev.health.sources] == [
        ("allocatable", "unhealthy"),
        ("dcgm", "healthy"),
    ]
    assert ev.health.sources[0].detail == (
        f"the kubelet no longer lists {G} of nvidia.com/gpu as allocatable: "
        "its device plugin reports it unhealthy"
    )
    assert ev.health.verdict == "unhealthy"
    # listed again: the everyday case, not said on its own in every event
    back = attribute(sample(3000), [ROW], ctx(allocatable=listed(G, G2)))[0]
    assert (back.health.sources, back.health.verdict) == ((), None)
    fired = run([ev, back])
    assert [a.status for a in fired] == ["firing", "resolved"]
    assert "allocatable: the kubelet no longer lists" in fired[0].summary
    assert "healthy again" in fired[1].summary


def test_a_listed_id_is_said_beside_another_sources_word() -> None:
    """Still listed while the kubelet's status says Unhealthy: the disagreement is shown."""
    ev = attribute(sample(2000), [ROW], ctx(kubelet("Unhealthy"), allocatable=listed(G, G2)))[0]
    assert [(w.source, w.state) for w in ev.health.sources] == [
        ("kubelet", "unhealthy"),
        ("allocatable", "healthy"),
        ("dcgm", "healthy"),
    ]


def test_the_allocatable_word_stands_beside_the_kubelets_while_the_exporter_is_down() -> None:
    ev = unmeasured(ctx(kubelet("Unhealthy"), allocatable=listed(G2)), 5000)
    assert [(w.source, w.state) for w in ev.health.sources] == [
        ("kubelet", "unhealthy"),
        ("allocatable", "unhealthy"),
        ("dcgm", "unknown"),
    ]


def run(events: list[AttributionEvent]) -> list[Alert]:
    state, out = None, list[Alert]()
    for ev in events:
        state, fired = alerts.step(state, ev, POLICY)
        out.extend(f for f in fired if f.kind == "device-unhealthy")
    return out


def test_device_unhealthy_fires_once_for_two_sources_and_resolves_when_healthy() -> None:
    taint = DeviceTaint("gpu.nvidia.com/xid", "NoExecute", "79")
    sick = ctx(
        kubelet("Unhealthy"), taints=taint_words([DraDevice("gpu-0", uuid=G, taints=(taint,))], G)
    )
    fired = run(
        [
            attribute(sample(1000), [ROW], ctx(kubelet("Healthy")))[0],
            attribute(sample(2000), [ROW], ctx(kubelet("Unhealthy")))[0],
            attribute(sample(3000), [ROW], sick)[0],  # a second source on the same failure
            unmeasured(sick, 4000),  # the exporter went down: still the same episode
            attribute(sample(5000), [ROW], ctx(kubelet("Healthy")))[0],
        ]
    )
    assert [(a.status, a.started_ms, a.ts_ms) for a in fired] == [
        ("firing", 2000, 2000),
        ("resolved", 2000, 5000),
    ]
    firing, resolved = fired
    assert firing.id == resolved.id
    assert [(h.pod, h.uid) for h in firing.holders] == [("train-0", UID)]
    assert "kubelet in ml/train-0's status" in firing.summary
    assert "Job/train" in firing.summary
    assert "healthy again" in resolved.summary
    assert firing.figures.health[0].source == "kubelet"


def test_a_noexecute_taint_says_the_holders_will_be_evicted() -> None:
    taint = DeviceTaint("gpu.nvidia.com/health", "NoExecute")
    context = ctx(taints=taint_words([DraDevice("gpu-0", uuid=G, taints=(taint,))], G))
    (firing,) = run([attribute(sample(), [ROW], context)[0]])
    assert "the holders will be evicted" in firing.summary


def test_released_or_handed_over_resolves_and_never_passes_to_the_next_holder() -> None:
    sick = ctx(kubelet("Unhealthy"))
    nobody, _ = attribute(sample(3000), [], ctx())
    fired = run([attribute(sample(2000), [ROW], sick)[0], nobody])
    assert [(a.status, "released" in a.summary) for a in fired] == [
        ("firing", False),
        ("resolved", True),
    ]
    next_holder = A("ml", "other-0", "main", "nvidia.com/gpu", G)
    fired = run(
        [attribute(sample(2000), [ROW], sick)[0], attribute(sample(3000), [next_holder], sick)[0]]
    )
    assert [a.status for a in fired] == ["firing", "resolved", "firing"]
    assert [h.pod for h in fired[2].holders] == ["other-0"]


def test_a_shared_devices_release_names_its_tenants_device_wide() -> None:
    """The resolution names the holders that have just left: two pods, so its figures are the
    device's as a whole, as when it fired."""
    sick = ctx(kubelet("Unhealthy"))
    two = [ROW, A("ml", "train-1", "main", "nvidia.com/gpu", G)]
    nobody, _ = attribute(sample(3000), [], ctx())
    fired = run([attribute(sample(2000), two, sick)[0], nobody])
    assert [(a.status, len({h.pod for h in a.holders}), a.device_wide) for a in fired] == [
        ("firing", 2, True),
        ("resolved", 2, True),
    ]


def test_unknown_holders_neither_open_nor_close_and_a_replay_re_emits() -> None:
    sick = ctx(kubelet("Unhealthy"))
    first, _ = attribute(sample(2000), [ROW], sick)
    state, fired = alerts.step(None, first, POLICY)
    again, replayed = alerts.step(state, first, POLICY)
    assert again is state
    assert [a.id for a in replayed] == [a.id for a in fired if a.kind == "device-unhealthy"]
    unknown = replace(first, ts_ms=3000, state="unknown", holders=())
    later, out = alerts.step(state, unknown, POLICY)
    assert [a for a in out if a.kind == "device-unhealthy"] == []
    assert later.unhealthy == state.unhealthy


def test_top_names_the_sources_that_say_unhealthy() -> None:
    ev, _ = attribute(sample(), [ROW], ctx(kubelet("Unhealthy")))
    row = device_row(ev, None)
    assert health_text(row) == "UNHEALTHY kubelet"
    detail = f"ml/train-0: nvidia.com/gpu {G}: Unhealthy"
    assert row.health_sources[0] == ("kubelet", "unhealthy", detail)
