"""Fuzz the PodResources edge: kubelet replies → our assignment records, over a real gRPC wire.

One kubelet double (a real gRPC server on a unix socket, :mod:`sim.kubelet_server`) answers
``List`` and ``GetAllocatableResources`` with whatever bytes the test sets, and the collector's
own RPC methods read them through grpc.aio's deserializer — the exact parse path of the agent.

* Random bytes, and valid replies truncated or with flipped bytes: either the protobuf parser
  accepts them (then we get exactly the rows
  :func:`agents.podresources.translate.assignments_from_list` makes of that message) or the
  reply is counted as ``garbled`` and logged, and the poll is skipped.
* Random but valid ``ListPodResourcesResponse`` messages (any names including empty ones,
  unknown resources, DRA claims with missing fields, CPU and memory noise): checked against an
  independent oracle, and the records survive the codec.
* Huge replies: a 2 MiB reply is read whole; one over the 16 MiB limit is counted, never raised.

The double is in ``tests/podresources_wire.py``, the reply strategies and the oracle in
``tests/podresources_replies.py``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, event, given, settings

from agents.podresources.collect import FAILED, MAX_REPLY_BYTES
from agents.podresources.translate import allocatable_from_response, assignments_from_list
from agents.selfmetrics import IGNORED_PODRESOURCES
from contract import codec
from contract.inputs import AllocatableDevice, PodResourcesSnapshot
from proto.podresources.v1 import api_pb2 as pb
from proto.podresources.v1 import api_pb2_grpc as pb_grpc
from tests.fuzz_strategies import captured
from tests.podresources_replies import (
    allocatable_replies,
    corrupted,
    list_replies,
    oracle,
    unusable_oracle,
)
from tests.podresources_wire import NODE, PREFIXES, ScriptedKubelet, Wire, errors, parsed

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    # one kubelet double per test (its gRPC tasks must end before the task-leak check); every
    # example sets its own reply, so sharing it between examples is safe
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


@pytest.fixture
async def wire(tmp_path: Path) -> AsyncIterator[Wire]:
    sock = tmp_path / "kubelet.sock"
    kubelet = ScriptedKubelet(sock)
    await kubelet.start()
    options = [("grpc.max_receive_message_length", MAX_REPLY_BYTES)]
    async with grpc.aio.insecure_channel(f"unix://{sock}", options=options) as channel:
        yield Wire(kubelet, pb_grpc.PodResourcesListerStub(channel), sock)
    await kubelet.stop()


def ignored() -> Counter[str]:
    """gpuattr_agent_ignored_podresources_rows_total, by reason."""
    samples = next(iter(IGNORED_PODRESOURCES.collect())).samples
    return Counter({s.labels["reason"]: int(s.value) for s in samples if s.name.endswith("_total")})


# --- List --------------------------------------------------------------------------------------


@SETTINGS
@given(payload=corrupted(list_replies))
async def test_garbled_list_replies_are_counted_and_logged(wire: Wire, payload: bytes) -> None:
    wire.kubelet.list_reply = payload
    collector = wire.collector()
    before = errors("garbled")
    with captured("agents.podresources.collect") as logs:
        listed = await collector._list(wire.stub)
    rows = listed.rows if listed else None
    message = parsed(pb.ListPodResourcesResponse, payload)
    event("refused by protobuf" if message is None else "parsed by protobuf")
    if message is None:
        assert rows is None
        assert errors("garbled") == before + 1
        (warning,) = logs.messages(logging.WARNING)
        assert str(wire.socket) in warning
        assert "could not be decoded" in warning
    else:
        assert isinstance(message, pb.ListPodResourcesResponse)
        assert rows == frozenset(assignments_from_list(message)) == oracle(message)
        assert errors("garbled") == before


@SETTINGS
@given(message=list_replies)
async def test_valid_list_replies_become_exactly_our_records(
    wire: Wire, message: pb.ListPodResourcesResponse
) -> None:
    wire.kubelet.list_reply = message.SerializeToString()
    before = errors("garbled")
    ignored_before = ignored()
    listed = await wire.collector()._list(wire.stub)
    assert listed is not None
    rows = listed.rows
    assert set(rows) == oracle(message)
    assert listed.pods == {f"{p.namespace}/{p.name}" for p in message.pod_resources if p.name}
    assert errors("garbled") == before
    # what could not be used is counted, by reason (never a silent drop)
    assert ignored() - ignored_before == unusable_oracle(message)
    for row in rows:
        assert row.resource.startswith(PREFIXES) or row.resource.startswith("dra:")
    snapshot = PodResourcesSnapshot(NODE, 1, tuple(sorted(rows)))
    assert codec.decode(codec.encode(snapshot)) == snapshot


# --- GetAllocatableResources ------------------------------------------------------------------


@SETTINGS
@given(payload=corrupted(allocatable_replies))
async def test_garbled_allocatable_replies_are_counted(wire: Wire, payload: bytes) -> None:
    wire.kubelet.allocatable_reply = payload
    before = errors("garbled")
    with captured("agents.podresources.collect") as logs:
        devices_ = await wire.collector()._allocatable(wire.stub)
    message = parsed(pb.AllocatableResourcesResponse, payload)
    event("refused by protobuf" if message is None else "parsed by protobuf")
    if message is None:
        assert devices_ is FAILED  # that poll is skipped: an empty list would mean "no devices"
        assert errors("garbled") == before + 1
        assert any("GetAllocatableResources" in m for m in logs.messages(logging.WARNING))
    else:
        assert isinstance(message, pb.AllocatableResourcesResponse)
        assert devices_ == allocatable_from_response(message)
        assert errors("garbled") == before


@SETTINGS
@given(message=allocatable_replies)
async def test_valid_allocatable_replies_survive_the_codec(
    wire: Wire, message: pb.AllocatableResourcesResponse
) -> None:
    wire.kubelet.allocatable_reply = message.SerializeToString()
    ignored_before = ignored()
    devices_ = await wire.collector()._allocatable(wire.stub)
    expected = {
        (d.resource_name, i, tuple(sorted({n.ID for n in d.topology.nodes})))
        for d in message.devices
        if d.resource_name.startswith(PREFIXES)
        for i in d.device_ids
        if i != ""
    }
    empty = sum(
        1 for d in message.devices if d.resource_name.startswith(PREFIXES) and "" in d.device_ids
    )
    assert ignored() - ignored_before == Counter({"empty_device_id": empty})
    assert {(d.resource, d.device_id, d.numa_nodes) for d in devices_} == expected
    snapshot = PodResourcesSnapshot(NODE, 1, (), devices_)
    assert codec.decode(codec.encode(snapshot)) == snapshot
    assert all(isinstance(d, AllocatableDevice) for d in devices_)


# --- huge replies -----------------------------------------------------------------------------


async def test_a_huge_node_is_read_whole(wire: Wire) -> None:
    """2000 pods and one container holding 20000 device IDs (about 2 MiB on the wire)."""
    pods = [
        pb.PodResources(
            name=f"p-{i}",
            namespace="ml",
            containers=[
                pb.ContainerResources(
                    name="c",
                    devices=[
                        pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=[f"GPU-{i}"])
                    ],
                )
            ],
        )
        for i in range(2000)
    ]
    pods.append(
        pb.PodResources(
            name="hog",
            namespace="ml",
            containers=[
                pb.ContainerResources(
                    name="c",
                    devices=[
                        pb.ContainerDevices(
                            resource_name="nvidia.com/gpu.shared",
                            device_ids=[f"GPU-big::{n}" for n in range(20000)],
                        )
                    ],
                )
            ],
        )
    )
    wire.kubelet.list_reply = pb.ListPodResourcesResponse(pod_resources=pods).SerializeToString()
    listed = await wire.collector()._list(wire.stub)
    assert listed is not None
    rows = listed.rows
    assert len(rows) == 22000
    assert len({r.pod for r in rows}) == 2001


async def test_a_reply_over_the_16_mib_limit_is_counted_not_raised(wire: Wire) -> None:
    ids = [f"GPU-{n:032d}" for n in range(MAX_REPLY_BYTES // 36 + 1000)]
    reply = pb.ListPodResourcesResponse(
        pod_resources=[
            pb.PodResources(
                name="p",
                namespace="ml",
                containers=[
                    pb.ContainerResources(
                        name="c",
                        devices=[
                            pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=ids)
                        ],
                    )
                ],
            )
        ]
    ).SerializeToString()
    assert len(reply) > MAX_REPLY_BYTES
    wire.kubelet.list_reply = reply
    before = errors("resource_exhausted")
    with captured("agents.podresources.collect") as logs:
        assert await wire.collector()._list(wire.stub) is None
    assert errors("resource_exhausted") == before + 1
    assert any(str(wire.socket) in m for m in logs.messages(logging.WARNING))


async def test_unusable_entries_are_counted_every_time_and_logged_once(wire: Wire) -> None:
    nameless = pb.PodResources(
        namespace="ml",
        containers=[
            pb.ContainerResources(
                name="c",
                devices=[pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-1"])],
            )
        ],
    )
    wire.kubelet.list_reply = pb.ListPodResourcesResponse(
        pod_resources=[nameless]
    ).SerializeToString()
    collector = wire.collector()
    before = ignored()
    with captured("agents.podresources.collect") as logs:
        for _ in range(3):
            listed = await collector._list(wire.stub)
            assert listed is not None
            assert listed.rows == frozenset()
    assert ignored() - before == Counter({"pod_without_name": 3})
    (warning,) = logs.messages(logging.WARNING)
    assert "pod_without_name" in warning
    assert "pod ml/?" in warning
