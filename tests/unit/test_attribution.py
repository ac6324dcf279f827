"""Attribution of one sample under every sharing mode: who is listed, who is credited."""

from __future__ import annotations

import pytest

from contract.inputs import DcgmSample, ExporterClaim
from contract.inputs import DeviceAssignment as A
from contract.records import replace
from streams.core.devices.attribution import DeviceContext, PodIdentity, attribute
from streams.core.devices.sharing import sharing_from_labels

G = "GPU-aaaa"


def sample(**kw: object) -> DcgmSample:
    base: dict[str, object] = dict(
        node="n1",
        ts_ms=1000,
        uuid=G,
        gpu_index=0,
        model="A100",
        hostname="n1",
        util_pct=42.0,
        fb_used_mib=1000.0,
    )
    base.update(kw)
    return DcgmSample(**base)  # type: ignore[arg-type]


def claim(pod: str, ns: str = "ml") -> ExporterClaim:
    return ExporterClaim(ns, pod, "c")


MPS = DeviceContext(
    node_sharing=sharing_from_labels(
        {
            "nvidia.com/gpu.sharing-strategy": "mps",
            "nvidia.com/gpu.replicas": "4",
            "nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4060-Laptop-GPU-SHARED",
        }
    )
)
EXCL = DeviceContext(
    node_sharing=sharing_from_labels(
        {"nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/gpu.replicas": "1"}
    )
)
TENANTS = tuple(
    A("mps", f"mps-tenant-{x}", "c", "nvidia.com/gpu", f"{G}::{i}") for i, x in enumerate("abcd")
)


def test_exclusive_holder_is_credited_and_exporter_trusted() -> None:
    ev, flags = attribute(
        sample(exporter_claims=(claim("p"),)), [A("ml", "p", "c", "nvidia.com/gpu", G)], EXCL
    )
    assert (ev.state, ev.sharing, ev.credit, ev.tenant_count) == ("exclusive", "none", "holder", 1)
    assert ev.holders[0].allocation_share == 1.0
    assert (ev.exporter.trusted, ev.exporter.verdict) == (True, "trusted")
    assert ev.usage.util_pct == 42.0
    assert flags == ()


def test_unallocated_device() -> None:
    ev, _ = attribute(sample(), [], EXCL)
    assert (ev.state, ev.credit, ev.holders) == ("unallocated", "none", ())
    assert (ev.exporter.trusted, ev.exporter.verdict) == (True, "trusted")


def test_mps_lab_lists_every_tenant_and_distrusts_the_exporter() -> None:
    ev, flags = attribute(
        sample(util_pct=8.0, exporter_claims=(claim("mps-tenant-b", "mps"),)), TENANTS, MPS
    )
    assert (ev.state, ev.sharing, ev.replicas, ev.tenant_count) == ("shared", "mps", 4, 4)
    assert [h.pod for h in ev.holders] == [f"mps-tenant-{x}" for x in "abcd"]
    assert all(h.allocation_share == 0.25 for h in ev.holders)
    assert ev.credit == "device-wide"
    assert (ev.exporter.trusted, ev.exporter.verdict) == (False, "shared-device")
    assert "4 tenants share this GPU" in ev.summary
    assert "8%" in ev.summary
    assert flags == ()


def test_per_pod_copies_are_recognised_not_added() -> None:
    claims = tuple(
        ExporterClaim("mps", f"mps-tenant-{x}", "c", vgpu=str(i)) for i, x in enumerate("abcd")
    )
    ev, _ = attribute(sample(util_pct=30.0, exporter_claims=claims), TENANTS, MPS)
    assert ev.usage.util_pct == 30.0
    assert "copies" in ev.exporter.reason
    assert (ev.exporter.trusted, ev.exporter.verdict) == (False, "shared-device")


def test_exporter_crediting_a_non_holder_is_flagged() -> None:
    ev, flags = attribute(
        sample(exporter_claims=(claim("ghost"),)), [A("ml", "p", "c", "nvidia.com/gpu", G)], EXCL
    )
    assert (ev.exporter.trusted, ev.exporter.verdict) == (False, "stranger")
    assert [f.claimed.pod for f in flags] == ["ghost"]


