"""``gpuattr demo``: local Kafka, a simulated cluster, one agent per node, the cluster role, a
worker, live output: attribution events, alerts, node statuses and demand records (``--json``:
each as the worker wrote it, one a line).

``--secure`` (with the embedded broker): Kafka with TLS, SASL/SCRAM and the authorizer, one user
per role with only its role's ACLs (:mod:`infra.acls`): the agents, the worker, a sink (alerts
read and acknowledged) and the demo's own view (the reader) each connect as their own user."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import orjson
from aiokafka import AIOKafkaConsumer
from rich.console import Console
from rich.live import Live

from contract import codec
from gpuattr.demo_view import render
from gpuattr.localkafka import LocalKafka, LocalKafkaConfig, LocalKafkaSecurity, free_port
from gpuattr.procs import Child, kafka_env, settings_env
from infra.acls import DEFAULT_PRINCIPALS, Role, create_acls, role_acls
from infra.admin import create_topics
from infra.kafka import client_options
from infra.settings import KafkaSettings
from infra.topics import topic_specs
from sim.runner import ScenarioClock, SimulatedCluster
from sim.scenario import load

log = logging.getLogger(__name__)


DEMO_ALERTS = {  # seconds, not the production half hour: the demo shows alerts within its run
    "GPUATTR_ALERTS_IDLE_WINDOW_S": "20",
    "GPUATTR_ALERTS_COOLDOWN_S": "60",
    "GPUATTR_ALERTS_ORPHAN_WINDOW_S": "15",
    "GPUATTR_ALERTS_STACK_GRACE_S": "15",
    # scenario efficiency: busy-but-ineffective, heat, memory faults and PCIe replays
    "GPUATTR_ALERTS_LOW_EFF_WINDOW_S": "20",
    "GPUATTR_ALERTS_THERMAL_WINDOW_S": "15",
    "GPUATTR_ALERTS_HEALTH_QUIET_S": "30",
    # scenario demand: pods waiting for a pool while its allocated GPUs idle
    "GPUATTR_ALERTS_DEMAND_WINDOW_S": "20",
}
#: the allocation spine on the demo's clock: a heartbeat every 10 s, a silent node stale after
#: 30 s and gone after a minute (production: 1, 3 and 10 minutes)
DEMO_SPINE = {
    "GPUATTR_SPINE_HEARTBEAT_S": "10",
    "GPUATTR_SPINE_STALE_AFTER_S": "30",
    "GPUATTR_SPINE_NODE_TTL_S": "60",
    "GPUATTR_SPINE_MAX_CLOCK_JUMP_S": "20",
}
DEMO_TICK_S = 2.0
#: how long the scenario waits for its roles to start (a busy 2-core box: ~10-30 s), and how often
#: it looks
READY_TIMEOUT_S = 120.0
READY_POLL_S = 0.2


async def _stream(kafka: KafkaSettings, deadline: float | None, json_out: bool, title: str) -> int:
    consumer = AIOKafkaConsumer(
        kafka.topic("attribution"),
        kafka.topic("alerts"),
        kafka.topic("node-status"),
        kafka.topic("demand"),
        bootstrap_servers=kafka.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
        **client_options(kafka),
    )
    await consumer.start()
    count = 0
    latest: dict[str, dict[str, object]] = {}
    alerts: list[dict[str, object]] = []
    stacks: dict[str, dict[str, object]] = {}  # node → its latest node-status
    pools: dict[str, dict[str, object]] = {}  # pool → its latest demand record
    retired = {kafka.topic("node-status"): stacks, kafka.topic("demand"): pools}
    live = (
        None
        if json_out
        else Live(
            render(latest, alerts, title, stacks, pools), console=Console(), auto_refresh=False
        )
    )
    try:
        if live:
            live.start()
        while deadline is None or time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for messages in batch.values():
                for msg in messages:
                    key = (msg.key or b"").decode()
                    if msg.value is None:  # a tombstone: the node left, the pool is empty
                        retired.get(msg.topic, {}).pop(key, None)
                        continue
                    count += 1
                    if json_out:
                        sys.stdout.buffer.write(msg.value + b"\n")
                        continue
                    event = codec.to_dict(codec.decode(msg.value))
                    if event["schema"] == "alert":
                        alerts.append(event)
                    elif event["schema"] == "node-status":
                        stacks[key] = event
                    elif event["schema"] == "demand":
                        pools[key] = event
                    else:
                        latest[key] = event
            if json_out:
                sys.stdout.flush()
            elif live:
                live.update(render(latest, alerts, title, stacks, pools), refresh=True)
    finally:
        if live:
            live.stop()
        await consumer.stop()
    return count


def _write_private(path: Path, text: str) -> None:
    """``text`` in ``path``, readable by this user only (also when the file was there)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(fd, 0o600)
        out.write(text)


