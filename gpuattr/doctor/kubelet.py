"""The kubelet's PodResources socket, asked as the agent asks it: ``kubelet.socket``,
``kubelet.list``, ``kubelet.allocatable``.

:func:`ask` is the I/O (a stat, then ``List`` and ``GetAllocatableResources`` over the agent's
own channel options and translation); the ``judge_*`` functions are pure. When the socket fails
the two calls are skipped, so a wrong path turns exactly one line red."""

from __future__ import annotations

import os
import stat
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import grpc

from agents.podresources.collect import MAX_REPLY_BYTES, allocatable_not_served
from agents.podresources.translate import Unusable, listed_pods, read_allocatable, read_list
from contract.inputs import AllocatableDevice, DeviceAssignment
from gpuattr.doctor.lines import Line, fail, ok, skipped, warn
from gpuattr.doctor.settings import DoctorSettings
from infra.settings import MICROK8S_KUBELET_SOCKET
from proto.podresources.v1 import api_pb2 as pb
from proto.podresources.v1 import api_pb2_grpc as pb_grpc

SOCKET, LIST, ALLOCATABLE = "kubelet.socket", "kubelet.list", "kubelet.allocatable"

MOUNT_FIX = (
    "mount the kubelet's pod-resources directory into the agent (hostPath "
    "/var/lib/kubelet/pod-resources, as deploy/kustomize/base/agent.yaml does) and point "
    f"GPUATTR_KUBELET_SOCKET_PATH at its kubelet.sock (microk8s: {MICROK8S_KUBELET_SOCKET})"
)


@dataclass(frozen=True, slots=True)
class SocketFacts:
    """What a stat of the socket path says (``exists`` False: nothing there)."""

    exists: bool
    is_socket: bool = False
    #: read and write: connecting to a unix socket needs both
    accessible: bool = False


@dataclass(frozen=True, slots=True)
class RpcFailed:
    code: str  # the gRPC status name
    details: str
    #: the method itself is not served (old kubelet, feature gate off)
    not_served: bool = False


@dataclass(frozen=True, slots=True)
class Listed:
    rows: tuple[DeviceAssignment, ...]
    pods: frozenset[str]
    unusable: tuple[Unusable, ...]


@dataclass(frozen=True, slots=True)
class Allocatable:
    devices: tuple[AllocatableDevice, ...]
    unusable: tuple[Unusable, ...]


@dataclass(frozen=True, slots=True)
class KubeletFacts:
    socket: SocketFacts
    listed: Listed | RpcFailed | None = None  # None: not asked
    allocatable: Allocatable | RpcFailed | None = None


def stat_socket(path: Path) -> SocketFacts:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return SocketFacts(exists=False)
    return SocketFacts(True, stat.S_ISSOCK(mode), os.access(path, os.R_OK | os.W_OK))


def _failed(exc: grpc.aio.AioRpcError) -> RpcFailed:
    return RpcFailed(exc.code().name, exc.details() or "", allocatable_not_served(exc))


async def ask(settings: DoctorSettings) -> KubeletFacts:
    """Stat the socket; when it is one we may use, ``List`` and ``GetAllocatableResources``."""
    path = settings.kubelet.socket_path
    facts = stat_socket(path)
    if not (facts.exists and facts.is_socket and facts.accessible):
        return KubeletFacts(facts)
    timeout = min(settings.kubelet.rpc_timeout_s, settings.timeout_s)
    options = [("grpc.max_receive_message_length", MAX_REPLY_BYTES)]
    async with grpc.aio.insecure_channel(f"unix://{path.absolute()}", options=options) as channel:
        stub = pb_grpc.PodResourcesListerStub(channel)
        listed: Listed | RpcFailed
        try:
            reply = await stub.List(pb.ListPodResourcesRequest(), timeout=timeout)
            rows, bad = read_list(reply)
            listed = Listed(rows, listed_pods(reply), bad)
        except grpc.aio.AioRpcError as exc:
            listed = _failed(exc)
        allocatable: Allocatable | RpcFailed
        try:
            answer = await stub.GetAllocatableResources(
                pb.AllocatableResourcesRequest(), timeout=timeout
            )
            allocatable = Allocatable(*read_allocatable(answer))
        except grpc.aio.AioRpcError as exc:
            allocatable = _failed(exc)
    return KubeletFacts(facts, listed, allocatable)


def judge_socket(path: Path, facts: SocketFacts) -> Line:
    if not facts.exists:
        return fail(SOCKET, f"no PodResources socket at {path}", MOUNT_FIX, path=str(path))
    if not facts.is_socket:
        return fail(
            SOCKET,
            f"{path} exists but is not a socket (a directory or file mounted in its place?)",
            MOUNT_FIX,
            path=str(path),
        )
    if not facts.accessible:
        return fail(
            SOCKET,
            f"{path} is a socket this process may not read and write",
            "run the agent as root (the kubelet's socket is root's, mode 0750 directory) or "
            "with a securityContext that may open it, as the shipped agent DaemonSet does",
            path=str(path),
        )
    return ok(SOCKET, f"PodResources socket at {path}", path=str(path))


