"""A DRA device taint (KEP-5055) reaches the owner of the device, from a real API server.

Real here: kube-apiserver 1.35.4 with ``DRADeviceTaints`` on (alpha in 1.35, off by default:
the ResourceSlice strategy drops ``spec.devices[].taints`` on every write without it) stores
the taint the NVIDIA driver writes on a health event, and defaults its ``timeAdded``; a pod
bound to the node holds the device through a ResourceClaim allocated and reserved as the
scheduler would; the agent's own ResourceSlice, ResourceClaim and Pod watchers, with the shipped
ClusterRole's ServiceAccount token, publish what the server says.

Not real here: this tier has no kubelet, dcgm-exporter or Kafka. The worker's pure core
(:class:`streams.core.flow.processor.Processor`, what the worker's Faust agent runs record by
record) is fed the watchers' records as they were published, each through the wire codec, and
beside them what the agent's other collectors would publish for the node: the kubelet's
PodResources DRA row of the holder and a healthy DCGM scrape after each slice change. From those
it must decide the device's health (``dra-taint`` unhealthy beside DCGM's healthy) and the
``device-unhealthy`` alert naming the holder with its real UID, and resolve it once the taint is
gone.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agents.kube.watch import PodWatcher, ResourceClaimWatcher, ResourceSliceWatcher
from agents.types import AgentRecord
from contract.codec import WIRE
from contract.inputs import (
    DcgmSample,
    DcgmScrape,
    DeviceAssignment,
    DeviceTaint,
    DraDevice,
    PodRecord,
    PodResourcesSnapshot,
    ResourceClaimRecord,
    ResourceSliceRecord,
)
from contract.outputs import Alert, AttributionEvent
from gpuattr.localkafka import default_cache_dir
from gpuattr.localkube import LocalKube
from streams.core.flow.processor import Processor, Tables
from tests.helpers import wait_for
from tests.kube_fixture import KubeError, Rest
from tests.realkube.cluster import gpu_pod, running, set_running
from tests.realkube.deploy import AGENT_NAMESPACE, apply_rbac, ensure_namespace
from tests.realkube.test_dra_real import DRIVER, allocation, resource_claim, resource_slice

NS = "dra-taints"
GPU = "GPU-7c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f"
TAINT_KEY = "gpu.nvidia.com/xid"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims"
PODS = f"/api/v1/namespaces/{NS}/pods"


def tainted(slice_obj: dict[str, Any], taints: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The slice's devices with ``gpu-0`` carrying ``taints`` (none: untainted)."""
    devices = [dict(d) for d in slice_obj["spec"]["devices"]]
    for d in devices:
        d.pop("taints", None)
        if d["name"] == "gpu-0" and taints:
            d["taints"] = taints
    return devices


def holder_pod(name: str, node: str, claim: str) -> dict[str, Any]:
    """A pod bound to the node that uses the claim (what the scheduler would have bound)."""
    pod = gpu_pod(name, node, gpus=0)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return pod


@dataclass
class Worker:
    """The worker's pure core fed the agent's records as published (through the wire codec),
    plus what the node's PodResources and DCGM collectors would publish."""

    node: str
    out: list[AgentRecord]
    processor: Processor = field(default_factory=lambda: Processor(Tables.in_memory()))
    fed: int = 0
    last_ms: int = 0

    def _handle(self, record: object) -> list[object]:
        wired = WIRE.decode(WIRE.encode(record))
        assert wired == record
        self.last_ms = max(self.last_ms, getattr(record, "ts_ms", 0))
        return list(self.processor.handle(wired))

    def catch_up(self) -> list[object]:
        """Everything the watchers published since the last call."""
        outputs: list[object] = []
        while self.fed < len(self.out):
            outputs += self._handle(self.out[self.fed])
            self.fed += 1
        return outputs

    def podresources(self, pod: str, claim: str) -> list[object]:
        row = DeviceAssignment(
            NS, pod, "main", f"dra:{DRIVER}", f"{self.node}/gpu-0", f"{NS}/{claim}"
        )
        return self._handle(PodResourcesSnapshot(self.node, self.last_ms + 1, (row,)))

    def scrape(self) -> tuple[AttributionEvent, list[Alert]]:
        """A healthy DCGM scrape of the GPU after what the watchers published: its event, and
        the device-unhealthy alerts since the last call (a heartbeat on a watch record, on a
        slow run, may carry them before the scrape does)."""
        before = self.catch_up()
        ts = self.last_ms + 1000
        sample = DcgmSample(
            self.node, ts, GPU, 0, "NVIDIA H100 80GB HBM3", self.node, util_pct=80.0
        )
        outputs = self._handle(DcgmScrape(self.node, ts, (sample,)))
        (event,) = [o for o in outputs if isinstance(o, AttributionEvent) and o.device_uuid == GPU]
        alerts = [
            o for o in (*before, *outputs) if isinstance(o, Alert) and o.kind == "device-unhealthy"
        ]
        return event, alerts


