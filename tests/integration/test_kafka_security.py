"""Least privilege on a real broker: the embedded Kafka with TLS, SASL/SCRAM-SHA-512
and the KRaft ``StandardAuthorizer`` (no ACL: denied), one user per role with the ACLs of
``infra/acls.py`` (created by ``gpuattr acls``).

- The pipeline runs with one principal per role: agents, worker, sink (delivering to a webhook)
  and a reader each connect as their own user, and nothing they do is refused.
- Each forbidden action is attempted and denied by the broker; each allowed one works.
- The broker holds exactly the rules ``infra/acls.py`` describes (``deploy/`` carries the same:
  tests/unit/test_kafka_acls.py).
- ``gpuattr demo --secure`` runs the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaError,
    TopicAuthorizationFailedError,
)
from pydantic import SecretStr

from contract.inputs import ClockTick
from contract.outputs import Alert, AttributionEvent
from gpuattr.localkafka import LocalKafka
from gpuattr.procs import kafka_env, settings_env
from infra.acls import DEFAULT_PRINCIPALS, ROLES, Role, describe_acls, role_acls
from infra.admin import TopicSpec, create_topics
from infra.httpserve import start_site
from infra.kafka import client_options
from infra.settings import KafkaSettings, SinkSettings
from infra.topics import topic_specs
from sim.scenario import gpu_uuid, load
from sinks.http import WebhookDestination
from sinks.payloads import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from sinks.runner import run_sink
from tests.helpers import wait_for, wait_for_async
from tests.integration.pipeline import collect, pipeline

pytestmark = pytest.mark.integration

PARTITIONS = 2
SIGNING_KEY = "secure-pipeline-signing-key-7f3a"
ATTEMPT_S = 30.0  # bound on every attempt: a denial is an error, never a timeout


@pytest.fixture
def secure_kafka(secure_broker: LocalKafka) -> LocalKafka:
    """The session's secured broker (:func:`tests.kafka_fixture.secure_broker`): one SCRAM user
    per role (the default principals) and an admin; each test's topics under its own prefix."""
    return secure_broker


@dataclass
class Secured:
    """Fresh topics on the secured broker, with every role's ACLs made by ``gpuattr acls``."""

    broker: LocalKafka
    prefix: str

    @property
    def app_id(self) -> str:
        return f"{self.prefix}worker"

    @property
    def sink_group(self) -> str:
        return f"{self.prefix}sink"

    @property
    def admin(self) -> KafkaSettings:
        return self.broker.client_settings(topic_prefix=self.prefix, partitions=PARTITIONS)

    def role(self, role: Role) -> KafkaSettings:
        return self.broker.client_settings(
            DEFAULT_PRINCIPALS[role], topic_prefix=self.prefix, partitions=PARTITIONS
        )

    def options(self, role: Role) -> dict[str, Any]:
        return client_options(self.role(role))


