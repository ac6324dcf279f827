"""Decoded records the worker keeps carry one copy of each string (contract.interning): equal to
what the decoder made, sharing every string with the records decoded before them."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import pytest

from contract import codec, inputs
from contract.inputs import (
    DcgmScrape,
    DeviceAssignment,
    NodeRecord,
    OwnerRef,
    PodRecord,
    PodResourcesSnapshot,
)
from contract.interning import interner
from streams.core.flow.state import KINDS, TABLE_CODEC


def _fresh(text: str) -> str:
    """An equal string that is not the interned object (as a decoder makes one)."""
    return "".join(list(text))


def test_every_kept_kind_and_every_state_kind_is_interned_when_decoded() -> None:
    assert set(inputs.KEPT) <= set(codec.WIRE._interners)
    assert {k[0] for k in KINDS.values()} | set(inputs.KEPT) == set(TABLE_CODEC._interners)
    assert DcgmScrape not in codec.WIRE._interners  # read and let go: not worth its cost


def test_two_pod_records_decoded_apart_share_their_strings() -> None:
    def pod(uid: str, name: str) -> PodRecord:
        owner = OwnerRef("ReplicaSet", "train-7d9")
        return PodRecord("node-a", 1, uid, "team-a", name, 0, owner=owner, workload=owner)

    a = codec.decode(codec.encode(pod("u1", "p1")))
    b = codec.decode(codec.encode(pod("u2", "p2")))
    assert a == pod("u1", "p1")
    assert b == pod("u2", "p2")
    assert a.namespace is b.namespace
    assert a.node is b.node
    assert a.owner is not None
    assert b.owner is not None
    assert a.owner.kind is b.owner.kind
    assert a.owner.name is b.owner.name


def test_nested_records_in_tuples_are_interned() -> None:
    rows = (
        DeviceAssignment("ns", "p1", "main", "nvidia.com/gpu", "GPU-1"),
        DeviceAssignment("ns", "p2", "main", "nvidia.com/gpu", "GPU-2"),
    )
    snap = codec.decode(codec.encode(PodResourcesSnapshot("node-a", 5, rows)))
    assert snap == PodResourcesSnapshot("node-a", 5, rows)
    first, second = snap.assignments
    assert first.container is second.container
    assert first.resource is second.resource
    assert first.resource is sys.intern("nvidia.com/gpu")


def test_pairs_of_strings_are_interned_and_other_fields_pass_as_they_are() -> None:
    labels = ((_fresh("nvidia.com/gpu.product"), _fresh("A100")),)
    rebuild = interner(NodeRecord)
    assert rebuild is not None
    rec = rebuild(NodeRecord(_fresh("node-b"), 7, labels, deleted=True))
    assert rec == NodeRecord("node-b", 7, labels, deleted=True)
    assert rec.labels[0][0] is sys.intern("nvidia.com/gpu.product")
    assert rec.labels[0][1] is sys.intern("A100")
    assert rec.node is sys.intern("node-b")


@dataclass(frozen=True)
class _Mixed:
    name: str | None
    kind: Literal["a", "b"]
    by_id: Mapping[int, str]
    ids: frozenset[str]
    count: int = 0


def test_optional_literal_mapping_and_frozenset_fields() -> None:
    rebuild = interner(_Mixed)
    assert rebuild is not None
    rec = rebuild(_Mixed(_fresh("n1"), "a", {1: _fresh("x")}, frozenset({_fresh("y")}), 3))
    assert rec == _Mixed("n1", "a", {1: "x"}, frozenset({"y"}), 3)
    assert rec.name is sys.intern("n1")
    assert rec.by_id[1] is sys.intern("x")
    assert next(iter(rec.ids)) is sys.intern("y")
    none = rebuild(_Mixed(None, "b", {}, frozenset()))
    assert none == _Mixed(None, "b", {}, frozenset())


@dataclass(frozen=True)
class _NoStrings:
    ts_ms: int
    ratio: float | None


def test_a_type_without_strings_needs_nothing() -> None:
    assert interner(_NoStrings) is None


@dataclass(frozen=True)
class _Unplanned:
    names: list[str]


def test_a_type_it_cannot_follow_is_refused_when_planned() -> None:
    with pytest.raises(TypeError, match="no plan"):
        interner(_Unplanned)


@dataclass(frozen=True, kw_only=True)
class _KeywordOnly:
    name: str


def test_a_type_it_could_not_rebuild_in_order_is_refused() -> None:
    with pytest.raises(TypeError, match="keyword-only"):
        interner(_KeywordOnly)
