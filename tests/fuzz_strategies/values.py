"""Name pools and value strategies the fuzz strategies build on.

Names are drawn mostly from the pools of :mod:`bench.fleet` so that random records collide with
the realistic ones (same nodes, GPUs, pods), plus arbitrary text. Ints stay in 64 bits and
strings are valid Unicode, so every record built from these is valid on the wire.

Known traps kept out of the general strategies (each has its own strict xfail test):

* characters that ``str.isdigit`` accepts but ``int`` refuses (Unicode category ``No``,
  e.g. ``²``), and digit runs longer than Python's 4300-digit ``int`` limit — see
  ``test_fuzz_processor.py``.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from bench.fleet import MIG_GPUS, MIG_INSTANCES, fleet
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


def sorted_tuple(elements: st.SearchStrategy[Any], max_size: int = 12) -> st.SearchStrategy[Any]:
    return st.lists(elements, max_size=max_size).map(lambda xs: tuple(sorted(set(xs))))


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
