"""The node agent: one per node, runs the collectors and publishes what they see."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from agents.dcgm.collect import DcgmCollector
from agents.inventory import InventoryError, read_inventory
from agents.locate import ExporterLocator
from agents.podresources.collect import PodResourcesCollector
from agents.processes.nvml import NvmlProcesses
from agents.publish import Publisher
from agents.selfmetrics import SOURCE_ERRORS
from agents.startgate import StartGate
from agents.status import StatusPublisher
from agents.types import AgentRecord, Emit, NowMs
from contract.inputs import PodListSnapshot, PodResourcesSnapshot
from infra.observe import ObservabilityServer
from infra.settings import (
    AgentProcessSettings,
    AgentStatusSettings,
    DcgmSettings,
    InventorySettings,
    KafkaSettings,
    KubeletSettings,
    KubeSettings,
    ObserveSettings,
)

log = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class AgentSettings:
    node: str
    kafka: KafkaSettings
    kubelet: KubeletSettings
    dcgm: DcgmSettings
    kube: KubeSettings
    inventory: InventorySettings
    observe: ObserveSettings = field(default_factory=ObserveSettings)
    status: AgentStatusSettings = field(default_factory=AgentStatusSettings)
    processes: AgentProcessSettings = field(default_factory=AgentProcessSettings)

    def __post_init__(self) -> None:
        if self.dcgm.discover and not self.kube.enabled:
            raise ValueError(
                "GPUATTR_DCGM_DISCOVER finds the node's exporter pod through the API server: "
                "it needs GPUATTR_KUBE_ENABLED=true (or give GPUATTR_DCGM_URL instead)"
            )


async def publish_inventory(
    node: str, settings: InventorySettings, emit: Emit, now_ms: NowMs
) -> None:
    """Publish the device inventory at start and then every ``interval_s`` if it changed."""
    last = None
    while True:
        try:
            inv = read_inventory(node, now_ms(), settings.file)
        except InventoryError as exc:
            SOURCE_ERRORS.labels("inventory", "unreadable").inc()
            log.warning("%s", exc)
            inv = None
        if inv is not None and (last is None or (inv.gpus, inv.migs) != (last.gpus, last.migs)):
            await emit(inv)
            last = inv
        await asyncio.sleep(settings.interval_s)


async def run_agent(settings: AgentSettings, now_ms: NowMs = wall_clock_ms) -> None:
    """Run every collector for the node until cancelled."""
    node = settings.node
    async with Publisher(settings.kafka) as publisher, contextlib.AsyncExitStack() as stack:
        # the first samples wait for what identifies their holders (agents/startgate.py)
        needs = (
            (PodResourcesSnapshot, PodListSnapshot)
            if settings.kube.enabled
            else (PodResourcesSnapshot,)
        )
        gate = StartGate(publisher.publish, needs, settings.dcgm.first_sample_wait_s)
        emit = gate.emit
        if settings.observe.agent_port:
            server = ObservabilityServer(
                settings.observe.host, settings.observe.agent_port, {"kafka": publisher.started}
            )
            await server.start()
            stack.push_async_callback(server.stop)
        kubelet, dcgm = settings.kubelet, settings.dcgm
        locator = (
            ExporterLocator(
                dcgm.pod_selector,
                namespace=dcgm.exporter_namespace,
                daemonset=dcgm.exporter_daemonset,
                scheme=dcgm.scheme,
                path=dcgm.path,
            )
            if dcgm.discover
            else None
        )

        async def allocation_emit(record: AgentRecord) -> None:
            """PodResources records name holders: the pods' identities go first (once)."""
            await gate.wait_for((PodListSnapshot,))
            await emit(record)

        podresources = PodResourcesCollector(
            node=node,
            socket_path=kubelet.socket_path,
            poll_interval_s=kubelet.poll_interval_s,
            snapshot_interval_s=kubelet.snapshot_interval_s,
            rpc_timeout_s=kubelet.rpc_timeout_s,
            own_pod=kubelet.own_pod,
            ready_timeout_s=kubelet.ready_timeout_s,
            emit=allocation_emit,
            now_ms=now_ms,
        )
        exporter = DcgmCollector(
            node=node,
            url=dcgm.url,
            interval_s=dcgm.scrape_interval_s,
            timeout_s=dcgm.timeout_s,
            emit=emit,
            now_ms=now_ms,
            before_first_scrape=gate.wait,
            locate=locator.target if locator is not None else None,
            usage=(
                NvmlProcesses(settings.processes.proc_root)
                if settings.processes.nvml_processes
                else None
            ),
            per_pod=dcgm.per_pod_rows,
        )
        healths = {"podresources": podresources.health, "dcgm": exporter.health}
        tasks = {
            "podresources": podresources.run(),
            "dcgm": exporter.run(),
            "inventory": publish_inventory(node, settings.inventory, emit, now_ms),
        }
        if settings.kube.enabled:
            from agents.kube.watch import (
                ExporterWatcher,
                NodeWatcher,
                OperandWatcher,
                PodWatcher,
                ResourceClaimWatcher,
                ResourceSliceWatcher,
                make_api_client,
            )

            api = await make_api_client(settings.kube)
            stack.push_async_callback(api.close)
            Kind = PodWatcher | NodeWatcher | ResourceSliceWatcher | ResourceClaimWatcher
            watchers: list[tuple[str, type[Kind]]] = [("pods", PodWatcher), ("node", NodeWatcher)]
            if settings.kube.dra:
                watchers += [("resourceslices", ResourceSliceWatcher)]
                watchers += [("resourceclaims", ResourceClaimWatcher)]
            for name, watcher in watchers:
                running = watcher(
                    node=node, api=api, emit=emit, now_ms=now_ms, settings=settings.kube
                )
                if name == "pods":
                    healths["apiserver"] = running.health
                tasks[name] = running.run()
            if settings.kube.operator_namespace:
                tasks["operand-pods"] = OperandWatcher(
                    node=node,
                    api=api,
                    emit=emit,
                    now_ms=now_ms,
                    settings=settings.kube,
                    namespace=settings.kube.operator_namespace,
                ).run()
            if locator is not None:
                tasks["exporter-pods"] = ExporterWatcher(
                    node=node,
                    api=api,
                    emit=emit,
                    now_ms=now_ms,
                    settings=settings.kube,
                    locator=locator,
                    port_name=dcgm.port_name,
                    default_port=dcgm.port,
                ).run()
        status = StatusPublisher(node, healths, emit, now_ms, settings.status.status_interval_s)
        tasks["status"] = status.run()
        log.info("agent for node %s: %s", node, ", ".join(tasks))
        async with asyncio.TaskGroup() as group:
            for name, coro in tasks.items():
                group.create_task(coro, name=name)
