"""Demand of DRA devices: device classes meet the devices they select (NVIDIA's whole GPUs and
MIG devices, the example driver's GPUs), and a ResourceClaim several pending pods share is one
demand — from a node's held devices (:func:`streams.core.demand.supply.node_supply`) through the
demand
stage to its records and alerts."""

from __future__ import annotations

import pytest

from contract import codec
from contract.inputs import ClockTick, GpuRequest, NodeSupply, OwnerRef, PendingPod
from contract.outputs import Alert, Holder, Pool, PoolDemand, Workload
from streams.core.alerts.episodes import Episode
from streams.core.demand.demand import Waiter, matches, pool_demand, requested, waiter_of
from streams.core.demand.supply import AllocatedDevice, node_supply
from streams.core.devices import dra
from streams.core.flow.demandstage import DemandOutput, DemandStage, DemandTables
from streams.present.poolrows import pool_line, pool_row
from tests.unit.test_spine import UNBOUNDED

WHOLE, MIG, EXAMPLE = "dra:gpu.nvidia.com", "dra:mig.nvidia.com", "dra:gpu.example.com"
MIN = 60_000
WINDOW_S = 900.0
W = int(WINDOW_S * 1000)
GPU0 = "GPU-00000000-0000-4000-8000-000000000000"
GPU1 = "GPU-11111111-1111-4000-8000-000000000001"
MIG_A = "MIG-aaaaaaaa-0000-5000-8000-00000000000a"
MIG_B = "MIG-bbbbbbbb-0000-5000-8000-00000000000b"


def held(
    uuid: str, pod: str, driver: str, *, idle: bool, profile: str = "", mig: bool = False
) -> AllocatedDevice:
    """A device a pod holds through a DRA claim of ``driver``, idle since 0 or busy."""
    h = Holder(
        "team",
        pod,
        "main",
        f"dra:{driver}",
        (f"node-1/{uuid}",),
        1,
        uid=f"uid-{pod}",
        uid_status="resolved",
        workload=Workload("Deployment", pod),
        claim=f"team/{pod}-claim",
    )
    episode = Episode(0, holders=(("team", pod, f"uid-{pod}"),)) if idle else None
    return AllocatedDevice(uuid, (h,), True, episode, profile, mig)


#: an A100 node under NVIDIA's driver: one whole GPU busy, the other split into two idle MIG
#: devices (a static one and a dynamic placement, whose profile the slice says)
NVIDIA_NODE = [
    held(GPU0, "trainer", "gpu.nvidia.com", idle=False),
    held(MIG_A, "notebook-a", "gpu.nvidia.com", idle=True, profile="1g.10gb", mig=True),
    held(
        "dra:gpu.nvidia.com/node-1/gpu-1-mig-1g10gb-19-1",
        "notebook-b",
        "gpu.nvidia.com",
        idle=True,
        profile="1g.10gb",
        mig=True,
    ),
]


def waiting(name: str, *requests: GpuRequest, ts: int = 1) -> PendingPod:
    return PendingPod(
        ts,
        "ml",
        name,
        f"uid-{name}",
        0,
        requests,
        workload=OwnerRef("Deployment", "infer"),
        scheduled_status="False",
        scheduled_reason="Unschedulable",
    )


def run(stage: DemandStage, resource: str, *records: object) -> list[DemandOutput]:
    out: list[DemandOutput] = []
    for r in records:
        out += stage.handle(
            r, 0, None if not isinstance(r, PendingPod | NodeSupply) else resource.encode()
        )
    return out


def supply_records(devices: list[AllocatedDevice]) -> dict[str, NodeSupply]:
    return {
        r: NodeSupply(0, "node-1", r, ds) for r, ds in node_supply("NVIDIA-A100", devices).items()
    }


def ticks() -> list[object]:
    return [ClockTick(0, W - 1), ClockTick(0, W), ClockTick(0, 2 * W)]


def last_demand(out: list[DemandOutput], pool: str) -> PoolDemand:
    return [o for o in out if isinstance(o, PoolDemand) and o.pool == pool][-1]


@pytest.mark.parametrize(
    ("driver", "mig", "resource"),
    [
        pytest.param("gpu.nvidia.com", False, WHOLE, id="nvidia-gpu"),
        pytest.param("gpu.nvidia.com", True, MIG, id="nvidia-mig"),
        pytest.param("gpu.example.com", False, EXAMPLE, id="example-driver"),
        pytest.param("gpu.example.com", True, EXAMPLE, id="other-driver-any-device"),
    ],
)
def test_a_dra_device_is_supply_of_the_class_that_selects_it(
    driver: str, mig: bool, resource: str
) -> None:
    assert dra.class_resource(f"dra:{driver}", mig) == resource
    assert dra.class_resource("nvidia.com/gpu", mig) == "nvidia.com/gpu"
    assert dra.selects(resource, mig)


def test_node_supply_splits_nvidias_whole_gpus_from_its_mig_devices() -> None:
    got = node_supply("NVIDIA-A100", NVIDIA_NODE)
    assert {r: [d.device_uuid for d in ds] for r, ds in got.items()} == {
        WHOLE: [GPU0],
        MIG: [MIG_A, "dra:gpu.nvidia.com/node-1/gpu-1-mig-1g10gb-19-1"],
    }
    example = node_supply(None, [held(GPU1, "demo", "gpu.example.com", idle=True)])
    assert list(example) == [EXAMPLE]  # the example driver's class: its own name