def _by_resource(resources: list[str]) -> str:
    counted = Counter(resources)
    return ", ".join(f"{r} {n}" for r, n in sorted(counted.items())) or "none"


def _unusable(bad: tuple[Unusable, ...]) -> str:
    reasons = sorted({u.reason for u in bad})
    return f"{len(bad)} entries unusable ({', '.join(reasons)}, e.g. {bad[0].where})"


def judge_list(listed: Listed | RpcFailed, own_pod: str) -> Line:
    if isinstance(listed, RpcFailed):
        return fail(
            LIST,
            f"List answered {listed.code}: {listed.details}",
            "check the kubelet is running on this node and its PodResources API is on "
            "(kubelet flag/feature KubeletPodResources, default since 1.15)",
            code=listed.code,
        )
    devices = [r.resource for r in listed.rows]
    claims = sorted({r.claim for r in listed.rows if r.claim})
    facts = {
        "pods": len(listed.pods),
        "devices_by_resource": dict(Counter(devices)),
        "dra_claims": len(claims),
    }
    said = (
        f"{len(listed.pods)} pods listed; held devices: {_by_resource(devices)}; "
        f"{len(claims)} DRA claims"
    )
    if listed.unusable:
        return warn(
            LIST,
            f"{said}; {_unusable(listed.unusable)}",
            "the agent skips these entries (counted in "
            "gpuattr_agent_ignored_podresources_rows_total): check the device plugin's IDs",
            **facts,
        )
    if own_pod and own_pod not in listed.pods:
        return warn(
            LIST,
            f"{said}; the agent's own pod {own_pod} is not among them",
            "the kubelet may not have its pods yet (just restarted), or GPUATTR_KUBELET_OWN_POD "
            "names the wrong pod: it must be the agent's <namespace>/<name> on this node",
            **facts,
        )
    if not listed.pods:
        return warn(
            LIST,
            "the kubelet lists no pod at all",
            "a kubelet that has just started answers empty until it has its pods: ask again; "
            "if it stays empty, this socket may be another kubelet's (check the root dir)",
            **facts,
        )
    return ok(LIST, said, **facts)


def judge_allocatable(allocatable: Allocatable | RpcFailed) -> Line:
    if isinstance(allocatable, RpcFailed):
        if allocatable.not_served:
            return warn(
                ALLOCATABLE,
                f"GetAllocatableResources not served ({allocatable.code}: {allocatable.details})",
                "kubelets 1.21-1.27 need the feature gate KubeletPodResourcesGetAllocatable "
                "(GA and on from 1.28); older kubelets lack it: upgrade. Without it the "
                "node's free GPUs are known from NVML or ResourceSlices only",
                code=allocatable.code,
            )
        return fail(
            ALLOCATABLE,
            f"GetAllocatableResources answered {allocatable.code}: {allocatable.details}",
            "check the kubelet's log for PodResources errors",
            code=allocatable.code,
        )
    resources = [d.resource for d in allocatable.devices]
    facts = {"devices_by_resource": dict(Counter(resources))}
    said = f"allocatable devices: {_by_resource(resources)}"
    if allocatable.unusable:
        return warn(
            ALLOCATABLE,
            f"{said}; {_unusable(allocatable.unusable)}",
            "check the device plugin's device IDs",
            **facts,
        )
    if not resources:
        return warn(
            ALLOCATABLE,
            "no nvidia.com/ device allocatable",
            "normal on a DRA-only node (its GPUs are in ResourceSlices); otherwise the NVIDIA "
            "device plugin has not registered with this kubelet: check its pod on this node",
            **facts,
        )
    return ok(ALLOCATABLE, said, **facts)


def judge(path: Path, facts: KubeletFacts, own_pod: str = "") -> list[Line]:
    socket = judge_socket(path, facts.socket)
    if socket.status == "fail" or facts.listed is None or facts.allocatable is None:
        because = f"no usable socket at {path}"
        return [socket, skipped(LIST, because), skipped(ALLOCATABLE, because)]
    return [socket, judge_list(facts.listed, own_pod), judge_allocatable(facts.allocatable)]


async def check(settings: DoctorSettings) -> list[Line]:
    facts = await ask(settings)
    return judge(settings.kubelet.socket_path, facts, settings.kubelet.own_pod)


def held_devices(listed: Listed | RpcFailed | None) -> tuple[DeviceAssignment, ...]:
    return listed.rows if isinstance(listed, Listed) else ()


def allocatable_devices(
    allocatable: Allocatable | RpcFailed | None,
) -> tuple[AllocatableDevice, ...]:
    return allocatable.devices if isinstance(allocatable, Allocatable) else ()
