"""Run every double of a scenario: per node a kubelet (gRPC on a unix socket) and an exporter."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from infra.ports import free_port
from sim.apiserver import ApiServerDouble
from sim.cluster import Cluster
from sim.exporter_rows import ExporterRow
from sim.exporter_server import ExporterDouble
from sim.gpuoperator import (
    cluster_policy_objects,
    exporter_answers,
    gpu_cluster_objects,
    operand_pod_objects,
)
from sim.kube_objects import exporter_pod_objects, node_objects, pod_objects
from sim.kubelet_server import KubeletDouble, State
from sim.kueue import kueue_objects
from sim.scenario import Scenario
from sim.traces import exporter_down


def closed_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, so connecting to it is refused: free now and outside the
    ephemeral range, so no server binding port 0 is given it later, and never handed out again
    by this process."""
    return free_port(host)


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class ScenarioClock:
    """Scenario seconds since :meth:`start`, ``speed`` times faster than wall time."""

    def __init__(self, speed: float = 1.0, offset_s: float = 0.0) -> None:
        self.speed = speed
        self.offset_s = offset_s
        self._t0: float | None = None

    def start(self) -> None:
        self._t0 = time.monotonic()

    def __call__(self) -> float:
        if self._t0 is None:
            return self.offset_s
        return self.offset_s + (time.monotonic() - self._t0) * self.speed


@dataclass(frozen=True, slots=True)
class NodeEndpoints:
    node: str
    kubelet_socket: Path
    exporter_url: str
    inventory_file: Path
    api_url: str | None = None

    def agent_env(self, poll_interval_s: float, scrape_interval_s: float) -> dict[str, str]:
        """``GPUATTR_*`` settings that point a real agent at this node's doubles."""
        env = {
            "GPUATTR_KUBELET_SOCKET_PATH": str(self.kubelet_socket),
            "GPUATTR_KUBELET_POLL_INTERVAL_S": str(poll_interval_s),
            "GPUATTR_KUBELET_SNAPSHOT_INTERVAL_S": "30",
            "GPUATTR_DCGM_URL": self.exporter_url,
            "GPUATTR_DCGM_SCRAPE_INTERVAL_S": str(scrape_interval_s),
            "GPUATTR_INVENTORY_FILE": str(self.inventory_file),
            "GPUATTR_KUBE_ENABLED": "true" if self.api_url else "false",
            "GPUATTR_OBSERVE_AGENT_PORT": "0",  # several agents share one host here
        }
        if self.api_url:
            env["GPUATTR_KUBE_API_URL"] = self.api_url
            # as deployed: the node's own exporter pod, found through the pod watch
            env["GPUATTR_DCGM_DISCOVER"] = "true"
        return env

    def cluster_env(self, tick_interval_s: float) -> dict[str, str]:
        """``GPUATTR_*`` settings that point the cluster role at this cluster's API server."""
        assert self.api_url, "the cluster role reads the API server"
        return {
            "GPUATTR_KUBE_API_URL": self.api_url,
            "GPUATTR_CLUSTER_TICK_INTERVAL_S": str(tick_interval_s),
            "GPUATTR_CLUSTER_LEASE_NAMESPACE": "gpuattr",
            "GPUATTR_OBSERVE_CLUSTER_PORT": "0",
        }


