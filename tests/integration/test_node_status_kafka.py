"""node-status on the real local Kafka: a worker process reads the GPU stack's inputs from
node-events (as agents and the cluster role publish them: keyed by node; the ClusterPolicy into
every partition, without a key) and writes each node's status to the compacted
``gpuattr.node-status`` topic, keyed by node, a tombstone when the node leaves.

- gpu-a's dcgm-exporter is off by its deploy label: every held GPU is in the heartbeats with its
  holders, usage unknown "disabled by intent", its stack ``ready`` and no alert;
- gpu-b's exporter crash loops: its stack is ``broken`` at the exporter, and its GPUs' usage
  unknown says so; its ``stack-broken`` alert fires on the alerts topic once the crash loop has
  lasted the default grace window (60 s of event time), started when the break began, naming the
  holders (with their UIDs) of the GPUs left without telemetry, and resolves, under the same id,
  when the exporter's pod is ready again. gpu-a, disabled on purpose, never has one.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from contract import codec
from contract.inputs import AgentStatus, ClusterPolicyRecord, NodeRecord
from contract.outputs import Alert, AttributionEvent, NodeStatus
from contract.records import replace
from gpuattr.procs import Child, settings_env
from infra.admin import create_topics
from infra.settings import KafkaSettings
from infra.topics import topic_specs
from tests.helpers import wait_for
from tests.integration.pipeline import collect
from tests.unit.test_node_stack import OFF, node_record, operands
from tests.unit.test_operatorstack import EXPORTER, HEALTHY, READY_POLICY, crashloop, with_pods
from tests.unit.test_spine import G0, G1, NODE, OTHER, S_, T0, TENANTS, TRAINER, dcgm, setup, uid

pytestmark = pytest.mark.integration
PARTITIONS = 3


@dataclass
class Keyed:
    """Every record of a topic as (key, record or None for a tombstone), in arrival order;
    ``unreadable`` as :class:`tests.integration.pipeline.Collected`'s (fails the test)."""

    records: list[tuple[str, object | None]] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    def latest(self, key: str) -> object | None:
        return next((r for k, r in reversed(self.records) if k == key), None)


