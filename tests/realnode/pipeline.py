"""The real pipeline on the real node: ``gpuattr agent`` (its collectors on the real kubelet's
socket and the real API server) and ``gpuattr worker`` as processes, on the real local Kafka;
with ``cluster_role``, ``gpuattr cluster`` too (what only it reads: DeviceTaintRules, the GPU
Operator's objects, partition clocks).

dcgm-exporter cannot run here: its double (:class:`sim.exporter_server.ExporterDouble`) serves
the node's GPUs, MIG instances and the DRA driver's GPUs by their UUIDs, with a utilisation the
test sets per device, and no pod labels (attribution comes from our own join). It lists the
node's hardware, as NVML would, not what the API server lists at the moment: the kubelet deletes
the node's ResourceSlices each time it restarts, and the DRA GPUs are still there meanwhile
(:meth:`gpuattr.localkube.node.LocalNode.dra_hardware`).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from contract.outputs import Alert, AttributionEvent
from gpuattr.localkube.cluster import LocalCluster
from gpuattr.localkube.process import free_port
from gpuattr.procs import Child, settings_env
from infra.admin import create_topics
from infra.settings import KafkaSettings
from infra.topics import topic_specs
from sim.exporter_rows import ExporterRow
from sim.exporter_server import ExporterDouble
from tests.integration.pipeline import Collected, collect

BUSY = 60.0


@dataclass
class Telemetry:
    """What the exporter double reports: every device of the node, ``util`` per device key."""

    cluster: LocalCluster
    util: dict[str, float] = field(default_factory=dict)

    def rows(self) -> list[ExporterRow]:
        node = self.cluster.node
        out = []
        for gpu in node.layout:
            base = {"gpu": gpu.index, "uuid": gpu.uuid, "model": gpu.model, "hostname": node.name}
            if gpu.migs:
                for mig in gpu.migs:
                    ratio = self.util.get(mig.uuid, BUSY) / 100
                    out.append(
                        ExporterRow(
                            **base,  # type: ignore[arg-type]
                            mig_profile=mig.profile,
                            mig_instance_id=mig.gi,
                            values=(("DCGM_FI_PROF_GR_ENGINE_ACTIVE", ratio),),
                        )
                    )
            else:
                out.append(ExporterRow(**base, values=self._values(gpu.uuid)))  # type: ignore[arg-type]
        first = len(node.layout)
        for n, (_, gpu_uuid) in enumerate(node.dra_hardware()):
            row = ExporterRow(
                gpu=first + n,
                uuid=gpu_uuid,
                model="LATEST-GPU-MODEL",
                hostname=node.name,
                values=self._values(gpu_uuid),
            )
            out.append(row)
        return out

    def _values(self, key: str) -> tuple[tuple[str, float], ...]:
        util = self.util.get(key, BUSY)
        return (
            ("DCGM_FI_DEV_GPU_UTIL", util),
            ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", util / 100),
            ("DCGM_FI_DEV_FB_USED", 1024.0 if util else 0.0),
            ("DCGM_FI_DEV_FB_FREE", 80000.0),
        )

    def devices(self) -> set[str]:
        keys = {k for g in self.cluster.node.layout for k in g.device_keys()}
        return keys | {u for _, u in self.cluster.node.dra_hardware()}


@dataclass
class RealPipeline:
    kafka: KafkaSettings
    agent: Child
    worker: Child
    telemetry: Telemetry
    agent_metrics_url: str
    events: Collected
    alerts: Collected
    role: Child | None = None  # the cluster role, when it runs

    def logs(self, lines: int = 40) -> str:
        unreadable = [*self.events.unreadable, *self.alerts.unreadable]
        said = "".join(f"--- unreadable\n{line}\n" for line in unreadable[:5])
        children = (self.agent, self.worker, *([self.role] if self.role else []))
        return said + "\n".join(f"--- {c.name}\n{c.tail(lines)}" for c in children)

    def attribution(self, since_ms: int = 0) -> list[AttributionEvent]:
        return [
            e
            for e in self.events.records
            if isinstance(e, AttributionEvent) and e.ts_ms >= since_ms
        ]

    def alert_records(self) -> list[Alert]:
        return [a for a in self.alerts.records if isinstance(a, Alert)]

    async def agent_metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        """The agent's own /metrics: the series of ``name`` with exactly ``labels``, or, without
        labels, the sum of all its series (0 when absent)."""
        want = "".join(f'{k}="{v}",' for k, v in sorted((labels or {}).items())).rstrip(",")
        async with aiohttp.ClientSession() as s, s.get(self.agent_metrics_url) as resp:
            text = await resp.text()
        total = 0.0
        for line in text.splitlines():
            metric, _, value = line.rpartition(" ")
            if line.startswith("#"):
                continue
            if (want and metric == f"{name}{{{want}}}") or (
                not want and (metric == name or metric.startswith(name + "{"))
            ):
                total += float(value)
        return total


@contextlib.asynccontextmanager
async def real_pipeline(
    bootstrap: str,
    cluster: LocalCluster,
    workdir: Path,
    *,
    own_pod: str,
    worker_env: dict[str, str] | None = None,
    cluster_role: bool = False,
) -> AsyncIterator[RealPipeline]:
    kafka = KafkaSettings(
        bootstrap=bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:10]}.", partitions=2
    )
    app_id = kafka.topic_prefix + "worker"
    await create_topics(bootstrap, topic_specs(kafka, app_id))
    node = cluster.node
    inventory = workdir / "inventory.json"
    node.write_inventory(inventory)
    telemetry = Telemetry(cluster)
    base = settings_env(
        KAFKA_BOOTSTRAP=kafka.bootstrap,
        KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
        KAFKA_PARTITIONS=kafka.partitions,
    )
    metrics_port = free_port()
    async with ExporterDouble(telemetry.rows) as exporter:
        agent_env = {
            **base,
            **settings_env(
                KUBELET_SOCKET_PATH=node.podresources_socket,
                KUBELET_POLL_INTERVAL_S=0.5,
                KUBELET_SNAPSHOT_INTERVAL_S=30,
                KUBELET_OWN_POD=own_pod,
                KUBE_ENABLED="true",
                KUBE_KUBECONFIG=cluster.kube.kubeconfig,
                KUBE_MAX_BACKOFF_S=1,
                DCGM_URL=exporter.url,
                DCGM_SCRAPE_INTERVAL_S=1,
                INVENTORY_FILE=inventory,
                OBSERVE_HOST="127.0.0.1",
                OBSERVE_AGENT_PORT=metrics_port,
            ),
        }
        worker = {
            **base,
            **settings_env(
                WORKER_APP_ID=app_id, WORKER_DATA_DIR=workdir / "worker", WORKER_WEB_ENABLED="false"
            ),
            **(worker_env or {}),
        }
        agent_child = Child(
            "agent", ["agent", "--node", node.name], agent_env, workdir / "agent.log"
        )
        worker_child = Child("worker", ["worker"], worker, workdir / "worker.log")
        role_env = {
            **base,
            **settings_env(
                KUBE_KUBECONFIG=cluster.kube.kubeconfig,
                KUBE_MAX_BACKOFF_S=1,
                CLUSTER_LEADER_ELECTION="false",
                CLUSTER_TICK_INTERVAL_S=5,
            ),
        }
        role = Child("cluster", ["cluster"], role_env, workdir / "cluster.log")
        async with collect(kafka, "attribution") as events, collect(kafka, "alerts") as alerts:
            p = RealPipeline(
                kafka,
                agent_child,
                worker_child,
                telemetry,
                f"http://127.0.0.1:{metrics_port}/metrics",
                events,
                alerts,
                role if cluster_role else None,
            )
            try:
                await worker_child.start()
                if cluster_role:
                    await role.start()
                await agent_child.start()
                yield p
            finally:
                await agent_child.stop()
                if cluster_role:
                    await role.stop()
                await worker_child.stop()
