"""A protocol-faithful kubelet double: a real ``grpc.aio`` server on a unix socket serving the
PodResources v1 API (``List``, ``GetAllocatableResources``, ``Get``) from a state provider.

The provider is called on every request, so a scenario changes what the "kubelet" reports by
changing what the provider returns. Replies are serialized here, and the server sends raw
bytes: that is how :meth:`KubeletDouble.garble_next` puts undecodable bytes on the wire and the
client meets a real deserialization failure.

Where it behaves like the real kubelet 1.35 (checked by ``tests/realnode/
test_kubelet_double_conformance.py`` against one on the fake runtime):

* ``List`` names every active pod, devices or not (``bare_pods``: CPU-only pods, the agent's
  own); pods and device IDs come in another order on every call;
* a kubelet that has just started (:meth:`restart`, or ``start(starting=True)``) answers
  ``List`` with nothing — no error — until it has its pods (:meth:`pods_known`), and
  ``GetAllocatableResources`` with nothing until the device plugins registered
  (:meth:`plugins_registered`); both may be timed;
* after a restart and a sandbox re-creation a DRA claim's devices appear once more per
  re-creation, with a longer CDI list each time (:meth:`duplicate_dra`;
  kubernetes/kubernetes#140471);
* ``Get`` of a pod that is not active is a plain error (gRPC ``UNKNOWN``) "pod <name> in
  namespace <ns> not found";
* calls are rate limited like the kubelet's (100/s, burst 10): beyond, ``RESOURCE_EXHAUSTED``
  "rejected by rate limit";
* a double built with ``allocatable_api=False`` is an old kubelet without
  ``GetAllocatableResources`` (gRPC ``UNIMPLEMENTED``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from contract.inputs import AllocatableDevice, DeviceAssignment
from proto.podresources.v1 import api_pb2 as pb
from sim.podresources_replies import Pod, allocatable_response, get_response, list_response

State = Callable[[], tuple[tuple[DeviceAssignment, ...], tuple[AllocatableDevice, ...]]]
BarePods = Callable[[], tuple[Pod, ...]]
SERVICE = "v1.PodResourcesLister"
#: Field number 2**29-1 with wire type 7, which does not exist: no protobuf parser accepts it.
GARBAGE = b"\xff\xff\xff\xff\x0f not a protobuf message"
#: the kubelet's PodResources rate limit (pkg/kubelet/apis/podresources: 100 qps, burst 10)
RATE_PER_S, BURST = 100.0, 10

Context = grpc.aio.ServicerContext[Any, bytes]


def _no_bare_pods() -> tuple[Pod, ...]:
    return ()


class _TokenBucket:
    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate_per_s, self.burst = rate_per_s, burst
        self.tokens, self.at = float(burst), time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate_per_s)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class KubeletDouble:
    def __init__(
        self,
        socket_path: Path,
        state: State,
        *,
        allocatable_api: bool = True,
        bare_pods: BarePods = _no_bare_pods,
        rate_limit: bool = True,
        seed: int = 0,
    ) -> None:
        self.socket_path = socket_path
        self.state = state
        self.bare_pods = bare_pods
        self.allocatable_api = allocatable_api
        self.list_calls = 0
        self.rate_limited = 0
        self._limit = _TokenBucket(RATE_PER_S, BURST) if rate_limit else None
        self._order = random.Random(seed)
        self._garble = 0
        self._dra_copies = 1
        self._pods_known = True
        self._plugins_registered = True
        self._timers: list[asyncio.TimerHandle] = []
        self._server: grpc.aio.Server | None = None

    # --- switches ----------------------------------------------------------------------------

    def garble_next(self, n: int) -> None:
        """Make the next ``n`` ``List`` replies bytes that no protobuf parser accepts."""
        self._garble += n

    def pods_known(self) -> None:
        """The (re)started kubelet has its pods from the API server: ``List`` answers them."""
        self._pods_known = True

    def plugins_registered(self) -> None:
        """The device plugins registered again: ``GetAllocatableResources`` answers them."""
        self._plugins_registered = True

    def duplicate_dra(self) -> None:
        """A restart followed by a sandbox re-creation: every DRA claim device is listed once
        more (kubernetes/kubernetes#140471, in 1.35.4)."""
        self._dra_copies += 1

    # --- the API -----------------------------------------------------------------------------

    async def _limited(self, context: Context) -> None:
        if self._limit is not None and not self._limit.take():
            self.rate_limited += 1
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")

    def _shuffled(self, resp: pb.ListPodResourcesResponse) -> pb.ListPodResourcesResponse:
        """The kubelet's maps give pods and device IDs in another order on every call."""
        pods = list(resp.pod_resources)
        self._order.shuffle(pods)
        for pod in pods:
            for ctr in pod.containers:
                for devices in ctr.devices:
                    ids = list(devices.device_ids)
                    self._order.shuffle(ids)
                    del devices.device_ids[:]
                    devices.device_ids.extend(ids)
                for claim in ctr.dynamic_resources:
                    copies = [
                        _copy(res, n)
                        for n in range(1, self._dra_copies + 1)
                        for res in claim.claim_resources
                    ]
                    del claim.claim_resources[:]
                    claim.claim_resources.extend(copies)
        return pb.ListPodResourcesResponse(pod_resources=pods)

    async def _list(self, request: pb.ListPodResourcesRequest, context: Context) -> bytes:
        await self._limited(context)
        self.list_calls += 1
        if self._garble > 0:
            self._garble -= 1
            return GARBAGE
        if not self._pods_known:
            return pb.ListPodResourcesResponse().SerializeToString()
        resp = list_response(self.state()[0], self.bare_pods())
        return self._shuffled(resp).SerializeToString()

    async def _allocatable(
        self, request: pb.AllocatableResourcesRequest, context: Context
    ) -> bytes:
        await self._limited(context)
        if not self._plugins_registered:
            return pb.AllocatableResourcesResponse().SerializeToString()
        return allocatable_response(self.state()[1]).SerializeToString()

    async def _get(self, request: pb.GetPodResourcesRequest, context: Context) -> bytes:
        await self._limited(context)
        rows, bare = self.state()[0], self.bare_pods()
        found = (
            get_response(rows, request.pod_namespace, request.pod_name, bare)
            if self._pods_known
            else None
        )
        if found is None:
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
        assert found is not None  # abort() raises
        return found.SerializeToString()

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

    # --- life cycle --------------------------------------------------------------------------

    async def start(
        self,
        *,
        starting: bool = False,
        pods_after_s: float | None = None,
        plugins_after_s: float | None = None,
    ) -> None:
        """Serve. ``starting``: a kubelet that has just started — nothing listed until
        :meth:`pods_known` (or ``pods_after_s``), nothing allocatable until
        :meth:`plugins_registered` (or ``plugins_after_s``)."""
        self._pods_known = self._plugins_registered = not starting
        loop = asyncio.get_running_loop()
        if starting and pods_after_s is not None:
            self._timers.append(loop.call_later(pods_after_s, self.pods_known))
        if starting and plugins_after_s is not None:
            self._timers.append(loop.call_later(plugins_after_s, self.plugins_registered))
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()  # a stale socket from a previous run
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((self._handler(),))
        server.add_insecure_port(f"unix://{self.socket_path.absolute()}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def restart(
        self, *, pods_after_s: float | None = 1.2, plugins_after_s: float | None = 1.0
    ) -> None:
        """Stop and start again as a kubelet restart does: empty answers at first (by default
        for as long as a kubelet 1.35 with its API server up gives them)."""
        await self.stop()
        await self.start(starting=True, pods_after_s=pods_after_s, plugins_after_s=plugins_after_s)

    async def __aenter__(self) -> KubeletDouble:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _copy(res: pb.ClaimResource, n: int) -> pb.ClaimResource:
    """The ``n``-th copy of a claim device: its CDI list repeated ``n`` times, as the kubelet's
    appended checkpoint gives it."""
    out = pb.ClaimResource()
    out.CopyFrom(res)
    cdi = list(res.cdi_devices) * n
    del out.cdi_devices[:]
    out.cdi_devices.extend(cdi)
    return out