@contextlib.asynccontextmanager
async def keyed(kafka: KafkaSettings) -> AsyncIterator[Keyed]:
    consumer = AIOKafkaConsumer(
        kafka.topic("node-status"),
        bootstrap_servers=kafka.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    out = Keyed()

    async def pump() -> None:
        async for msg in consumer:
            try:
                value = codec.decode(msg.value) if msg.value is not None else None
            except codec.DecodeError as exc:
                head = msg.value[:300] if msg.value is not None else b""
                out.unreadable.append(f"{msg.topic}[{msg.partition}]@{msg.offset}: {exc}: {head!r}")
                continue
            out.records.append(((msg.key or b"").decode(), value))

    task = asyncio.create_task(pump())
    try:
        yield out
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await consumer.stop()
    assert not out.unreadable, f"node-status records our codec cannot read: {out.unreadable[:5]}"


def stack_alerts(records: list[object], node: str) -> list[Alert]:
    """The node's stack-broken alerts, once per idempotency key (delivery is at least once)."""
    unique = {
        (a.id, a.status): a
        for a in records
        if isinstance(a, Alert) and a.kind == "stack-broken" and a.node == node
    }
    return list(unique.values())


def statuses(k: Keyed, node: str) -> list[NodeStatus]:
    return [r for key, r in k.records if key == node and isinstance(r, NodeStatus)]


async def publish(
    kafka: KafkaSettings, records: list[object], policy: ClusterPolicyRecord | None = None
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all")
    await producer.start()
    try:
        topic = kafka.topic("node-events")
        for p in range(PARTITIONS if policy is not None else 0):
            # as the cluster role: into every partition, no key
            await producer.send_and_wait(topic, codec.encode(policy), partition=p)
        for r in records:  # as an agent: keyed by its node
            node = getattr(r, "node")  # noqa: B009
            await producer.send_and_wait(topic, codec.encode(r), key=node.encode())
    finally:
        await producer.stop()


def node_inputs(node: str, pods: object, state: str, reason: str) -> list[object]:
    return [
        *setup(node=node),
        node_record(T0 + S_, *(((OFF, "false"),) if node == NODE else ()), node=node),
        operands(T0 + S_, pods, node=node),  # type: ignore[arg-type]
        *(
            AgentStatus(node, T0 + t * 15 * S_, (dcgm(state, reason, T0),))
            for t in range(1, 10)  # event time: heartbeats at T0 + 1 min and 2 min
        ),
    ]


async def test_node_status_on_kafka_disabled_by_intent_versus_crash_looping(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka = KafkaSettings(
        bootstrap=kafka_bootstrap,
        topic_prefix=f"t{uuid.uuid4().hex[:10]}.",
        partitions=PARTITIONS,
    )
    app_id = kafka.topic_prefix + "worker"
    await create_topics(kafka_bootstrap, topic_specs(kafka, app_id))
    env = settings_env(
        KAFKA_BOOTSTRAP=kafka.bootstrap,
        KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
        KAFKA_PARTITIONS=PARTITIONS,
        WORKER_APP_ID=app_id,
        WORKER_DATA_DIR=tmp_path / "worker",
        WORKER_WEB_ENABLED="false",
    )
    worker = Child("worker", ["worker"], env, tmp_path / "worker.log")
    off = node_inputs(NODE, with_pods(drop=(EXPORTER,)), "disabled", "no-exporter-pod")
    crashing = node_inputs(OTHER, with_pods(crashloop(EXPORTER, 12)), "failing", "unreachable")
    await worker.start()
    try:
        async with (
            keyed(kafka) as status,
            collect(kafka, "attribution") as attribution,
            collect(kafka, "alerts") as alerts,
        ):
            # stamped, as the cluster role stamps it, with the time of the nodes' records
            await publish(kafka, [*off, *crashing], replace(READY_POLICY, ts_ms=T0))

            def settled() -> bool:
                a, b = statuses(status, NODE), statuses(status, OTHER)
                beats = {
                    (e.node, e.ts_ms)
                    for e in attribution.records
                    if isinstance(e, AttributionEvent) and e.origin == "heartbeat"
                }
                return bool(
                    a
                    and a[-1].telemetry_disabled
                    and b
                    and b[-1].state == "broken"
                    and {(n, T0 + 120 * S_) for n in (NODE, OTHER)} <= beats
                )

            await wait_for(settled, 90.0, what=lambda: worker.tail(40))
            a, b = statuses(status, NODE)[-1], statuses(status, OTHER)[-1]
            print(f"gpu-a: {a.state}: {a.telemetry_reason}; gpu-b: {b.summary}")
            assert (a.state, a.first_broken) == ("ready", None)
            assert (b.first_broken, b.summary) == (
                "dcgm-exporter",
                "dcgm-exporter not ready on gpu-b (CrashLoopBackOff, 12 restarts)",
            )
            heartbeats = [
                e
                for e in attribution.records
                if isinstance(e, AttributionEvent) and e.origin == "heartbeat"
            ]
            for node, reason in (
                (NODE, "disabled by intent"),
                (OTHER, "dcgm-exporter CrashLoopBackOff, 12 restarts"),
            ):
                at_two = {
                    e.device_uuid: e
                    for e in heartbeats
                    if e.node == node and e.ts_ms == T0 + 120 * S_
                }
                assert {u for u, e in at_two.items() if e.holders} == {G0, G1}
                assert len(at_two[G0].holders) == 5  # the MPS tenants, every one
                assert [h.pod for h in at_two[G1].holders] == ["trainer-0"]
                for e in at_two.values():
                    assert e.telemetry.status == "unknown"
                    assert reason in (e.telemetry.reason or ""), e.telemetry
                    assert e.usage.util_pct is None
            cause = {e.telemetry.cause for e in heartbeats if e.node == NODE}
            assert cause == {"no-exporter"}

            # gpu-b: the stack-broken alert names every holder of the GPUs left without telemetry
            await wait_for(
                lambda: stack_alerts(alerts.records, OTHER), 60.0, what=lambda: worker.tail(40)
            )
            [fired] = stack_alerts(alerts.records, OTHER)
            print(f"gpu-b alert: {fired.summary}")
            assert fired.status == "firing"
            # the default grace (60 s): it fires once the break has lasted that long
            assert fired.ts_ms - fired.started_ms >= 60 * S_
            assert T0 <= fired.started_ms <= T0 + S_  # the break began with the crashing pods
            assert fired.stack is not None
            assert (fired.stack.plane, fired.stack.unmeasured) == ("dcgm-exporter", (G0, G1))
            assert "CrashLoopBackOff, 12 restarts" in fired.stack.reason
            assert {(h.namespace, h.pod, h.uid) for h in fired.holders} == {
                (a.namespace, a.pod, uid(a.pod)) for a in (*TENANTS, TRAINER)
            }
            # the exporter's pod is ready again, the agent scrapes it: resolved, same id
            healed_at = T0 + 140 * S_
            await publish(
                kafka,
                [
                    operands(healed_at, HEALTHY, node=OTHER),
                    AgentStatus(OTHER, healed_at, (dcgm("ok", "", T0),)),
                ],
            )
            await wait_for(
                lambda: len(stack_alerts(alerts.records, OTHER)) >= 2,
                60.0,
                what=lambda: worker.tail(40),
            )
            fired_, resolved = stack_alerts(alerts.records, OTHER)
            assert fired_ == fired
            assert (resolved.id, resolved.status, resolved.ts_ms) == (
                fired.id,
                "resolved",
                healed_at,
            )
            assert resolved.holders == fired.holders
            # the status is written with the alert but on its own topic, read by another
            # consumer: it may arrive after the alert
            await wait_for(
                lambda: statuses(status, OTHER)[-1].state == "ready",
                30.0,
                what=lambda: f"gpu-b ready: {statuses(status, OTHER)[-1]}\n{worker.tail(40)}",
            )
            assert stack_alerts(alerts.records, NODE) == []  # disabled on purpose: never

            # gpu-a leaves: its last events, and its node-status key gets a tombstone
            await publish(kafka, [NodeRecord(NODE, T0 + 200 * S_, (), deleted=True)])
            await wait_for(
                lambda: status.records and status.latest(NODE) is None and statuses(status, NODE),
                60.0,
                what=lambda: worker.tail(40),
            )
            assert isinstance(status.latest(OTHER), NodeStatus)
            await wait_for(
                lambda: any(
                    isinstance(e, AttributionEvent) and e.node == NODE and e.origin == "gone"
                    for e in attribution.records
                ),
                30.0,
            )
            assert not [x for x in alerts.records if isinstance(x, Alert) and x.node == NODE]
    finally:
        await worker.stop()
