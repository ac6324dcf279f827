"""Hypothesis strategies for every agent record (``contract.inputs``), and their mutations.

Every agent record drawn here is *valid on the wire*: :func:`contract.codec.encode` writes it and
:func:`contract.codec.decode` reads it back. Kubelet device IDs come in every documented form and
their malformed neighbours; names mostly come from the realistic pools of
:mod:`tests.fuzz_strategies.values`.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from agents.dcgm.translate import FIELDS
from agents.types import AgentRecord
from bench.fleet import MIG_INSTANCES
from contract.inputs import (
    AllocatableDevice,
    DcgmSample,
    DcgmScrape,
    DeviceAssignment,
    DeviceInventory,
    ExporterClaim,
    GpuInfo,
    MigInfo,
    NodeRecord,
    OwnerRef,
    PodListSnapshot,
    PodRecord,
    PodResourcesDiff,
    PodResourcesSnapshot,
    SinceLast,
)
from contract.records import field_names, replace
from tests.fuzz_strategies.values import (
    EXPORTER_UID_PREFIX,
    GPU_UUIDS,
    MIG_UUIDS,
    NODES,
    POD_NAMES,
    RESOURCES,
    floats,
    ints64,
    pick,
    small_ints,
    sorted_tuple,
    text,
    timestamps,
)


@st.composite
def device_ids(draw: st.DrawFn) -> str:
    """Kubelet device IDs: every documented form, malformed neighbours, and arbitrary text."""
    gpu = draw(st.sampled_from(GPU_UUIDS))
    replica = draw(st.integers(0, 12))
    index = draw(st.integers(0, 9))
    forms = [
        gpu,
        f"{gpu}::{replica}",
        f"{gpu}::",
        f"{gpu}::x{replica}",
        f"{gpu}::{draw(text)}",
        f"{gpu}::{replica}::{replica}",
        draw(st.sampled_from(MIG_UUIDS)),
        f"{draw(st.sampled_from(MIG_UUIDS))}::{replica}",
        f"MIG-{gpu}/{index}/{replica}",
        f"MIG-{gpu}/x/0",
        f"nvidia{index}",
        f"nvidia{index}/vgpu{replica}",
        f"nvidia{index}/gi{replica}",
        f"nvidia{index}/gi{replica}/vgpu{index}",
        f"pool-{index}/gpu-{replica}",
        "",
        draw(text),
    ]
    return draw(st.sampled_from(forms))


assignments = st.builds(
    DeviceAssignment,
    namespace=pick(["bench", "ml", ""]),
    pod=pick(POD_NAMES),
    container=pick(["main", ""]),
    resource=pick(RESOURCES),
    device_id=device_ids(),
)
allocatable = st.builds(
    AllocatableDevice,
    resource=pick(RESOURCES),
    device_id=device_ids(),
    numa_nodes=st.lists(st.integers(0, 2**31), max_size=3).map(tuple),
)


nodes = pick(NODES)
snapshots = st.builds(
    PodResourcesSnapshot,
    node=nodes,
    ts_ms=timestamps,
    assignments=sorted_tuple(assignments),
    allocatable=sorted_tuple(allocatable, 4),
)
diffs = st.builds(
    PodResourcesDiff,
    node=nodes,
    ts_ms=timestamps,
    added=sorted_tuple(assignments, 6),
    removed=sorted_tuple(assignments, 6),
)
exporter_claims = st.builds(
    ExporterClaim,
    namespace=pick(["bench", "ml", ""]),
    pod=pick(POD_NAMES),
    container=pick(["main", ""]),
    pod_uid=st.one_of(st.none(), st.text(max_size=8).map(EXPORTER_UID_PREFIX.__add__)),
    vgpu=st.one_of(st.none(), st.sampled_from(["0", "1", "7"])),
)
samples = st.builds(
    DcgmSample,
    node=nodes,
    ts_ms=timestamps,
    uuid=pick(GPU_UUIDS),
    gpu_index=st.one_of(st.none(), small_ints),
    model=text,
    hostname=text,
    device=text,
    pci_bus_id=text,
    driver_version=text,
    mig_instance_id=st.one_of(st.none(), st.sampled_from(MIG_INSTANCES), small_ints),
    mig_profile=st.one_of(st.none(), st.just("1g.10gb"), text),
    util_pct=floats,
    gr_engine_active=floats,
    fb_used_mib=floats,
    fb_free_mib=floats,
    power_w=floats,
    temp_c=floats,
    xid=st.one_of(st.none(), st.sampled_from([0, 13, 31, 43, 79]), ints64),
    exporter_claims=st.lists(exporter_claims, max_size=4, unique=True).map(tuple),
    exporter_split_fields=st.lists(st.sampled_from(sorted(FIELDS.values())), unique=True).map(
        lambda xs: tuple(sorted(xs))
    ),
    sm_active=floats,
    sm_occupancy=floats,
    tensor_active=floats,
    dram_active=floats,
    mem_copy_util_pct=floats,
    memory_temp_c=floats,
    sm_clock_mhz=floats,
    row_remap_failure=st.one_of(st.none(), st.booleans()),
    clock_event_reasons=st.one_of(st.none(), st.sampled_from([0, 0x20, 0x48, 0x1FF]), ints64),
    pcie_replays=floats,
    ecc_dbe_volatile=floats,
    uncorrectable_remapped_rows=floats,
    correctable_remapped_rows=floats,
    power_violation_us=floats,
    thermal_violation_us=floats,
    since_last=st.one_of(
        st.none(),
        st.builds(
            SinceLast,
            interval_ms=st.one_of(st.integers(-1, 60_000), ints64),
            pcie_replays=floats,
            ecc_dbe_volatile=floats,
            uncorrectable_remapped_rows=floats,
            correctable_remapped_rows=floats,
            power_violation_us=floats,
            thermal_violation_us=floats,
            resets=st.lists(
                st.sampled_from(["pcie_replays", "ecc_dbe_volatile", "thermal_violation_us"]),
                unique=True,
            ).map(tuple),
        ),
    ),
)
owners = st.one_of(
    st.none(),
    st.builds(
        OwnerRef,
        kind=st.sampled_from(["Deployment", "ReplicaSet", "Job", "CronJob", "StatefulSet", ""]),
        name=pick(["w0", "train", ""]),
        inferred=st.booleans(),
    ),
)
annotation_values = st.one_of(
    st.sampled_from(["0", "1", "50", "-5", "nan", "inf", "-inf", "1e309", "600", "", "x"]), text
)
pod_uids = st.one_of(
    st.sampled_from([f"{n}-{p}" for n in NODES for p in POD_NAMES]),
    st.text(max_size=8).map("uid-".__add__),
    st.just(""),
)
pods = st.builds(
    PodRecord,
    node=nodes,
    ts_ms=timestamps,
    uid=pod_uids,
    namespace=pick(["bench", "ml", ""]),
    name=pick(POD_NAMES),
    created_ms=st.one_of(st.none(), timestamps),
    deletion_ts_ms=st.one_of(st.none(), timestamps),
    deleted=st.booleans(),
    annotations=st.dictionaries(
        st.sampled_from(["gpuattr.io/idle-threshold-pct", "gpuattr.io/idle-window-s", "x"]),
        annotation_values,
    ).map(lambda d: tuple(sorted(d.items()))),
    owner=owners,
    workload=owners,
    resource_version=text,
)
pod_lists = st.builds(
    PodListSnapshot,
    node=nodes,
    ts_ms=timestamps,
    uids=sorted_tuple(pod_uids),
    resource_version=text,
)
node_labels = st.dictionaries(
    st.sampled_from(
        [
            "nvidia.com/gpu.replicas",
            "nvidia.com/gpu.sharing-strategy",
            "nvidia.com/gpu.product",
            "nvidia.com/mig.strategy",
            "nvidia.com/other",
        ]
    ),
    st.one_of(
        st.sampled_from(["1", "4", "0", "", "mps", "time-slicing", "none", "A100-SHARED", "-1"]),
        text,
    ),
).map(lambda d: tuple(sorted(d.items())))
node_records = st.builds(
    NodeRecord,
    node=nodes,
    ts_ms=timestamps,
    labels=node_labels,
    allocatable=st.just((("nvidia.com/gpu", "8"),)),
    deleted=st.booleans(),
)
inventories = st.builds(
    DeviceInventory,
    node=nodes,
    ts_ms=timestamps,
    source=st.sampled_from(["nvml", "file"]),
    gpus=st.lists(
        st.builds(GpuInfo, index=small_ints, uuid=pick(GPU_UUIDS), model=text), max_size=4
    ).map(tuple),
    migs=st.lists(
        st.builds(
            MigInfo,
            mig_uuid=pick(MIG_UUIDS),
            parent_uuid=pick(GPU_UUIDS),
            gi=st.one_of(st.sampled_from(MIG_INSTANCES), small_ints),
            profile=st.one_of(st.none(), text),
        ),
        max_size=4,
    ).map(tuple),
)


@st.composite
def _scrapes(draw: st.DrawFn) -> DcgmScrape:
    """A scrape of one node at one time: its samples carry that node and time (mostly; now and
    then one of another node, which the worker must refuse whole)."""
    node, ts_ms = draw(nodes), draw(timestamps)
    drawn = draw(st.lists(samples, max_size=6))
    foreign = draw(st.integers(0, 9)) == 0
    return DcgmScrape(
        node,
        ts_ms,
        tuple(
            s if foreign and i == 0 else replace(s, node=node, ts_ms=ts_ms)
            for i, s in enumerate(drawn)
        ),
    )


scrapes = _scrapes()
agent_records: st.SearchStrategy[AgentRecord] = st.one_of(
    snapshots, diffs, samples, scrapes, pods, pod_lists, node_records, inventories
)
BY_CLASS: dict[type, st.SearchStrategy[Any]] = {
    PodResourcesSnapshot: snapshots,
    PodResourcesDiff: diffs,
    DcgmSample: samples,
    DcgmScrape: scrapes,
    PodRecord: pods,
    PodListSnapshot: pod_lists,
    NodeRecord: node_records,
    DeviceInventory: inventories,
}


@st.composite
def mutated(draw: st.DrawFn, record: AgentRecord) -> AgentRecord:
    """``record`` with one field replaced by the same field of a fresh random record."""
    fresh = draw(BY_CLASS[type(record)])
    field = draw(st.sampled_from(list(field_names(type(record)))))
    return replace(record, **{field: getattr(fresh, field)})