def test_idle_mig_slices_raise_no_alert_for_a_pod_that_takes_only_whole_gpus() -> None:
    supplies = supply_records(NVIDIA_NODE)
    stage = DemandStage(DemandTables(), WINDOW_S, life=UNBOUNDED)  # ticks a window apart
    pod = waiting("whole", GpuRequest(WHOLE, 1, claim="ml/whole-claim"))
    out = run(stage, WHOLE, supplies[WHOLE], pod, *ticks())
    assert not [o for o in out if isinstance(o, Alert)]  # its pool's one GPU is busy
    record = last_demand(out, WHOLE)
    assert (record.allocated_gpus, record.idle_count(), record.gpus_requested) == (1, 0, 1)


def test_a_mig_class_pod_meets_the_idle_mig_supply() -> None:
    supplies = supply_records(NVIDIA_NODE)
    stage = DemandStage(DemandTables(), WINDOW_S, life=UNBOUNDED)  # ticks a window apart
    pod = waiting("small", GpuRequest(MIG, 1, mig_profile="1g.10gb", claim="ml/small-claim"))
    out = run(stage, MIG, supplies[MIG], pod, *ticks())
    fired = [o for o in out if isinstance(o, Alert) and o.status == "firing"]
    assert len(fired) == 1
    record = last_demand(out, Pool(MIG, "", "1g.10gb").key())
    assert (record.allocated_gpus, record.idle_count(), record.pending_pods) == (2, 2, 1)


def test_a_v1_supply_record_naming_mig_devices_by_their_driver_offers_none_as_whole_gpus() -> None:
    old = NodeSupply(
        0,
        "node-1",
        WHOLE,
        tuple(d for ds in node_supply("NVIDIA-A100", NVIDIA_NODE).values() for d in ds),
    )
    payload = codec.encode(old).replace(b'"v":2', b'"v":1', 1)
    assert payload.startswith(b'{"schema":"pool.supply","v":1')
    read = codec.decode(payload)
    stage = DemandStage(DemandTables(), WINDOW_S, life=UNBOUNDED)  # ticks a window apart
    out = run(stage, WHOLE, read, waiting("whole", GpuRequest(WHOLE, 1)), *ticks())
    assert not [o for o in out if isinstance(o, Alert)]
    assert last_demand(out, WHOLE).allocated_gpus == 1
    assert not matches(Pool(WHOLE), WHOLE, old.devices[1])


SHARED = GpuRequest(WHOLE, 2, claim="ml/shared-gpus")


@pytest.mark.parametrize(
    ("asks", "devices"),
    [
        pytest.param([(SHARED,), (SHARED,)], 2, id="two-pods-one-claim"),
        pytest.param([(SHARED,), (SHARED,), (SHARED,)], 2, id="three-pods-one-claim"),
        pytest.param(
            [(SHARED,), (GpuRequest(WHOLE, 2, claim="ml/other-gpus"),)], 4, id="two-claims"
        ),
        # a template's claims: one per pod, never shared (named once made, else not at all)
        pytest.param(
            [
                (GpuRequest(WHOLE, 1, claim="ml/a-gpu-x1"),),
                (GpuRequest(WHOLE, 1, claim="ml/b-gpu-x2"),),
            ],
            2,
            id="template-claims-made",
        ),
        pytest.param(
            [(GpuRequest(WHOLE, 1),), (GpuRequest(WHOLE, 1),)], 2, id="template-claims-unmade"
        ),
        pytest.param([(SHARED, GpuRequest(WHOLE, 1)), (SHARED,)], 3, id="shared-and-own"),
    ],
)
def test_a_claim_several_pods_share_is_one_demand(
    asks: list[tuple[GpuRequest, ...]], devices: int
) -> None:
    waiters: list[Waiter] = [
        waiter_of(waiting(f"p{i}", *requests), WHOLE) for i, requests in enumerate(asks)
    ]
    pool = Pool(WHOLE)
    assert requested(pool, waiters) == devices
    record = pool_demand(pool, waiters, [], 5)
    assert (record.pending_pods, record.gpus_requested) == (len(asks), devices)
    # each waiting pod still lists what it asks for itself
    assert [p.gpus for p in record.waiting] == [sum(r.count for r in a) for a in asks]


def test_the_stage_counts_two_pods_sharing_a_claim_once() -> None:
    stage = DemandStage(DemandTables(), WINDOW_S, life=UNBOUNDED)  # ticks a window apart
    one = GpuRequest(WHOLE, 1, claim="ml/shared-gpu")
    out = run(stage, WHOLE, waiting("a", one), waiting("b", one, ts=2))
    record = last_demand(out, WHOLE)
    assert (record.pending_pods, record.gpus_requested) == (2, 1)


def test_a_mig_class_pools_line_counts_mig_instances() -> None:
    small = waiting("small", GpuRequest(MIG, 2, claim="ml/small-claim"))
    record = pool_demand(Pool(MIG), [waiter_of(small, MIG)], [], 5)
    assert "1 pod waits (2 MIG instances" in pool_line(pool_row(record))