def latest_slice(out: list[AgentRecord], name: str) -> ResourceSliceRecord | None:
    found = None
    for rec in out:
        if isinstance(rec, ResourceSliceRecord) and rec.name == name:
            found = rec
    return found


def gpu0(rec: ResourceSliceRecord | None) -> DraDevice | None:
    if rec is None or rec.deleted:
        return None
    return next((d for d in rec.devices if d.name == "gpu-0"), None)


@contextlib.asynccontextmanager
async def agent_watching(
    kube: LocalKube, tmp_path: Path, node: str
) -> AsyncIterator[list[AgentRecord]]:
    """The agent's slice, claim and pod watchers for ``node``, as its ServiceAccount."""
    rest = Rest.admin(kube)
    apply_rbac(kube)
    token = await rest.token_for(AGENT_NAMESPACE, "gpuattr-agent")
    config = kube.write_kubeconfig(tmp_path / "agent.kubeconfig", token=token, user="gpuattr-agent")
    out: list[AgentRecord] = []

    async def emit(record: AgentRecord) -> None:
        out.append(record)

    kinds = (ResourceSliceWatcher, ResourceClaimWatcher, PodWatcher)
    async with running(node, config, kinds, emit):
        yield out


@pytest.mark.parametrize(
    ("effect", "evicts"),
    [("NoExecute", True), ("NoSchedule", False)],
    ids=["noexecute", "noschedule"],
)
async def test_a_drivers_device_taint_reaches_the_holder_and_resolves_when_lifted(
    real_kube: LocalKube, tmp_path: Path, effect: str, evicts: bool
) -> None:
    node = f"rk-taint-{effect.lower()}"
    rest = Rest.admin(real_kube)
    await ensure_namespace(rest, NS)
    with contextlib.suppress(KubeError):  # another test may have made it
        await rest.create(
            "/apis/resource.k8s.io/v1/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": DRIVER},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
            },
        )
    claim, pod = f"train-{effect.lower()}", f"trainer-{effect.lower()}"
    slice_name = f"{node}-gpu.nvidia.com"
    slice_obj = await rest.create(SLICES, resource_slice(node, GPU))
    await rest.create(CLAIMS, resource_claim(claim))
    created = await rest.create(PODS, holder_pod(pod, node, claim))
    uid = created["metadata"]["uid"]
    await set_running(rest, NS, pod)
    await rest.merge_patch(f"{CLAIMS}/{claim}/status", allocation(node, "gpu-0", [(pod, uid)]))
    try:
        async with agent_watching(real_kube, tmp_path, node) as out:
            worker = Worker(node, out)

            def everything_seen() -> bool:
                pods = {r.name for r in out if isinstance(r, PodRecord)}
                claims = {r.name for r in out if isinstance(r, ResourceClaimRecord)}
                placed = gpu0(latest_slice(out, slice_name)) is not None
                return pod in pods and claim in claims and placed

            await wait_for(everything_seen, 60, what="the node's pod, claim and slice")
            worker.catch_up()
            worker.podresources(pod, claim)
            event, alerts = worker.scrape()
            assert [(h.pod, h.uid, h.claim) for h in event.holders] == [(pod, uid, f"{NS}/{claim}")]
            assert (event.health.sources, event.health.verdict, alerts) == ((), None, [])

            # the driver taints the GPU on an XID 79 (fallen off the bus)
            before_ms = int(time.time()) * 1000 - 1000
            taint = {"key": TAINT_KEY, "value": "79", "effect": effect}
            stored = await rest.merge_patch(
                f"{SLICES}/{slice_name}", {"spec": {"devices": tainted(slice_obj, [taint])}}
            )
            (kept,) = gpu0_of(stored)["taints"]  # the gate is on: stored, timeAdded defaulted
            assert {k: kept[k] for k in taint} == taint
            assert kept["timeAdded"]

            def published_taint() -> tuple[DeviceTaint, ...]:
                device = gpu0(latest_slice(out, slice_name))
                return device.taints if device else ()

            (said,) = await wait_for(published_taint, 30, what="the taint, published")
            assert (said.key, said.value, said.effect) == (TAINT_KEY, "79", effect)
            assert said.time_added_ms is not None
            assert said.time_added_ms >= before_ms

            event, alerts = worker.scrape()
            words = [(w.source, w.state, w.detail, w.effect) for w in event.health.sources]
            assert words == [
                ("dra-taint", "unhealthy", f"{TAINT_KEY}=79:{effect}", effect),
                ("dcgm", "healthy", "no memory fault in the reading", None),
            ]
            assert event.health.verdict == "unhealthy"
            (firing,) = alerts
            assert firing.status == "firing"
            assert (firing.node, firing.device_uuid) == (node, GPU)
            assert [(h.namespace, h.pod, h.uid) for h in firing.holders] == [(NS, pod, uid)]
            assert f"{NS}/{pod} (uid {uid})" in firing.summary
            assert f"dra-taint: {TAINT_KEY}=79:{effect}" in firing.summary
            assert ("the holders will be evicted" in firing.summary) is evicts

            # the driver lifts the taint: nothing speaks for the device but DCGM, healthy
            await rest.merge_patch(
                f"{SLICES}/{slice_name}", {"spec": {"devices": tainted(slice_obj, [])}}
            )
            await wait_for(lambda: not published_taint(), 30, what="the taint lifted, published")
            event, alerts = worker.scrape()
            assert (event.health.sources, event.health.verdict) == ((), None)
            (resolved,) = alerts
            assert (resolved.status, resolved.id) == ("resolved", firing.id)
            assert "healthy again" in resolved.summary
            assert [h.uid for h in resolved.holders] == [uid]
    finally:
        for path in (f"{PODS}/{pod}", f"{CLAIMS}/{claim}", f"{SLICES}/{slice_name}"):
            with contextlib.suppress(KubeError):
                await rest.delete(path, grace_s=0)  # no kubelet to finish a graceful one


