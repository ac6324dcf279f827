"""Run the real pipeline for a test: topics, simulated cluster, agent and worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from contract import codec
from contract.topics import TopicRole
from gpuattr.procs import Child, settings_env
from infra.admin import create_topics
from infra.kafka import client_options
from infra.settings import KafkaSettings
from infra.topics import topic_specs
from sim.runner import ScenarioClock, SimulatedCluster
from sim.scenario import Scenario

#: the query API's bearer token every pipeline worker accepts and sends its peers
API_TOKEN = "pipeline-query-api-token-5f0c2a"
API_AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


@dataclass
class Collected:
    """Every record read from one topic, decoded, in arrival order.

    ``unreadable``: each payload of the topic our codec could not read (offset, reason). Our
    own outputs always decode, so :func:`collect` fails the test when any was seen; reading goes
    on past one, so a wait for later records is not stalled by it."""

    records: list[Any] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


@contextlib.asynccontextmanager
async def collect(kafka: KafkaSettings, role: TopicRole) -> AsyncIterator[Collected]:
    consumer = AIOKafkaConsumer(
        kafka.topic(role),
        bootstrap_servers=kafka.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
        **client_options(kafka),
    )
    await consumer.start()
    out = Collected()

    async def pump() -> None:
        async for msg in consumer:
            try:
                out.records.append(codec.decode(msg.value or b""))
            except codec.DecodeError as exc:
                head = (msg.value or b"")[:300]
                out.unreadable.append(f"{msg.topic}[{msg.partition}]@{msg.offset}: {exc}: {head!r}")

    task = asyncio.create_task(pump(), name=f"collect-{role}")
    try:
        yield out
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await consumer.stop()
    assert not out.unreadable, f"records on {role} our codec cannot read: {out.unreadable[:5]}"


@dataclass
class Pipeline:
    kafka: KafkaSettings
    sim: SimulatedCluster
    clock: ScenarioClock
    workers: list[Child]
    agents: list[Child]
    workdir: Path
    worker_env: dict[str, str] = field(default_factory=dict)
    web_ports: list[int] = field(default_factory=list)  # one per worker: query API on
    #: each role's own Kafka settings (credentials), e.g. {"agent": {...}, "worker": {...}}
    role_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    cluster: Child | None = None  # the cluster role: node deletions, partition clock ticks

    def agent(self, node: str) -> Child:
        return next(a for a in self.agents if a.name == f"agent-{node}")

    def worker_child(self, n: int) -> Child:
        env = {
            **self.env(),
            **settings_env(
                WORKER_APP_ID=self.kafka.topic_prefix + "worker",
                WORKER_DATA_DIR=self.workdir / f"worker-{n}",
                WORKER_WEB_ENABLED="true" if self.web_ports else "false",
                WORKER_WEB_PORT=self.web_ports[n] if self.web_ports else None,
                WORKER_PEERS=",".join(f"http://127.0.0.1:{port}" for port in self.web_ports)
                or None,
                API_TOKEN=API_TOKEN if self.web_ports else None,
            ),
            **self.role_env.get("worker", {}),
            **self.worker_env,  # the test's own settings win
        }
        return Child(f"worker-{n}", ["worker"], env, self.workdir / f"worker-{n}.log")

    def env(self) -> dict[str, str]:
        return settings_env(
            KAFKA_BOOTSTRAP=self.kafka.bootstrap,
            KAFKA_TOPIC_PREFIX=self.kafka.topic_prefix,
            KAFKA_PARTITIONS=self.kafka.partitions,
            # GPUATTR_LOG_LEVEL / GPUATTR_WORKER_LOGLEVEL (Faust's: info shows its recovery and
            # rebalances) on the test run reach every child, to chase a stall; unset, each role
            # keeps its default
            LOG_LEVEL=os.environ.get("GPUATTR_LOG_LEVEL"),
            WORKER_LOGLEVEL=os.environ.get("GPUATTR_WORKER_LOGLEVEL"),
        )

    def logs(self, lines: int = 30) -> str:
        children = (*self.workers, *self.agents, *([self.cluster] if self.cluster else []))
        return "\n".join(f"--- {c.name}\n{c.tail(lines)}" for c in children)


@contextlib.asynccontextmanager
async def pipeline(
    bootstrap: str,
    scenario: Scenario,
    workdir: Path,
    *,
    workers: int = 1,
    partitions: int = 4,
    agent_env: dict[str, str] | None = None,
    worker_env: dict[str, str] | None = None,
    web_ports: list[int] | None = None,
    before_start: Callable[[SimulatedCluster], None] | None = None,
    agent_env_for: Callable[[SimulatedCluster], dict[str, dict[str, str]]] | None = None,
    tick_s: float | None = None,
    admin: KafkaSettings | None = None,
    topic_prefix: str | None = None,
    role_env: Mapping[str, Mapping[str, str]] | None = None,
) -> AsyncIterator[Pipeline]:
    """Everything of a real deployment but the cluster, with a scenario clock the test moves.

    ``agent_env_for``: some nodes' agent settings on top of the others' (given the started
    doubles: e.g. another node's exporter URL); ``tick_s``: run the cluster role, ticking every
    partition that often; ``admin``: the settings topics are created and collected with (a
    secured broker's super user); ``role_env``: each role's own credentials on top of the common
    settings."""
    kafka = (admin or KafkaSettings(bootstrap=bootstrap)).model_copy(
        update={
            "topic_prefix": topic_prefix or f"t{uuid.uuid4().hex[:10]}.",
            "partitions": partitions,
        }
    )
    await create_topics(
        bootstrap, topic_specs(kafka, kafka.topic_prefix + "worker"), **client_options(kafka)
    )
    clock = ScenarioClock(speed=0.0)
    async with SimulatedCluster(scenario, workdir / "sim", clock) as sim:
        p = Pipeline(
            kafka,
            sim,
            clock,
            [],
            [],
            workdir,
            worker_env or {},
            web_ports or [],
            role_env or {},
        )
        p.workers = [p.worker_child(n) for n in range(workers)]
        per_node = agent_env_for(sim) if agent_env_for is not None else {}
        for ep in sim.endpoints():
            env = {
                **p.env(),
                **ep.agent_env(poll_interval_s=0.2, scrape_interval_s=0.5),
                **(role_env or {}).get("agent", {}),
                **(agent_env or {}),
                **per_node.get(ep.node, {}),
            }
            p.agents.append(
                Child(
                    f"agent-{ep.node}",
                    ["agent", "--node", ep.node],
                    env,
                    workdir / f"agent-{ep.node}.log",
                )
            )
        if tick_s is not None:
            cluster_env = {
                **p.env(),
                **sim.endpoints()[0].cluster_env(tick_s),
                **(role_env or {}).get("cluster", {}),
            }
            p.cluster = Child("cluster", ["cluster"], cluster_env, workdir / "cluster.log")
        if before_start is not None:
            before_start(sim)  # e.g. a fault switch on a double, set before any agent runs
        extra = [p.cluster] if p.cluster else []
        try:
            for child in (*p.workers, *p.agents, *extra):
                await child.start()
            yield p
        finally:
            for child in (*extra, *p.agents, *p.workers):
                await child.stop()
