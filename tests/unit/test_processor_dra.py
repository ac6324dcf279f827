"""The worker's processor on a DRA node: devices placed through ResourceSlices, holders from
PodResources DRA rows and their claims (shared, time-sliced, consumable capacity, static and
dynamic MIG, an adminAccess observer), in any arrival order."""

from __future__ import annotations

import itertools

import pytest

from contract.inputs import (
    ClaimConfig,
    ClaimConsumer,
    ClaimResult,
    DcgmSample,
    DcgmScrape,
    DeviceAssignment,
    DeviceInventory,
    DraDevice,
    ExporterClaim,
    GpuInfo,
    MigInfo,
    PodResourcesSnapshot,
    ResourceClaimRecord,
    ResourceSliceRecord,
)
from contract.outputs import AttributionEvent
from contract.records import replace
from gpuattr.report import accumulate
from infra.settings import AlertSettings
from streams.core.alerts.alerts import step
from streams.core.flow.processor import Processor, Tables
from streams.core.lifetimes import HISTORY_MS
from streams.present.views import device_row, usage_text
from tests.unit.test_spine import UNBOUNDED

NODE = "dra-node"
D = "gpu.nvidia.com"
GPU = [f"GPU-{i}{i}{i}{i}{i}{i}{i}{i}-0000-4000-8000-00000000000{i}" for i in range(5)]
MIG7 = "MIG-77777777-0000-5000-8000-000000000007"
T = 1_700_000_000_000

SLICE = ResourceSliceRecord(
    NODE,
    T,
    "dra-node-gpu.nvidia.com",
    D,
    NODE,
    1,
    (
        DraDevice("gpu-0", "gpu", GPU[0]),
        DraDevice("gpu-0-mig-1g10gb-19-0", "mig", MIG7, GPU[0], "1g.10gb"),
        DraDevice("gpu-0-mig-3g40gb-9-4", "mig", None, GPU[0], "3g.40gb"),
        DraDevice("gpu-1", "gpu", GPU[1]),
        DraDevice(
            "gpu-2", "gpu", GPU[2], multiple_allocations=True, capacity=(("memory", "80Gi"),)
        ),
        DraDevice("gpu-3", "gpu", GPU[3]),
        DraDevice("gpu-4", "gpu", GPU[4]),
    ),
)
INVENTORY = DeviceInventory(
    NODE,
    T,
    "nvml",
    tuple(GpuInfo(i, u, "NVIDIA H100 80GB HBM3") for i, u in enumerate(GPU)),
    (MigInfo(MIG7, GPU[0], 7, "1g.10gb"),),
)


def result(device: str, **kw: object) -> ClaimResult:
    return ClaimResult("gpu", D, NODE, device, **kw)  # type: ignore[arg-type]


def claim(
    name: str,
    results: tuple[ClaimResult, ...],
    pods: tuple[str, ...],
    config: tuple[ClaimConfig, ...] = (),
    ns: str = "ml",
) -> ResourceClaimRecord:
    consumers = tuple(ClaimConsumer("pods", p, f"uid-{p}") for p in pods)
    return ResourceClaimRecord(NODE, T, ns, name, f"claim-{name}", results, consumers, config)


TIME_SLICED = (ClaimConfig(D, ("gpu",), "GpuConfig", "time-slicing"),)
CLAIMS = (
    claim("infer", (result("gpu-1"),), ("infer-a", "infer-b", "infer-c"), TIME_SLICED),
    claim("cc-1", (result("gpu-2", share_id="s1", consumed=(("memory", "20Gi"),)),), ("cc-a",)),
    claim("cc-2", (result("gpu-2", share_id="s2", consumed=(("memory", "40Gi"),)),), ("cc-b",)),
    claim("train", (result("gpu-3"),), ("train-0",)),
    claim("mig-static", (result("gpu-0-mig-1g10gb-19-0"),), ("mig-a",)),
    claim("mig-dyn", (result("gpu-0-mig-3g40gb-9-4"),), ("mig-b",)),
    claim(
        "dcgm",
        tuple(result(f"gpu-{i}", admin_access=True) for i in range(5)),
        ("dcgm-exporter-x2k4q",),
        ns="gpu-operator",
    ),
)


def row(
    pod: str, claim_name: str, device: str, share: str = "", ns: str = "ml"
) -> DeviceAssignment:
    return DeviceAssignment(
        ns, pod, "main", f"dra:{D}", f"{NODE}/{device}", f"{ns}/{claim_name}", share
    )


