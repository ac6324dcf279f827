"""A protocol-faithful kubelet double: a real ``grpc.aio`` server on a unix socket serving the
PodResources v1 API (``List``, ``GetAllocatableResources``, ``Get``) from a state provider.

The provider is called on every request, so a scenario changes what the "kubelet" reports by
changing what the provider returns. Replies are serialized here, and the server sends raw
bytes: that is how :meth:`KubeletDouble.garble_next` puts undecodable bytes on the wire and the
client meets a real deserialization failure. Errors mirror the kubelet's: ``Get`` for an
unknown pod is a plain error (gRPC ``UNKNOWN``) "pod <name> in namespace <ns> not found", and a
double built with ``allocatable_api=False`` is an old kubelet without
``GetAllocatableResources`` (gRPC ``UNIMPLEMENTED``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from contract.inputs import AllocatableDevice, DeviceAssignment
from proto.podresources.v1 import api_pb2 as pb
from sim.podresources_replies import allocatable_response, get_response, list_response

State = Callable[[], tuple[tuple[DeviceAssignment, ...], tuple[AllocatableDevice, ...]]]
SERVICE = "v1.PodResourcesLister"
#: Field number 2**29-1 with wire type 7, which does not exist: no protobuf parser accepts it.
GARBAGE = b"\xff\xff\xff\xff\x0f not a protobuf message"

Context = grpc.aio.ServicerContext[Any, bytes]


class KubeletDouble:
    def __init__(self, socket_path: Path, state: State, *, allocatable_api: bool = True) -> None:
        self.socket_path = socket_path
        self.state = state
        self.allocatable_api = allocatable_api
        self.list_calls = 0
        self._garble = 0
        self._server: grpc.aio.Server | None = None

    def garble_next(self, n: int) -> None:
        """Make the next ``n`` ``List`` replies bytes that no protobuf parser accepts."""
        self._garble += n

    async def _list(self, request: pb.ListPodResourcesRequest, context: Context) -> bytes:
        self.list_calls += 1
        if self._garble > 0:
            self._garble -= 1
            return GARBAGE
        return list_response(self.state()[0]).SerializeToString()

    async def _allocatable(
        self, request: pb.AllocatableResourcesRequest, context: Context
    ) -> bytes:
        return allocatable_response(self.state()[1]).SerializeToString()

    async def _get(self, request: pb.GetPodResourcesRequest, context: Context) -> bytes:
        resp = get_response(self.state()[0], request.pod_namespace, request.pod_name)
        if resp is None:
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
        assert resp is not None  # abort() raises
        return resp.SerializeToString()

    def _handler(self) -> grpc.GenericRpcHandler[Any, bytes]:
        def unary(behaviour: Any, request_type: Any) -> grpc.RpcMethodHandler[Any, bytes]:
            return grpc.unary_unary_rpc_method_handler(
                behaviour,
                request_deserializer=request_type.FromString,
                response_serializer=bytes,  # replies are already bytes (possibly garbage)
            )

        methods = {
            "List": unary(self._list, pb.ListPodResourcesRequest),
            "Get": unary(self._get, pb.GetPodResourcesRequest),
        }
        if self.allocatable_api:
            methods["GetAllocatableResources"] = unary(
                self._allocatable, pb.AllocatableResourcesRequest
            )
        return grpc.method_handlers_generic_handler(SERVICE, methods)

    async def start(self) -> None:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()  # a stale socket from a previous run
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((self._handler(),))
        server.add_insecure_port(f"unix://{self.socket_path.absolute()}")
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