class SimulatedCluster:
    """Starts the doubles of every node of a scenario; stops them on exit."""

    def __init__(
        self,
        scenario: Scenario,
        workdir: Path,
        clock: ScenarioClock,
        *,
        host: str = "127.0.0.1",
        api_port: int = 0,
        exporter_port_base: int = 0,
        advertise: str | None = None,
        hold_clock: bool = False,
    ) -> None:
        """``hold_clock``: the scenario stays at its first instant once the doubles serve, until
        the caller starts ``clock`` (the demo does once every role is up: a role that starts
        slowly must not miss the scenario's opening seconds)."""
        self.hold_clock = hold_clock
        self.host = host
        self.api_port = api_port
        self.exporter_port_base = exporter_port_base
        self.advertise = advertise
        self.scenario = scenario
        self.workdir = workdir
        self.clock = clock
        self.cluster = Cluster(scenario, clock)
        self.kubelets: dict[str, KubeletDouble] = {}
        self.exporters: dict[str, ExporterDouble] = {}
        self.apiserver: ApiServerDouble | None = None
        self.exporter_ports: dict[str, int] = {}
        self.epoch_s = time.time()
        self._stack = contextlib.AsyncExitStack()

    def _podresources(self, node: str) -> State:
        return lambda: self.cluster.podresources(node)

    def _rows(self, node: str) -> Callable[[], list[ExporterRow]]:
        scrapes = iter(range(1 << 62))
        return lambda: self.cluster.exporter_rows(node, next(scrapes))

    def _objects(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        t = self.clock()
        gone = {n.name for n in self.scenario.nodes if n.deleted_s is not None and t >= n.deleted_s}
        ports = {n: port for n, port in self.exporter_ports.items() if n not in gone}
        exporters = exporter_pod_objects(self.scenario, ports, self.epoch_s, self.host)
        operands = operand_pod_objects(
            self.scenario, t, self.epoch_s, host=self.host, exporter_ports=ports
        )
        pods = [*pod_objects(self.scenario, t, self.epoch_s), *exporters, *operands]
        return pods, node_objects(self.scenario, t)

    async def _exporters_follow_scenario(self, every_s: float = 0.1) -> None:
        """An exporter whose operand pod is not running (crash looping, in an init container),
        or that is restarting, does not listen: its double's port refuses connections until
        it runs again."""
        while True:
            await self._sync_exporters()
            await asyncio.sleep(every_s)

    async def _sync_exporters(self) -> None:
        t = self.clock()
        for spec in self.scenario.nodes:
            exporter = self.exporters.get(spec.name)
            if exporter is None:
                continue
            if exporter_answers(self.scenario, spec, t) and not exporter_down(
                spec.exporter_restarts, t
            ):
                await exporter.up()
            else:
                await exporter.down()

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.epoch_s = time.time() - self.clock()
        self.apiserver = await self._stack.enter_async_context(
            ApiServerDouble(
                self._objects,
                dra_objects=lambda: self.cluster.dra_objects(self.epoch_s),
                # served only where the scenario has one: elsewhere no GPU Operator, no CRD
                cluster_policies=(
                    (
                        lambda: [
                            *cluster_policy_objects(self.scenario, self.epoch_s),
                            *gpu_cluster_objects(self.scenario, self.epoch_s),
                        ]
                    )
                    if self.scenario.cluster_policy is not None
                    or self.scenario.gpu_cluster is not None
                    else None
                ),
                dra_stack=self.scenario.gpu_cluster is not None,
                kueue_objects=(
                    (lambda: kueue_objects(self.scenario, self.clock(), self.epoch_s))
                    if self.scenario.kueue is not None
                    else None
                ),
                host=self.host,
                port=self.api_port,
            )
        )
        for spec in self.scenario.nodes:
            node = spec.name
            sock = self.workdir / f"{node}.kubelet.sock"
            kubelet = KubeletDouble(sock, self._podresources(node))
            port = self.exporter_port_base + len(self.exporters) if self.exporter_port_base else 0
            exporter = ExporterDouble(self._rows(node), host=self.host, port=port)
            self.kubelets[node] = await self._stack.enter_async_context(kubelet)
            self.exporters[node] = await self._stack.enter_async_context(exporter)
            # the port its exporter pod names: a port nobody listens on for an exporter "down"
            self.exporter_ports[node] = exporter.port if spec.exporter != "down" else closed_port()
            self.inventory_file(node).write_bytes(orjson.dumps(self.cluster.inventory(node)))
        if not self.hold_clock:
            self.clock.start()
        if any(n.operator is not None or n.exporter_restarts for n in self.scenario.nodes):
            await self._sync_exporters()
            follow = asyncio.create_task(self._exporters_follow_scenario(), name="sim-exporters")
            self._stack.push_async_callback(_cancel, follow)

    def polled(self) -> bool:
        """Every node's kubelet double has been listed at least once: an agent reads each node."""
        return all(k.list_calls > 0 for k in self.kubelets.values())

    async def stop(self) -> None:
        await self._stack.aclose()

    async def __aenter__(self) -> SimulatedCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def inventory_file(self, node: str) -> Path:
        return self.workdir / f"{node}.inventory.json"

    def endpoints(self) -> list[NodeEndpoints]:
        def public(url: str) -> str:
            return url.replace(self.host, self.advertise) if self.advertise else url

        return [
            NodeEndpoints(
                n,
                self.kubelets[n].socket_path,
                public(self.exporters[n].url),
                self.inventory_file(n),
                public(self.apiserver.url) if self.apiserver else None,
            )
            for n in self.kubelets
        ]
