"""Sharing is decided per device from the kubelet's device IDs; node labels are only hints.

GFD labels a node ``sharing-strategy=mps, replicas=8`` even when the device plugin's sharing
config replicates only some of its GPUs (``sharing.*.resources[].devices``). A GPU handed out
whole must then be reported exclusive, its one holder with allocation share 1.0.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract import codec
from contract.inputs import (
    AllocatableDevice,
    DcgmSample,
    DeviceAssignment,
    DeviceInventory,
    GpuInfo,
    NodeRecord,
    PodResourcesSnapshot,
)
from contract.outputs import AttributionEvent
from streams.core.devices.identity import EMPTY_INVENTORY
from streams.core.devices.sharing import Advertised, advertised_by_key, decide, sharing_from_labels
from streams.core.flow.processor import Processor, Tables

G0, G1 = "GPU-0000aaaa", "GPU-1111bbbb"
MPS8 = sharing_from_labels(
    {
        "nvidia.com/gpu.sharing-strategy": "mps",
        "nvidia.com/gpu.replicas": "8",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED",
    }
)
TS4 = sharing_from_labels(
    {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}
)
NONE = sharing_from_labels({"nvidia.com/gpu.sharing-strategy": "none"})


def held(pod: str, device_id: str, resource: str = "nvidia.com/gpu") -> DeviceAssignment:
    return DeviceAssignment("ns", pod, "c", resource, device_id)


@pytest.mark.parametrize(
    ("labels", "holders", "advertised", "sharing", "replicas", "note"),
    [
        pytest.param(
            MPS8,
            [held("trainer", G1)],
            Advertised(whole=True),
            "none",
            None,
            "hands out this device whole",
            id="mps-node-whole-gpu-advertised",
        ),
        pytest.param(
            MPS8,
            [held("trainer", G1)],
            None,
            "none",
            None,
            "hands out this device whole",
            id="mps-node-whole-gpu-no-allocatable",
        ),
        pytest.param(
            MPS8,
            [held("a", f"{G0}::0"), held("b", f"{G0}::3")],
            Advertised(replicas=8),
            "mps",
            8,
            None,
            id="mps-gpu-replicated",
        ),
        pytest.param(
            MPS8,
            [held("a", f"{G0}::0")],
            Advertised(replicas=4),
            "mps",
            4,
            "advertises 4 replicas",
            id="device-replica-count-beats-label",
        ),
        pytest.param(
            MPS8,
            [held("a", f"{G0}::0")],
            None,
            "mps",
            8,
            "replica count from node labels",
            id="replicas-from-labels-when-no-allocatable",
        ),
        pytest.param(
            TS4,
            [held("a", G1, "nvidia.com/gpu")],
            Advertised(whole=True),
            "none",
            None,
            "time-slicing",
            id="time-slicing-subset-whole-gpu",
        ),
        pytest.param(
            TS4,
            [held("a", f"{G0}::1", "nvidia.com/gpu.shared")],
            Advertised(replicas=4),
            "time-slicing",
            4,
            None,
            id="time-slicing-renamed-replica",
        ),
        pytest.param(
            NONE,
            [held("a", f"{G0}::1")],
            Advertised(replicas=2),
            "unknown",
            2,
            "sharing-strategy=none",
            id="labels-say-none-ids-say-replicas",
        ),
        pytest.param(
            None,
            [held("a", f"{G0}::1")],
            Advertised(replicas=2),
            "unknown",
            2,
            "no node labels yet",
            id="no-labels-replicas",
        ),
        pytest.param(
            MPS8,
            [],
            Advertised(whole=True),
            "none",
            None,
            "whole",
            id="unallocated-whole",
        ),
        pytest.param(
            MPS8,
            [],
            None,
            "unknown",
            None,
            "whether it is replicated is unknown",
            id="unallocated-no-view-labels-shared",
        ),
        pytest.param(
            NONE,
            [held("a", G1), held("b", G1)],
            Advertised(whole=True),
            "unknown",
            None,
            "2 pods hold one unshared device",
            id="two-pods-one-plain-id",
        ),
    ],
)
def test_decide_per_device(
    labels: object,
    holders: list[DeviceAssignment],
    advertised: Advertised | None,
    sharing: str,
    replicas: int | None,
    note: str | None,
) -> None:
    decision = decide(labels, holders, False, advertised)  # type: ignore[arg-type]
    assert (decision.sharing, decision.replicas) == (sharing, replicas)
    if note is None:
        assert decision.notes == ()
    else:
        assert any(note in n for n in decision.notes), decision.notes


def test_mig_sharing_comes_from_ids_not_labels() -> None:
    mig = [held("a", "MIG-x", "nvidia.com/mig-1g.10gb")]
    assert decide(TS4, mig, True, Advertised(whole=True)).sharing == "mig"
    replica = [held("a", "MIG-x::1", "nvidia.com/mig-1g.10gb")]
    assert decide(NONE, replica, True, Advertised(replicas=2)).sharing == "mig+time-slicing"


def test_advertised_groups_allocatable_ids_by_device() -> None:
    allocatable = [
        *(AllocatableDevice("nvidia.com/gpu", f"{G0}::{i}") for i in range(8)),
        AllocatableDevice("nvidia.com/gpu", G1),
        AllocatableDevice("nvidia.com/mig-1g.10gb", "MIG-unknown-to-inventory"),
    ]
    assert advertised_by_key(allocatable, EMPTY_INVENTORY) == {
        G0: Advertised(whole=False, replicas=8),
        G1: Advertised(whole=True, replicas=0),
    }


# --- property: over generated nodes, through the worker's processor and the codec


@dataclass(frozen=True)
class Gpu:
    uuid: str
    replicas: int  # 1: handed out whole
    holders: tuple[tuple[str, tuple[int, ...]], ...]  # (pod, replica indexes) or (pod, ()) whole


@st.composite
def nodes(draw: st.DrawFn) -> tuple[dict[str, str], tuple[Gpu, ...], bool]:
    strategy = draw(st.sampled_from([None, "none", "mps", "time-slicing"]))
    labels = {"nvidia.com/gpu.product": "X" + draw(st.sampled_from(["", "-SHARED"]))}
    if strategy is not None:
        labels["nvidia.com/gpu.sharing-strategy"] = strategy
    label_replicas = draw(st.sampled_from([None, "1", "2", "4", "8", "16"]))
    if label_replicas is not None:
        labels["nvidia.com/gpu.replicas"] = label_replicas
    gpus = []
    pod = 0
    for i in range(draw(st.integers(1, 6))):
        replicas = draw(st.sampled_from([1, 1, 2, 4, 8]))
        holders: list[tuple[str, tuple[int, ...]]] = []
        if replicas == 1:
            if draw(st.booleans()):
                holders.append((f"p{pod}", ()))
                pod += 1
        else:
            free = list(range(replicas))
            for _ in range(draw(st.integers(0, replicas))):
                take = draw(st.integers(1, 2))
                slots, free = tuple(free[:take]), free[take:]
                if slots:
                    holders.append((f"p{pod}", slots))
                    pod += 1
        gpus.append(Gpu(f"GPU-{i:04d}-feed", replicas, tuple(holders)))
    return labels, tuple(gpus), draw(st.booleans())


@settings(max_examples=150, deadline=None, derandomize=True)
@given(nodes())
def test_an_unreplicated_device_is_never_reported_shared(
    node: tuple[dict[str, str], tuple[Gpu, ...], bool],
) -> None:
    labels, gpus, with_allocatable = node
    resource = "nvidia.com/gpu"
    assignments = tuple(
        sorted(
            DeviceAssignment("ns", pod, "c", resource, g.uuid)
            if not slots
            else DeviceAssignment("ns", pod, "c", resource, f"{g.uuid}::{s}")
            for g in gpus
            for pod, slots in g.holders
            for s in (slots or (None,))
        )
    )
    allocatable = tuple(
        AllocatableDevice(resource, g.uuid if g.replicas == 1 else f"{g.uuid}::{r}")
        for g in gpus
        for r in range(g.replicas)
    )
    proc = Processor(Tables.in_memory())
    records = [
        NodeRecord("n", 1, tuple(sorted(labels.items()))),
        # the node's inventory (NVML): what its exporter's rows are checked against
        DeviceInventory("n", 1, "nvml", tuple(GpuInfo(i, g.uuid) for i, g in enumerate(gpus))),
        PodResourcesSnapshot("n", 2, assignments, allocatable if with_allocatable else ()),
    ]
    events: dict[str, AttributionEvent] = {}
    for g in gpus:
        records.append(DcgmSample("n", 3, g.uuid, None, "X", "n", util_pct=50.0))
    for rec in records:
        for out in proc.handle(codec.decode(codec.encode(rec))):
            if isinstance(out, AttributionEvent):
                events[out.device_uuid] = out
    for g in gpus:
        ev = events[g.uuid]
        if g.replicas == 1:
            assert ev.state != "shared"
            assert ev.sharing not in ("mps", "time-slicing")
            assert ev.replicas is None
            if g.holders:  # held by its plain ID: exclusive, whatever the labels say
                assert ev.sharing == "none", ev.notes
                assert (ev.state, ev.credit, ev.tenant_count) == ("exclusive", "holder", 1)
                assert [h.allocation_share for h in ev.holders] == [1.0]
            else:  # no holder: known whole when advertised, else unknown, never guessed
                assert ev.state == "unallocated"
                assert ev.sharing in (("none",) if with_allocatable else ("none", "unknown"))
        elif g.holders:
            assert ev.state == "shared"
            assert ev.sharing != "none"
            assert {h.pod for h in ev.holders} == {pod for pod, _ in g.holders}
            if with_allocatable:
                assert ev.replicas == g.replicas
                for h in ev.holders:
                    assert h.allocation_share == round(h.slots / g.replicas, 4)
