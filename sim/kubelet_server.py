"""A protocol-faithful kubelet double: a real gRPC server on a unix socket serving the
PodResources v1 API (``List``, ``GetAllocatableResources``, ``Get``) from a state provider."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from agents.events import AllocatableDevice, DeviceAssignment
from agents.kubelet import allocatable_response, get_response, list_response
from proto.podresources.v1 import api_pb2 as pb

State = Callable[[], tuple[tuple[DeviceAssignment, ...], tuple[AllocatableDevice, ...]]]
SERVICE = "v1.PodResourcesLister"
GARBAGE = b"\xff\xff\xff\xff\x0f garbled"


class KubeletDouble:
    def __init__(self, socket_path: Path, state: State) -> None:
        self.socket_path = socket_path
        self.state = state
        self.list_calls = 0
        self._garble = 0
        self._server: grpc.aio.Server | None = None

    def garble_next(self, n: int) -> None:
        """The next ``n`` ``List`` replies are bytes no protobuf parser accepts."""
        self._garble += n

    async def _list(self, request: pb.ListPodResourcesRequest, context: Any) -> bytes:
        self.list_calls += 1
        if self._garble > 0:
            self._garble -= 1
            return GARBAGE
        return list_response(self.state()[0]).SerializeToString()

    async def _allocatable(self, request: pb.AllocatableResourcesRequest, context: Any) -> bytes:
        return allocatable_response(self.state()[1]).SerializeToString()

    async def _get(self, request: pb.GetPodResourcesRequest, context: Any) -> bytes:
        resp = get_response(self.state()[0], request.pod_namespace, request.pod_name)
        if resp is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"pod {request.pod_namespace}/{request.pod_name} not found",
            )
        return resp.SerializeToString() if resp else b""

    def _handler(self) -> grpc.GenericRpcHandler[Any, Any]:
        def unary(fn: Any, req: Any) -> grpc.RpcMethodHandler[Any, Any]:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req.FromString, response_serializer=bytes
            )

        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "List": unary(self._list, pb.ListPodResourcesRequest),
                "GetAllocatableResources": unary(self._allocatable, pb.AllocatableResourcesRequest),
                "Get": unary(self._get, pb.GetPodResourcesRequest),
            },
        )

    async def start(self) -> None:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((self._handler(),))
        server.add_insecure_port(f"unix://{self.socket_path.resolve()}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def __aenter__(self) -> KubeletDouble:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
