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
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from agents.podresources.collect import MAX_REPLY_BYTES, PodResourcesCollector
from agents.podresources.translate import allocatable_from_response, assignments_from_list
from agents.types import AgentRecord
from contract import codec
from contract.inputs import AllocatableDevice, DeviceAssignment, PodResourcesSnapshot
from proto.podresources.v1 import api_pb2 as pb
from proto.podresources.v1 import api_pb2_grpc as pb_grpc
from sim.kubelet_server import Context, KubeletDouble
from tests.fuzz_strategies import captured, proto_text

NODE = "gpu-node-1"
PREFIXES = ("nvidia.com/",)
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


class ScriptedKubelet(KubeletDouble):
    """The double, answering ``List`` / ``GetAllocatableResources`` with scripted bytes."""

    def __init__(self, socket_path: Path) -> None:
        super().__init__(socket_path, lambda: ((), ()))
        self.list_reply = b""
        self.allocatable_reply = b""

    async def _list(self, request: pb.ListPodResourcesRequest, context: Context) -> bytes:
        return self.list_reply

    async def _allocatable(
        self, request: pb.AllocatableResourcesRequest, context: Context
    ) -> bytes:
        return self.allocatable_reply


@dataclass
class Wire:
    kubelet: ScriptedKubelet
    stub: pb_grpc.PodResourcesListerStub
    socket: Path

    def collector(self) -> PodResourcesCollector:
        async def emit(record: AgentRecord) -> None:
            raise AssertionError("not polled here")

        return PodResourcesCollector(
            node=NODE,
            socket_path=self.socket,
            poll_interval_s=1,
            snapshot_interval_s=60,
            emit=emit,
            now_ms=lambda: 1_700_000_000_000,
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


def errors(reason: str) -> float:
    labels = {"source": "kubelet", "error": reason}
    return REGISTRY.get_sample_value("gpuattr_agent_source_errors_total", labels) or 0.0


def parsed(message_type: Any, payload: bytes) -> Any:
    """What the protobuf runtime makes of ``payload`` (None: it refuses it)."""
    try:
        return message_type.FromString(payload)
    except DecodeError:
        return None


# --- strategies -------------------------------------------------------------------------------

names = st.one_of(st.sampled_from(["", "ml", "trainer-0", "main"]), proto_text)
resources = st.one_of(
    st.sampled_from(
        [
            "nvidia.com/gpu",
            "nvidia.com/gpu.shared",
            "nvidia.com/mig-1g.10gb",
            "nvidia.com/",
            "NVIDIA.com/gpu",
            "amd.com/gpu",
            "cpu",
            "",
        ]
    ),
    proto_text,
)
ids = st.one_of(
    st.sampled_from(["", "GPU-8b2c4a51", "GPU-8b2c4a51::3", "MIG-1f3a", "nvidia0/vgpu1"]),
    proto_text,
)
int64 = st.integers(-(2**63), 2**63 - 1)
numa = st.builds(pb.NUMANode, ID=int64)
devices = st.builds(
    pb.ContainerDevices,
    resource_name=resources,
    device_ids=st.lists(ids, max_size=5),
    topology=st.one_of(st.none(), st.builds(pb.TopologyInfo, nodes=st.lists(numa, max_size=3))),
)
memory = st.builds(pb.ContainerMemory, memory_type=names, size=st.integers(0, 2**64 - 1))
claim_resources = st.builds(
    pb.ClaimResource,
    cdi_devices=st.lists(st.builds(pb.CDIDevice, name=names), max_size=2),
    driver_name=st.one_of(st.just("gpu.nvidia.com"), names),
    pool_name=st.one_of(st.just("node-a/pool"), names),
    device_name=st.one_of(st.just("gpu-0"), names),
    share_id=st.one_of(st.none(), names),
)
containers = st.builds(
    pb.ContainerResources,
    name=names,
    devices=st.lists(devices, max_size=3),
    cpu_ids=st.lists(int64, max_size=3),
    memory=st.lists(memory, max_size=2),
    dynamic_resources=st.lists(
        st.builds(
            pb.DynamicResource,
            claim_name=names,
            claim_namespace=names,
            claim_resources=st.lists(claim_resources, max_size=3),
        ),
        max_size=2,
    ),
)
list_replies = st.builds(
    pb.ListPodResourcesResponse,
    pod_resources=st.lists(
        st.builds(
            pb.PodResources,
            name=names,
            namespace=names,
            containers=st.lists(containers, max_size=3),
            cpu_ids=st.lists(int64, max_size=2),
            memory=st.lists(memory, max_size=2),
        ),
        max_size=4,
    ),
)
allocatable_replies = st.builds(
    pb.AllocatableResourcesResponse,
    devices=st.lists(devices, max_size=4),
    cpu_ids=st.lists(int64, max_size=3),
    memory=st.lists(memory, max_size=2),
)


@st.composite
def corrupted(draw: st.DrawFn, messages: st.SearchStrategy[Any]) -> bytes:
    """Random bytes, or a valid serialization truncated / with bytes flipped / spliced."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=300))
    data = bytearray(draw(messages).SerializeToString())
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["truncate", "flip", "insert"]))
        if op == "truncate":
            del data[i:]
        elif op == "flip" and i < len(data):
            data[i] ^= draw(st.integers(1, 255))
        else:
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


def oracle(resp: pb.ListPodResourcesResponse) -> set[DeviceAssignment]:
    """The rows the translation must produce, written independently of agents/kubelet.py."""
    rows: set[DeviceAssignment] = set()
    for pod in resp.pod_resources:
        for ctr in pod.containers:
            for dev in ctr.devices:
                if any(dev.resource_name.startswith(p) for p in PREFIXES):
                    rows |= {
                        DeviceAssignment(pod.namespace, pod.name, ctr.name, dev.resource_name, i)
                        for i in dev.device_ids
                    }
            for claim in ctr.dynamic_resources:
                for res in claim.claim_resources:
                    if res.driver_name != "" and res.device_name != "":
                        resource = "dra:" + res.driver_name
                        device = res.pool_name + "/" + res.device_name
                        rows.add(
                            DeviceAssignment(pod.namespace, pod.name, ctr.name, resource, device)
                        )
    return rows


# --- List --------------------------------------------------------------------------------------


@SETTINGS
@given(payload=corrupted(list_replies))
async def test_garbled_list_replies_are_counted_and_logged(wire: Wire, payload: bytes) -> None:
    wire.kubelet.list_reply = payload
    collector = wire.collector()
    before = errors("garbled")
    with captured("agents.podresources.collect") as logs:
        rows = await collector._list(wire.stub)
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
    rows = await wire.collector()._list(wire.stub)
    assert rows is not None
    assert set(rows) == oracle(message)
    assert errors("garbled") == before
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
        assert devices_ == ()
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
    devices_ = await wire.collector()._allocatable(wire.stub)
    expected = {
        (d.resource_name, i, tuple(sorted({n.ID for n in d.topology.nodes})))
        for d in message.devices
        if d.resource_name.startswith(PREFIXES)
        for i in d.device_ids
    }
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
    rows = await wire.collector()._list(wire.stub)
    assert rows is not None
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