ROWS = (
    *(row(p, "infer", "gpu-1") for p in ("infer-a", "infer-b", "infer-c")),
    row("cc-a", "cc-1", "gpu-2", "s1"),
    row("cc-b", "cc-2", "gpu-2", "s2"),
    row("train-0", "train", "gpu-3"),
    row("mig-a", "mig-static", "gpu-0-mig-1g10gb-19-0"),
    row("mig-b", "mig-dyn", "gpu-0-mig-3g40gb-9-4"),
    *(row("dcgm-exporter-x2k4q", "dcgm", f"gpu-{i}", ns="gpu-operator") for i in range(5)),
)
PODRESOURCES = PodResourcesSnapshot(NODE, T, tuple(sorted(ROWS)))


def sample(uuid: str, gi: int | None = None, util: float = 50.0) -> DcgmSample:
    return DcgmSample(
        NODE,
        T + 5000,
        uuid,
        GPU.index(uuid),
        "NVIDIA H100 80GB HBM3",
        NODE,
        mig_instance_id=gi,
        mig_profile=None if gi is None else "1g.10gb",
        util_pct=util if gi is None else None,
        gr_engine_active=None if gi is None else 0.4,
    )


SCRAPE = DcgmScrape(
    NODE,
    T + 5000,
    (
        sample(GPU[0]),
        sample(GPU[0], 7),
        sample(GPU[0], 1),
        sample(GPU[1]),
        sample(GPU[2]),
        sample(GPU[3]),
        sample(GPU[4], util=0.0),
    ),
)


def events(order: tuple[object, ...]) -> dict[str, AttributionEvent]:
    processor = Processor(Tables.in_memory())
    for record in order:
        processor.handle(record)
    outputs = processor.handle(SCRAPE)
    return {o.device_uuid: o for o in outputs if isinstance(o, AttributionEvent)}


SETUP = (INVENTORY, SLICE, *CLAIMS, PODRESOURCES)
EVENTS = events(SETUP)


def holders(event: AttributionEvent) -> list[tuple[str, str | None, float | None, str | None]]:
    return [(h.pod, h.uid, h.allocation_share, h.claim) for h in event.holders]


def test_a_claim_shared_by_three_pods_names_each_with_its_uid_and_no_split() -> None:
    ev = EVENTS[GPU[1]]
    assert (ev.allocation, ev.state, ev.sharing, ev.tenant_count, ev.credit) == (
        "dra",
        "shared",
        "time-slicing",
        3,
        "device-wide",
    )
    assert holders(ev) == [
        (p, f"uid-{p}", None, "ml/infer") for p in ("infer-a", "infer-b", "infer-c")
    ]
    assert ev.usage.scope == "device"
    assert ev.usage.util_pct == 50.0  # the device's figure, credited to nobody in particular
    assert any("dcgm-exporter-x2k4q" in n and "adminAccess" in n for n in ev.notes)


def test_consumable_capacity_shares_are_allocation_shares() -> None:
    ev = EVENTS[GPU[2]]
    assert (ev.state, ev.sharing) == ("shared", "unknown")
    assert holders(ev) == [
        ("cc-a", "uid-cc-a", 0.25, "ml/cc-1"),
        ("cc-b", "uid-cc-b", 0.5, "ml/cc-2"),
    ]


def test_exclusive_claim_and_unclaimed_dra_gpu() -> None:
    ev = EVENTS[GPU[3]]
    assert (ev.allocation, ev.state, ev.sharing, ev.credit) == (
        "dra",
        "exclusive",
        "none",
        "holder",
    )
    assert holders(ev) == [("train-0", "uid-train-0", 1.0, "ml/train")]
    idle = EVENTS[GPU[4]]
    assert (idle.allocation, idle.state, idle.holders) == ("dra", "unallocated", ())


def test_the_admin_access_observer_is_never_credited() -> None:
    for ev in EVENTS.values():
        assert all(h.namespace != "gpu-operator" for h in ev.holders)


def test_mig_static_instance_dynamic_instance_and_parent_stay_apart() -> None:
    static = EVENTS[MIG7]
    assert (static.state, static.sharing, static.mig is not None) == ("exclusive", "mig", True)
    assert holders(static) == [("mig-a", "uid-mig-a", 1.0, "ml/mig-static")]
    dynamic = EVENTS[f"{GPU[0]}/gi1"]
    assert dynamic.state == "unknown"
    assert dynamic.holders == ()
    assert any(
        f"MIG instance of {GPU[0]}, profile 3g.40gb, UUID unknown" in n for n in dynamic.notes
    )
    parent = EVENTS[GPU[0]]
    assert parent.state == "mig-parent"
    assert parent.holders == ()


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_arrival_order_does_not_matter(order: tuple[int, ...]) -> None:
    groups = ((INVENTORY,), (SLICE,), CLAIMS, (PODRESOURCES,))
    assert events(tuple(r for i in order for r in groups[i])) == EVENTS


