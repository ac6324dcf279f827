"""The kubelet side of the PodResources fuzz tests, over a real gRPC wire.

One kubelet double (a real gRPC server on a unix socket, :mod:`sim.kubelet_server`) answers
``List`` and ``GetAllocatableResources`` with whatever bytes the test sets, and the collector's
own RPC methods read them through grpc.aio's deserializer — the exact parse path of the agent.
Also here: the agent's error counter for the kubelet source, and what the protobuf runtime
itself makes of a payload.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from prometheus_client import REGISTRY

from agents.podresources.collect import PodResourcesCollector
from agents.types import AgentRecord
from proto.podresources.v1 import api_pb2 as pb
from proto.podresources.v1 import api_pb2_grpc as pb_grpc
from sim.kubelet_server import Context, KubeletDouble

NODE = "gpu-node-1"
PREFIXES = ("nvidia.com/",)


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


def errors(reason: str) -> float:
    labels = {"source": "kubelet", "error": reason}
    return REGISTRY.get_sample_value("gpuattr_agent_source_errors_total", labels) or 0.0


def parsed(message_type: Any, payload: bytes) -> Any:
    """What the protobuf runtime makes of ``payload`` (None: it refuses it)."""
    try:
        return message_type.FromString(payload)
    except DecodeError:
        return None