def gpu0_of(obj: dict[str, Any]) -> dict[str, Any]:
    return next(d for d in obj["spec"]["devices"] if d["name"] == "gpu-0")


class GateOff(LocalKube):
    """The same API server with ``DRADeviceTaints`` off (its default in 1.35), and so
    ``DRADeviceTaintRules``, which the server refuses to start with without it."""

    def _apiserver_cmd(self) -> list[str]:
        cmd = super()._apiserver_cmd()
        gates = [i for i, arg in enumerate(cmd) if "DRADeviceTaints=true" in arg]
        assert len(gates) == 1, cmd
        off = cmd[gates[0]].replace("DRADeviceTaints=true", "DRADeviceTaints=false")
        cmd[gates[0]] = off.replace("DRADeviceTaintRules=true", "DRADeviceTaintRules=false")
        return cmd


async def test_without_the_gate_the_server_drops_the_taint(tmp_path: Path) -> None:
    """Why the tier turns ``DRADeviceTaints`` on: off, the taint is dropped on create and on
    update, silently (no warning, no error), so nothing downstream could ever see it."""
    async with GateOff(tmp_path / "kube", default_cache_dir()) as kube:
        rest = Rest.admin(kube)
        node = "rk-taint-gate-off"
        taint = {"key": TAINT_KEY, "value": "79", "effect": "NoExecute"}
        body = resource_slice(node, GPU)
        body["spec"]["devices"] = tainted(body, [taint])
        created = await rest.create(SLICES, body)
        assert "taints" not in gpu0_of(created)
        path = f"{SLICES}/{node}-gpu.nvidia.com"
        updated = await rest.merge_patch(path, {"spec": {"devices": tainted(created, [taint])}})
        assert "taints" not in gpu0_of(updated)
        assert "taints" not in gpu0_of(await rest.get(path))