async def _roles_ready(sim: SimulatedCluster, api: str, children: list[Child]) -> str | None:
    """Wait until every node's agent has read its kubelet and the worker owns its partitions
    (``/readyz``); ``None`` then, else what is missing after :data:`READY_TIMEOUT_S` or once a
    role has exited."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    worker = False
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while True:
            if not worker:
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                    async with session.get(f"{api}/readyz") as resp:
                        worker = resp.status == 200
            polled = sim.polled()
            if worker and polled:
                return None
            gone = [c.name for c in children if not c.running]
            if gone or time.monotonic() > deadline:
                missing = [] if worker else ["the worker owns no partition yet"]
                missing += [] if polled else ["an agent has not read its kubelet yet"]
                missing += [f"{name} exited" for name in gone]
                return "; ".join(missing)
            await asyncio.sleep(READY_POLL_S)


async def _start_when_ready(sim: SimulatedCluster, api: str, children: list[Child]) -> None:
    """The scenario's clock starts once every role is up, so a role that starts slowly (a busy
    machine) does not miss the scenario's opening seconds: its story — who waits from 5 s, which
    GPUs idle from the start — is told as written. A role still not up after the bound starts it
    anyway, said on stderr."""
    print("demo: waiting for the worker and every agent to start", file=sys.stderr)
    missing = await _roles_ready(sim, api, children)
    if missing:
        print(f"demo: starting the scenario anyway: {missing}", file=sys.stderr)
    sim.clock.start()


async def run_demo(
    kafka: KafkaSettings,
    scenario_name: str,
    duration_s: float | None,
    json_out: bool,
    speed: float = 1.0,
    workdir: Path | None = None,
    secure: bool = False,
) -> int:
    scenario = load(scenario_name)
    if secure and kafka.bootstrap:
        print("demo: --secure runs its own broker; unset GPUATTR_KAFKA_BOOTSTRAP", file=sys.stderr)
        return 2
    run_id = uuid.uuid4().hex[:8]
    with contextlib.ExitStack() as files:
        root = workdir or Path(files.enter_context(tempfile.TemporaryDirectory(prefix="gpuattr-")))
        print(f"demo: working in {root}", file=sys.stderr)
        async with contextlib.AsyncExitStack() as stack:
            # each role's settings: the same Kafka, the role's own user when secured
            role: dict[Role, KafkaSettings]
            if not kafka.bootstrap:
                security = LocalKafkaSecurity.generate(DEFAULT_PRINCIPALS.values())
                broker = LocalKafka(
                    LocalKafkaConfig(
                        data_dir=root / "kafka",
                        log_file=root / "kafka.log",
                        security=security if secure else None,
                    )
                )
                await stack.enter_async_context(broker)
                base = kafka
                kafka = broker.client_settings(base=base)  # the super user
                role = {
                    r: broker.client_settings(user, base)  # plaintext: no user at all
                    for r, user in DEFAULT_PRINCIPALS.items()
                }
            else:
                kafka = kafka.model_copy(update={"topic_prefix": f"gpuattr-demo-{run_id}."})
                role = dict.fromkeys(DEFAULT_PRINCIPALS, kafka)
            assert kafka.bootstrap is not None
            print(f"demo: Kafka {kafka.bootstrap}, topics {kafka.topic_prefix}*", file=sys.stderr)
            app_id = f"gpuattr-demo-{run_id}"
            api_port = free_port()
            api = f"http://127.0.0.1:{api_port}"
            api_token, token_file = secrets.token_hex(32), root / "api-token"
            _write_private(token_file, api_token)
            print(
                f"demo: query API {api} — in another terminal: "
                f"gpuattr top --url {api} --token-file {token_file}",
                file=sys.stderr,
            )
            await create_topics(
                kafka.bootstrap, topic_specs(kafka, app_id), **client_options(kafka)
            )
            sink_group = f"{app_id}-sink"
            # the cluster role signs its ticks and policies with it, the worker checks them
            signing = {"GPUATTR_CLUSTER_SIGNING_KEY": secrets.token_hex(32)}
            if secure:
                rules = role_acls(kafka, app_id, sink_group)
                every = [acl for acls in rules.values() for acl in acls]
                await create_acls(kafka.bootstrap, every, **client_options(kafka))
                print(f"demo: one Kafka user per role, {len(every)} ACLs", file=sys.stderr)
            sim = await stack.enter_async_context(
                SimulatedCluster(scenario, root / "sim", ScenarioClock(speed), hold_clock=True)
            )
            children = [
                Child(
                    "worker",
                    ["worker"],
                    {
                        **kafka_env(role["worker"]),
                        **settings_env(
                            WORKER_APP_ID=app_id,
                            WORKER_DATA_DIR=root / "worker",
                            WORKER_WEB_ENABLED="true",
                            WORKER_WEB_PORT=api_port,
                            API_TOKEN=api_token,
                        ),
                        **DEMO_ALERTS,
                        **DEMO_SPINE,
                        **signing,
                    },
                    root / "worker.log",
                ),
                Child(
                    "cluster",
                    ["cluster"],
                    {
                        **kafka_env(role["cluster"]),
                        **sim.endpoints()[0].cluster_env(DEMO_TICK_S),
                        **signing,
                    },
                    root / "cluster.log",
                ),
            ]
            for ep in sim.endpoints():
                children.append(
                    Child(
                        f"agent-{ep.node}",
                        ["agent", "--node", ep.node],
                        {
                            **kafka_env(role["agent"]),
                            **ep.agent_env(poll_interval_s=0.5, scrape_interval_s=2),
                            "GPUATTR_AGENT_STATUS_INTERVAL_S": "5",
                        },
                        root / f"agent-{ep.node}.log",
                    )
                )
            if secure:  # the sink's own user reads the alerts (no destination: acknowledged)
                sink_env = {
                    **kafka_env(role["sink"]),
                    **settings_env(SINK_GROUP_ID=sink_group, OBSERVE_SINK_PORT=0),
                }
                children.append(Child("sink", ["sink"], sink_env, root / "sink.log"))
            for child in children:
                await child.start()
                stack.push_async_callback(child.stop)
            await _start_when_ready(sim, api, children)
            deadline = None if duration_s is None else time.monotonic() + duration_s
            title = f"gpuattr demo · scenario {scenario.name} · API {api} · logs in {root}"
            try:
                count = await _stream(role["reader"], deadline, json_out, title)
            except asyncio.CancelledError:
                count = -1
            print(
                orjson.dumps({"demo": scenario.name, "events": count}).decode()
                if json_out
                else f"{count} records (attribution events, alerts, node statuses, demand)",
                file=sys.stderr,
            )
    return 0