def test_a_deleted_claim_leaves_the_holder_without_its_word() -> None:
    processor = Processor(Tables.in_memory())
    for record in SETUP:
        processor.handle(record)
    train = CLAIMS[3]
    processor.handle(
        ResourceClaimRecord(NODE, T + 1, train.namespace, train.name, train.uid, deleted=True)
    )
    outputs = processor.handle(SCRAPE)
    ev = next(o for o in outputs if isinstance(o, AttributionEvent) and o.device_uuid == GPU[3])
    (holder,) = ev.holders
    assert (holder.pod, holder.uid, holder.uid_status) == ("train-0", None, "no-pod-watch")
    assert any("ml/train" in n and "not seen allocated" in n for n in ev.notes)
    assert not processor.tables.dra_claims.get(f"{NODE}/ml/train")


def test_held_devices_no_slice_has_placed_are_unknown_not_unallocated() -> None:
    processor = Processor(Tables.in_memory())
    for record in (INVENTORY, *CLAIMS, PODRESOURCES):  # the driver has published nothing yet
        processor.handle(record)
    assert NODE not in processor.tables.dra_slices
    outputs = processor.handle(SCRAPE)
    ev = next(o for o in outputs if isinstance(o, AttributionEvent) and o.device_uuid == GPU[1])
    # the pods hold gpu-1, but nothing says which GPU that is: unknown, not unallocated
    assert (ev.state, ev.holders, ev.allocation) == ("unknown", (), "dra")
    assert any("in no ResourceSlice" in n for n in ev.notes)
    index = processor.tables.node_devices[NODE]
    assert f"dra:{D}/{NODE}/gpu-1" in index.unresolved
    assert index.remembered == ()


def test_slices_deleted_while_claims_stay_allocated_keep_held_devices_where_they_were() -> None:
    """A kubelet restart deletes the node's ResourceSlices; the driver publishes them again
    (under a new name) tens of seconds later, while every claim stays allocated. Seen on the
    real node (tests/realnode): the held GPUs must not lose their holders in that window."""
    processor = Processor(Tables.in_memory())
    for record in SETUP:
        processor.handle(record)
    processor.handle(ResourceSliceRecord(NODE, T + 1, SLICE.name, D, NODE, 1, (), deleted=True))
    assert NODE not in processor.tables.dra_slices
    during = {o.device_uuid: o for o in processor.handle(SCRAPE) if isinstance(o, AttributionEvent)}
    assert not [d for d in during if d.startswith("dra:")], "no held device became unplaced"
    for uuid in (GPU[1], GPU[2], GPU[3]):
        assert holders(during[uuid]) == holders(EVENTS[uuid]), uuid
        assert during[uuid].state == EVENTS[uuid].state
    assert any(
        "kept where the node's ResourceSlices last placed" in n for n in during[GPU[1]].notes
    )
    index = processor.tables.node_devices[NODE]
    assert f"dra:{D}/{NODE}/gpu-1" in dict(index.remembered)
    # the dynamic MIG placement was never placed: it stays what it was, known by its parent
    assert f"dra:{D}/{NODE}/gpu-0-mig-3g40gb-9-4" in index.unresolved

    processor.handle(replace(SLICE, ts_ms=T + 2, name=SLICE.name + "-z8x7p"))
    after = {o.device_uuid: o for o in processor.handle(SCRAPE) if isinstance(o, AttributionEvent)}
    assert processor.tables.node_devices[NODE].remembered == ()
    assert holders(after[GPU[1]]) == holders(EVENTS[GPU[1]])
    assert not any("kept where" in n for n in after[GPU[1]].notes)