def test_several_replicas_held_by_one_pod_count_as_slots() -> None:
    rows = [A("ml", "p", "c", "nvidia.com/gpu", f"{G}::{i}") for i in (1, 5)]
    ev, _ = attribute(sample(), rows, MPS)
    assert len(ev.holders) == 1
    assert (ev.holders[0].slots, ev.holders[0].allocation_share) == (2, 0.5)
    assert ev.credit == "holder"  # one tenant: the whole device's activity is that pod's


def test_mig_instance_uses_profiling_field_not_gpu_util() -> None:
    ev, _ = attribute(
        sample(mig_instance_id=3, mig_profile="1g.10gb", util_pct=0.0, gr_engine_active=0.61),
        [A("ml", "p", "c", "nvidia.com/mig-1g.10gb", "MIG-x")],
        DeviceContext(mig_uuid="MIG-x"),
    )
    assert (ev.state, ev.sharing, ev.device_uuid) == ("exclusive", "mig", "MIG-x")
    assert ev.usage.util_pct == 61.0
    assert ev.usage.util_source == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    assert ev.usage.scope == "mig-instance"


def test_pod_identity_comes_from_the_resolver() -> None:
    ctx = DeviceContext(resolve_pod=lambda ns, pod, ts: PodIdentity("uid-1", "resolved"))
    ev, _ = attribute(sample(), [A("ml", "p", "c", "nvidia.com/gpu", G)], ctx)
    assert (ev.holders[0].uid, ev.holders[0].uid_status) == ("uid-1", "resolved")


@pytest.mark.parametrize(
    ("labels", "rows", "sharing", "note"),
    [
        pytest.param({}, TENANTS[:2], "unknown", "strategy is unknown", id="replicas-no-labels"),
        pytest.param(
            {"nvidia.com/gpu.sharing-strategy": "none"},
            TENANTS[:2],
            "unknown",
            "sharing-strategy=none",
            id="labels-disagree",
        ),
        pytest.param(
            {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "8"},
            TENANTS[:3],
            "time-slicing",
            None,
            id="time-slicing",
        ),
    ],
)
def test_sharing_mode_and_disagreements(
    labels: dict[str, str], rows: tuple[A, ...], sharing: str, note: str | None
) -> None:
    ev, _ = attribute(sample(), rows, DeviceContext(node_sharing=sharing_from_labels(labels)))
    assert ev.sharing == sharing
    assert ev.state == "shared"
    if note:
        assert any(note in n for n in ev.notes)


def test_exporter_modes_are_recognised() -> None:
    copies = tuple(
        ExporterClaim("mps", f"mps-tenant-{x}", "c", vgpu=str(i)) for i, x in enumerate("abcd")
    )
    ev, _ = attribute(sample(exporter_claims=copies), TENANTS, MPS)
    assert ev.exporter.mode == "per-pod-copies"
    ev, _ = attribute(
        sample(util_pct=None, exporter_claims=copies, exporter_split_fields=("util_pct",)),
        TENANTS,
        MPS,
    )
    assert ev.exporter.mode == "per-process"
    assert (ev.exporter.trusted, ev.exporter.verdict) == (False, "per-process")
    assert ev.usage.util_pct is None  # no device-wide figure: none is invented
    assert all(not hasattr(h, "util_pct") for h in ev.holders)
    ev, _ = attribute(sample(exporter_claims=(claim("mps-tenant-b", "mps"),)), TENANTS, MPS)
    assert ev.exporter.mode == "single"


def test_exporter_verdicts_for_the_unchecked_and_the_uncredited() -> None:
    held = [A("ml", "p", "c", "nvidia.com/gpu", G)]
    ev, _ = attribute(sample(), held, EXCL)  # holders known, no pod label at all
    assert (ev.exporter.trusted, ev.exporter.verdict) == (False, "uncredited")
    unknown = replace(EXCL, holders_known=False)
    ev, flags = attribute(sample(exporter_claims=(claim("ghost"),)), [], unknown)
    # holders unknown: the exporter's claim is neither trusted nor called a lie
    assert (ev.state, ev.exporter.verdict, flags) == ("unknown", "unchecked", ())
