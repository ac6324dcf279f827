"""Hypothesis strategies shared by the fuzz tests (``tests/unit/test_fuzz_*.py``).

Every agent record drawn here is *valid on the wire*: :func:`contract.codec.encode` writes it and
:func:`contract.codec.decode` reads it back (ints stay in 64 bits, strings are valid Unicode).
Names are drawn mostly from the pools of :mod:`bench.fleet` so that random records collide with
the realistic ones (same nodes, GPUs, pods), plus arbitrary text.

Known traps kept out of the general strategies (each has its own strict xfail test):

* characters that ``str.isdigit`` accepts but ``int`` refuses (Unicode category ``No``,
  e.g. ``²``), and digit runs longer than Python's 4300-digit ``int`` limit — see
  ``test_fuzz_processor.py``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import strategies as st

from agents.dcgm.translate import FIELDS
from agents.types import AgentRecord
from bench.fleet import MIG_GPUS, MIG_INSTANCES, fleet
from contract.inputs import (
    AllocatableDevice,
    DcgmSample,
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
)
from sim.scenario import gpu_uuid, mig_uuid

INT64 = (-(2**63), 2**63 - 1)
START_MS = 1_700_000_000_000
#: exporter-claimed pod UIDs all carry this prefix; no pod record ever uses it, so a holder UID
#: with it can only have been copied from an exporter label.
EXPORTER_UID_PREFIX = "exporter-uid-"

FLEET = fleet(4)
NODES = [n.name for n in FLEET]
GPU_UUIDS = [gpu_uuid(n, g) for n in NODES for g in range(8)]
MIG_UUIDS = [mig_uuid(n, g, gi) for n in NODES for g in MIG_GPUS for gi in MIG_INSTANCES]
POD_NAMES = [f"w{g}-{t}" for g in range(3) for t in range(3)] + [
    "w0--0-g0",
    "w0--1-g0",
    "w1--0-g0",
    "w0--0-g1",
]
RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-1g.10gb",
    "dra:gpu.nvidia.com",
    "amd.com/gpu",
    "",
]

#: Unicode text without lone surrogates (not valid UTF-8) and without category ``No`` (digits
#: ``int`` refuses; see the module docstring).
_CHARS = st.characters(exclude_categories=["Cs", "No"])
text = st.text(_CHARS, max_size=24)
#: Unicode text protobuf accepts in ``string`` fields (no lone surrogates), ``No`` included.
proto_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=24)


def pick(pool: list[str]) -> st.SearchStrategy[str]:
    """Mostly a realistic name from ``pool``, sometimes arbitrary text."""
    return st.one_of(st.sampled_from(pool), text)


ints64 = st.integers(*INT64)
timestamps = st.one_of(
    st.integers(START_MS - 3_600_000, START_MS + 3_600_000),
    st.integers(START_MS, START_MS + 100),  # collisions and near-ties
    ints64,
)
small_ints = st.one_of(st.integers(-2, 16), ints64)
floats = st.one_of(
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 0.5, 3.0, 99.9, 100.0, -1.0, 1e308]),
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


def sorted_tuple(elements: st.SearchStrategy[Any], max_size: int = 12) -> st.SearchStrategy[Any]:
    return st.lists(elements, max_size=max_size).map(lambda xs: tuple(sorted(set(xs))))


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

agent_records: st.SearchStrategy[AgentRecord] = st.one_of(
    snapshots, diffs, samples, pods, pod_lists, node_records, inventories
)
BY_CLASS: dict[type, st.SearchStrategy[Any]] = {
    PodResourcesSnapshot: snapshots,
    PodResourcesDiff: diffs,
    DcgmSample: samples,
    PodRecord: pods,
    PodListSnapshot: pod_lists,
    NodeRecord: node_records,
    DeviceInventory: inventories,
}


@st.composite
def mutated(draw: st.DrawFn, record: AgentRecord) -> AgentRecord:
    """``record`` with one field replaced by the same field of a fresh random record."""
    fresh = draw(BY_CLASS[type(record)])
    field = draw(st.sampled_from([f.name for f in dataclasses.fields(record)]))
    return dataclasses.replace(record, **{field: getattr(fresh, field)})


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(*INT64),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=12),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


class Captured(logging.Handler):
    """Collects the records of one logger (caplog is function-scoped, which Hypothesis forbids
    inside ``@given``)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self, level: int = logging.DEBUG) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= level]


@contextmanager
def captured(logger: str) -> Iterator[Captured]:
    handler = Captured()
    log = logging.getLogger(logger)
    old_level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)