def test_a_republished_slice_decides_anew_and_a_remembered_device_leaves_with_its_holders() -> None:
    processor = Processor(Tables.in_memory(), life=UNBOUNDED)
    for record in SETUP:
        processor.handle(record)
    processor.handle(ResourceSliceRecord(NODE, T + 1, SLICE.name, D, NODE, 1, (), deleted=True))
    index = processor.tables.node_devices[NODE]
    assert f"dra:{D}/{NODE}/gpu-3" in dict(index.remembered)
    # the training pod ends (and the exporter's observer claim leaves gpu-3) while no slice
    # lists the device: it is remembered as long as its holder history is (a late sample
    # still finds who held it), then forgotten
    kept = tuple(sorted(r for r in ROWS if not r.device_id.endswith("/gpu-3")))
    processor.handle(PodResourcesSnapshot(NODE, T + 2, kept))
    assert f"dra:{D}/{NODE}/gpu-3" in dict(processor.tables.node_devices[NODE].remembered)
    processor.handle(PodResourcesSnapshot(NODE, T + 3 + HISTORY_MS, kept))
    index = processor.tables.node_devices[NODE]
    assert f"dra:{D}/{NODE}/gpu-3" not in dict(index.remembered)
    assert all(f"dra:{D}/{NODE}/gpu-3" not in bases for bases in index.keys.values())
    # the driver comes back and names gpu-1 another GPU: the slice, not the memory, decides
    moved = tuple(
        replace(d, uuid=GPU[4])
        if d.name == "gpu-1"
        else replace(d, uuid=GPU[1])
        if d.name == "gpu-4"
        else d
        for d in SLICE.devices
    )
    processor.handle(replace(SLICE, ts_ms=T + 4 + HISTORY_MS, pool_generation=2, devices=moved))
    index = processor.tables.node_devices[NODE]
    assert index.remembered == ()
    assert f"dra:{D}/{NODE}/gpu-1" in index.keys[GPU[4]]


def exporter_view(uuid: str, *claims: tuple[str, str | None]) -> tuple[bool, str, str]:
    """The worker's judgment of the exporter's DRA labels on one device's row copies."""
    processor = Processor(Tables.in_memory())
    for record in SETUP:
        processor.handle(record)
    stamped = tuple(
        ExporterClaim("ml", pod, "main", dra_claim=claim, dra_device=f"{D}/{NODE}/gpu-x")
        for pod, claim in claims
    )
    scrape = DcgmScrape(NODE, T + 5000, (replace(sample(uuid), exporter_claims=stamped),))
    (ev, *_) = (o for o in processor.handle(scrape) if isinstance(o, AttributionEvent))
    return ev.exporter.trusted, ev.exporter.reason, ev.exporter.verdict


def test_exporter_dra_labels_are_judged_like_its_pod_labels() -> None:
    assert exporter_view(GPU[3], ("train-0", "ml/train")) == (
        True,
        "exporter's pod is the only holder",
        "trusted",
    )
    assert exporter_view(GPU[3], ("train-0", "ml/other")) == (
        False,
        "exporter names DRA claim ml/other for ml/train-0, which holds this device through "
        "ml/train",
        "wrong-claim",
    )
    # a shared claim: one full-value copy per pod, as dcgm-exporter's DRA mode prints it
    assert exporter_view(GPU[1], ("infer-a", "ml/infer"), ("infer-b", "ml/infer")) == (
        False,
        "shared device: identical per-pod copies of one device-wide row",
        "shared-device",
    )


def test_views_alerts_and_report_treat_dra_holders_like_any_other() -> None:
    shared = EVENTS[GPU[1]]
    row = device_row(shared, None)
    assert (row.allocation, row.state, row.tenant_count) == ("dra", "shared", 3)
    assert {h.claim for h in row.holders} == {"ml/infer"}
    assert usage_text(row) == "3 tenants · device-wide 50%"  # never a per-pod figure

    # an idle exclusive DRA GPU opens an idle alert naming its holder and UID
    policy = AlertSettings.model_construct(idle_window_s=10)
    idle = replace(EVENTS[GPU[3]], usage=replace(EVENTS[GPU[3]].usage, util_pct=0.0))
    state, alerts = step(None, idle, policy)
    later = replace(idle, ts_ms=idle.ts_ms + 11_000)
    _, alerts = step(state, later, policy)
    (alert,) = alerts
    assert (alert.kind, [(h.pod, h.uid) for h in alert.holders]) == (
        "idle",
        [("train-0", "uid-train-0")],
    )

    # GPU-hours: held by the claim's pods, a shared claim's hours in the shared column
    lines = accumulate(
        [shared, replace(shared, ts_ms=shared.ts_ms + 3_600_000)],
        max_gap_s=7200,
        idle_threshold_pct=5,
    )
    assert {(line.workload, round(line.held_gpu_hours, 3)) for line in lines} == {
        ("Pod/infer-a", 0.333),
        ("Pod/infer-b", 0.333),
        ("Pod/infer-c", 0.333),
    }
    assert all(line.busy_gpu_hours is None for line in lines)  # no per-pod usage on a shared GPU
