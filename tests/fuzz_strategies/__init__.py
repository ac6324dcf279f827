"""Hypothesis strategies shared by the fuzz tests (``tests/unit/test_fuzz_*.py``).

Every agent record drawn here is *valid on the wire*: :func:`contract.codec.encode` writes it and
:func:`contract.codec.decode` reads it back (ints stay in 64 bits, strings are valid Unicode).
Names are drawn mostly from the pools of :mod:`bench.fleet` so that random records collide with
the realistic ones (same nodes, GPUs, pods), plus arbitrary text. The pools and value strategies
are in :mod:`.values`, the record strategies in :mod:`.records`, the log capture in :mod:`.logs`;
everything is importable from this package.

Known traps kept out of the general strategies (each has its own strict xfail test):

* characters that ``str.isdigit`` accepts but ``int`` refuses (Unicode category ``No``,
  e.g. ``²``), and digit runs longer than Python's 4300-digit ``int`` limit — see
  ``test_fuzz_processor.py``.
"""

from __future__ import annotations

from tests.fuzz_strategies.logs import Captured, captured
from tests.fuzz_strategies.records import (
    BY_CLASS,
    agent_records,
    allocatable,
    annotation_values,
    assignments,
    device_ids,
    diffs,
    exporter_claims,
    inventories,
    mutated,
    node_labels,
    node_records,
    nodes,
    owners,
    pod_lists,
    pod_uids,
    pods,
    samples,
    snapshots,
)
from tests.fuzz_strategies.values import (
    EXPORTER_UID_PREFIX,
    FLEET,
    GPU_UUIDS,
    INT64,
    MIG_UUIDS,
    NODES,
    POD_NAMES,
    RESOURCES,
    START_MS,
    floats,
    ints64,
    json_values,
    pick,
    proto_text,
    small_ints,
    sorted_tuple,
    text,
    timestamps,
)

__all__ = [
    "BY_CLASS",
    "EXPORTER_UID_PREFIX",
    "FLEET",
    "GPU_UUIDS",
    "INT64",
    "MIG_UUIDS",
    "NODES",
    "POD_NAMES",
    "RESOURCES",
    "START_MS",
    "Captured",
    "agent_records",
    "allocatable",
    "annotation_values",
    "assignments",
    "captured",
    "device_ids",
    "diffs",
    "exporter_claims",
    "floats",
    "ints64",
    "inventories",
    "json_values",
    "mutated",
    "node_labels",
    "node_records",
    "nodes",
    "owners",
    "pick",
    "pod_lists",
    "pod_uids",
    "pods",
    "proto_text",
    "samples",
    "small_ints",
    "snapshots",
    "sorted_tuple",
    "text",
    "timestamps",
]