async def gpuattr_acls(secured: Secured) -> str:
    """``gpuattr acls`` as an operator runs it: the admin's settings in the environment."""
    env = {
        **os.environ,
        **kafka_env(secured.admin),
        **settings_env(WORKER_APP_ID=secured.app_id, SINK_GROUP_ID=secured.sink_group),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpuattr.cli",
        "acls",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    return out.decode()


@pytest.fixture
async def secured(secure_kafka: LocalKafka) -> Secured:
    s = Secured(secure_kafka, f"s{uuid.uuid4().hex[:8]}.")
    await create_topics(
        secure_kafka.bootstrap, topic_specs(s.admin, s.app_id), **client_options(s.admin)
    )
    printed = await gpuattr_acls(s)
    assert f"User:gpuattr-agent Write topic {s.prefix}node-events" in printed
    return s


# --- the broker holds the rules infra/acls.py describes ---------------------------------------


async def test_the_broker_holds_exactly_every_roles_rules(secured: Secured) -> None:
    expected = {
        acl
        for acls in role_acls(secured.admin, secured.app_id, secured.sink_group).values()
        for acl in acls
    }
    held = await describe_acls(secured.broker.bootstrap, **client_options(secured.admin))
    ours = {a for a in held if a.name.startswith(secured.prefix)}
    assert ours == expected
    assert {a.user for a in ours} == set(DEFAULT_PRINCIPALS.values())


# --- each forbidden action denied, each allowed one works -------------------------------------


async def write(secured: Secured, role: Role, topic: str) -> object:
    producer = AIOKafkaProducer(
        bootstrap_servers=secured.broker.bootstrap, acks="all", **secured.options(role)
    )
    try:  # a refused start is stopped too (no task left behind)
        await producer.start()
        return await producer.send_and_wait(topic, b'{"probe":1}', key=b"gpu-a")
    finally:
        await producer.stop()


async def read(secured: Secured, role: Role, topic: str, group: str | None = None) -> int:
    """Records read from ``topic`` (in ``group``, committing, or without a group)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=secured.broker.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **secured.options(role),
    )
    try:
        await consumer.start()
        while True:  # bounded by the caller's ATTEMPT_S
            batch = await consumer.getmany(timeout_ms=500)
            if batch:
                if group is not None:
                    await consumer.commit()
                return sum(len(records) for records in batch.values())
    finally:
        await consumer.stop()


async def create(secured: Secured, role: Role, name: str) -> list[str]:
    spec = TopicSpec(name, 1)
    return await create_topics(secured.broker.bootstrap, [spec], **secured.options(role))


Attempt = Callable[[Secured], Awaitable[object]]


def topic(secured: Secured, role: str) -> str:
    return f"{secured.prefix}{role}"


ALLOWED: dict[str, tuple[Role, Attempt]] = {
    "agent-writes-node-events": ("agent", lambda s: write(s, "agent", topic(s, "node-events"))),
    "cluster-writes-node-events": (
        "cluster",
        lambda s: write(s, "cluster", topic(s, "node-events")),
    ),
    "worker-reads-node-events-in-its-group": (
        "worker",
        lambda s: read(s, "worker", topic(s, "node-events"), s.app_id),
    ),
    **{
        f"worker-writes-{t}": ("worker", lambda s, t=t: write(s, "worker", topic(s, t)))
        for t in ("attribution", "alerts", "flags", "node-status", "deadletter")
    },
    "worker-writes-its-changelog": (
        "worker",
        lambda s: write(s, "worker", f"{s.app_id}-slot-holders-changelog"),
    ),
    "worker-creates-its-own-topics": ("worker", lambda s: create(s, "worker", f"{s.app_id}-x")),
    "sink-reads-alerts-in-its-group": (
        "sink",
        lambda s: read(s, "sink", topic(s, "alerts"), s.sink_group),
    ),
    "sink-writes-deadletter": ("sink", lambda s: write(s, "sink", topic(s, "deadletter"))),
    **{
        f"reader-reads-{t}": ("reader", lambda s, t=t: read(s, "reader", topic(s, t)))
        for t in ("attribution", "alerts", "flags", "node-status")
    },
}

DENIED: dict[str, tuple[Role, Attempt, type[KafkaError]]] = {
    # the four the issue names
    "agent-reads-attribution": (
        "agent",
        lambda s: read(s, "agent", topic(s, "attribution")),
        TopicAuthorizationFailedError,
    ),
    "agent-writes-alerts": (
        "agent",
        lambda s: write(s, "agent", topic(s, "alerts")),
        TopicAuthorizationFailedError,
    ),
    "sink-writes-node-events": (
        "sink",
        lambda s: write(s, "sink", topic(s, "node-events")),
        TopicAuthorizationFailedError,
    ),
    "worker-joins-the-sinks-group": (
        "worker",
        lambda s: read(s, "worker", topic(s, "node-events"), s.sink_group),
        GroupAuthorizationFailedError,
    ),
    # and more of what a stolen credential would try
    "agent-reads-other-nodes-records": (
        "agent",
        lambda s: read(s, "agent", topic(s, "node-events")),
        TopicAuthorizationFailedError,
    ),
    "agent-creates-a-topic": (
        "agent",
        lambda s: create(s, "agent", f"{s.prefix}agent-made"),
        TopicAuthorizationFailedError,
    ),
    "agent-writes-a-changelog": (
        "agent",
        lambda s: write(s, "agent", f"{s.app_id}-slot-holders-changelog"),
        TopicAuthorizationFailedError,
    ),
    "cluster-reads-node-events": (
        "cluster",
        lambda s: read(s, "cluster", topic(s, "node-events")),
        TopicAuthorizationFailedError,
    ),
    "cluster-writes-alerts": (
        "cluster",
        lambda s: write(s, "cluster", topic(s, "alerts")),
        TopicAuthorizationFailedError,
    ),
    "sink-writes-alerts": (
        "sink",
        lambda s: write(s, "sink", topic(s, "alerts")),
        TopicAuthorizationFailedError,
    ),
    "sink-reads-node-events": (
        "sink",
        lambda s: read(s, "sink", topic(s, "node-events")),
        TopicAuthorizationFailedError,
    ),
    "worker-creates-a-topic-outside-its-prefix": (
        "worker",
        lambda s: create(s, "worker", f"{s.prefix}not-the-workers"),
        TopicAuthorizationFailedError,
    ),
    "worker-reads-alerts": (
        "worker",
        lambda s: read(s, "worker", topic(s, "alerts")),
        TopicAuthorizationFailedError,
    ),
    "reader-writes-attribution": (
        "reader",
        lambda s: write(s, "reader", topic(s, "attribution")),
        TopicAuthorizationFailedError,
    ),
    "reader-writes-node-status": (
        "reader",
        lambda s: write(s, "reader", topic(s, "node-status")),
        TopicAuthorizationFailedError,
    ),
    "agent-writes-node-status": (
        "agent",
        lambda s: write(s, "agent", topic(s, "node-status")),
        TopicAuthorizationFailedError,
    ),
    "reader-reads-node-events": (
        "reader",
        lambda s: read(s, "reader", topic(s, "node-events")),
        TopicAuthorizationFailedError,
    ),
    "reader-joins-the-workers-group": (
        "reader",
        lambda s: read(s, "reader", topic(s, "attribution"), s.app_id),
        GroupAuthorizationFailedError,
    ),
}


async def seed(secured: Secured) -> None:
    """One record on every topic (as the admin), so that an allowed read has something."""
    producer = AIOKafkaProducer(
        bootstrap_servers=secured.broker.bootstrap, acks="all", **client_options(secured.admin)
    )
    await producer.start()
    try:
        for t in ("node-events", "attribution", "alerts", "flags", "node-status", "deadletter"):
            await producer.send_and_wait(topic(secured, t), b"{}", key=b"gpu-a")
    finally:
        await producer.stop()


async def test_each_allowed_action_works_and_each_forbidden_one_is_denied(
    secured: Secured,
) -> None:
    await seed(secured)
    for name, (role, attempt) in ALLOWED.items():
        result = await asyncio.wait_for(attempt(secured), ATTEMPT_S)
        assert result, (name, role, result)  # a record read, a write acknowledged, a topic made
    for name, (_, attempt, denial) in DENIED.items():
        try:
            result = await asyncio.wait_for(attempt(secured), ATTEMPT_S)
        except denial:  # the broker's refusal; anything else (a timeout) fails the test
            continue
        pytest.fail(f"{name}: allowed ({result!r})")
    names = await _topics(secured)
    assert f"{secured.prefix}agent-made" not in names
    assert f"{secured.prefix}not-the-workers" not in names
    assert f"{secured.app_id}-x" in names


async def test_a_wrong_password_or_an_unknown_user_cannot_connect(secured: Secured) -> None:
    for user, password in (("gpuattr-agent", "not-the-password"), ("mallory", "whatever1")):
        wrong = secured.role("agent").model_copy(
            update={"sasl_username": user, "sasl_password": SecretStr(password)}
        )
        producer = AIOKafkaProducer(
            bootstrap_servers=secured.broker.bootstrap, **client_options(wrong)
        )
        with pytest.raises(KafkaError):
            await asyncio.wait_for(producer.start(), ATTEMPT_S)
        await producer.stop()


async def _topics(secured: Secured) -> set[str]:
    admin = AIOKafkaAdminClient(
        bootstrap_servers=secured.broker.bootstrap, **client_options(secured.admin)
    )
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


# --- the pipeline with one principal per role -------------------------------------------------


@dataclass
class Hook:
    keys: list[str]
    bad: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        key = request.headers[IDEMPOTENCY_HEADER]
        stamp = int(request.headers[TIMESTAMP_HEADER])
        if not verify(SIGNING_KEY.encode(), stamp, key, body, request.headers[SIGNATURE_HEADER]):
            self.bad += 1
            return web.Response(status=401)
        self.keys.append(key)
        return web.Response(text="ok")


@contextlib.asynccontextmanager
async def webhook(hook: Hook) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/hook", hook.handle)
    runner, _, port = await start_site(app, "127.0.0.1", 0, shutdown_timeout=0.1)
    try:
        yield f"http://127.0.0.1:{port}/hook"
    finally:
        await runner.cleanup()


async def test_the_pipeline_runs_with_one_principal_per_role(
    secured: Secured, tmp_path: Path
) -> None:
    """Agents, the cluster role and the worker (processes), the sink and the reader, each its own
    user: an idle
    GPU's attribution reaches the reader and its alert the webhook, signed; nobody was refused."""
    notebook = gpu_uuid("gpu-a", 2)  # idle from the start in the "exclusive" scenario
    roles = {r: kafka_env(secured.role(r)) for r in ("agent", "cluster", "worker")}
    alerts_env = {
        "GPUATTR_ALERTS_IDLE_WINDOW_S": "3",
        "GPUATTR_ALERTS_COOLDOWN_S": "3600",
    }
    hook = Hook([])
    stop = asyncio.Event()
    sink_settings = SinkSettings(group_id=secured.sink_group, rate_per_s=50, burst=10)
    async with (
        pipeline(
            secured.broker.bootstrap,
            load("exclusive"),
            tmp_path,
            partitions=PARTITIONS,
            admin=secured.admin,
            topic_prefix=secured.prefix,
            role_env=roles,
            worker_env=alerts_env,
            tick_s=0.5,
        ) as p,
        collect(secured.admin, "node-events") as inputs,
        collect(secured.role("reader"), "attribution") as events,
        collect(secured.role("reader"), "alerts") as alerts,
        webhook(hook) as url,
    ):
        async with aiohttp.ClientSession() as session:
            dest = WebhookDestination("webhook", SecretStr(url), session, SecretStr(SIGNING_KEY))
            sink = asyncio.create_task(run_sink(secured.role("sink"), sink_settings, [dest], stop))
            try:
                p.clock.offset_s = 10

                def idle_alert() -> list[Alert]:
                    return [
                        a
                        for a in alerts.records
                        if isinstance(a, Alert) and a.device_uuid == notebook
                    ]

                await wait_for(idle_alert, 120, what=lambda: f"the idle alert\n{p.logs()}")
                await wait_for(
                    lambda: f"{idle_alert()[0].id}:firing" in hook.keys or sink.done(),
                    60,
                    what="the sink's delivery",
                )
                assert not sink.done(), sink

                async def committed() -> bool:
                    admin = AIOKafkaAdminClient(
                        bootstrap_servers=secured.broker.bootstrap,
                        **client_options(secured.admin),
                    )
                    await admin.start()
                    try:
                        offsets = await admin.list_consumer_group_offsets(secured.sink_group)
                    finally:
                        await admin.close()
                    return sum(meta.offset for meta in offsets.values()) > 0

                await wait_for_async(committed, 30, what="the sink's commit")
                # the cluster role, as its own user, ticks every partition of the input topic
                await wait_for(
                    lambda: (
                        {r.partition for r in inputs.records if isinstance(r, ClockTick)}
                        == set(range(PARTITIONS))
                    ),
                    60,
                    what=lambda: f"the cluster role's ticks in every partition\n{p.logs()}",
                )
            finally:
                stop.set()
                await sink
        attributed = [e for e in events.records if isinstance(e, AttributionEvent)]
        assert {e.node for e in attributed if e.state != "unknown"} == {"gpu-a", "gpu-b"}
        assert hook.bad == 0
        assert p.cluster is not None
        logs = {c.name: c.log_path.read_text() for c in (*p.workers, *p.agents, p.cluster)}
    for name, text in logs.items():
        role = next(r for r in ROLES if name.startswith(r))  # agent-…, worker-…, cluster
        who = set(re.findall(r"Authenticated as (\S+) via", text))
        assert who == {DEFAULT_PRINCIPALS[role]}, (name, who)  # its own user, no other
        assert "AuthorizationFailed" not in text, name
        assert "ERROR" not in text, name


async def test_the_demo_runs_secured_with_one_user_per_role(tmp_path: Path) -> None:
    """``gpuattr demo --secure``: its own broker with TLS, SCRAM and ACLs; every role's log shows
    its own user and no refusal; attribution events and an alert reach the demo's reader."""
    env = {k: v for k, v in os.environ.items() if k != "GPUATTR_KAFKA_BOOTSTRAP"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpuattr.cli",
        "demo",
        "--secure",
        "--duration",
        "40",
        "--json",
        "--workdir",
        str(tmp_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=240)
    assert proc.returncode == 0, err.decode()[-3000:]
    records = [orjson.loads(line) for line in out.splitlines() if line.startswith(b"{")]
    assert any(r["schema"] == "attribution" for r in records)
    assert any(r["schema"] == "alert" for r in records)  # the idle notebook, after 20 s
    # agent 1, cluster 2 (node-events, demand-events), worker 13 (its inputs and group, the
    # outputs, demand-events, its own topics), sink 3, reader 6 (the outputs, demand-events),
    # and each role's Write on the doctor's probe topic: 5
    assert b"one Kafka user per role, 30 ACLs" in err
    expected = {
        "worker": "gpuattr-worker",
        "sink": "gpuattr-sink",
        "agent-": "gpuattr-agent",
        "cluster": "gpuattr-cluster",
    }
    logs = sorted(tmp_path.glob("*.log"))  # noqa: ASYNC240 (the demo has ended)
    for prefix, user in expected.items():
        mine = [log for log in logs if log.name.startswith(prefix)]
        assert mine, prefix
        for log in mine:
            text = log.read_text()
            assert f"Authenticated as {user} via SCRAM-SHA-512" in text, log.name
            others = set(DEFAULT_PRINCIPALS.values()) - {user}
            assert not any(f"Authenticated as {o} " in text for o in others), log.name
            assert "AuthorizationFailed" not in text, log.name
            # the cluster role signs, the worker checks: no tick refused, no key missing
            assert "GPUATTR_CLUSTER_SIGNING_KEY unset" not in text, log.name
            assert "signature" not in text, log.name
            assert "ahead of partition" not in text, log.name
