"""Fault runs and their no-fault reference, compared record by record.

A fault run is the real pipeline (simulated cluster, agents, workers, real Kafka) with faults
injected while it runs. Its reference is the same input without faults: every record the agents
published to ``node-events`` is copied, partition by partition and in order, to a fresh set of
topics and processed by one undisturbed worker. Then:

- every attribution event of the reference must be in the fault run (at least once; a duplicate
  is byte-identical, so it is identifiable);
- every alert of the reference (idempotency key + status) must be in the fault run;
- the final tables (the changelogs, latest value per key) must be equal;
- the fault run's dead-letter topic must be empty (nothing a retry could have delivered).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from bench.kafka_io import count
from bench.kafka_io import read_records as read_topic
from contract import codec
from contract.outputs import Alert, AttributionEvent
from contract.topics import TABLES, TopicRole
from gpuattr.procs import Child, settings_env
from infra.admin import create_topics
from infra.settings import KafkaSettings
from infra.topics import topic_specs
from tests.helpers import wait_for_async
from tests.integration.pipeline import Pipeline

#: what every fault run reports, printed at the end of the session (see conftest.py)
RESULTS: list[str] = []


async def lag(bootstrap: str, group: str, topic: str) -> int:
    """Input records the group has not committed yet."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await admin.start()
    await consumer.start()
    try:
        parts = await consumer._client._wait_on_metadata(topic)
        tps = [TopicPartition(topic, p) for p in parts]
        ends = await consumer.end_offsets(tps)
        committed = await admin.list_consumer_group_offsets(group)
        return sum(ends[tp] - (committed[tp].offset if tp in committed else 0) for tp in tps)
    finally:
        await consumer.stop()
        await admin.close()


async def wait_drained(kafka: KafkaSettings, group: str, timeout_s: float = 180) -> None:
    async def drained() -> bool:
        return await lag(kafka.bootstrap or "", group, kafka.topic("node-events")) == 0

    await wait_for_async(drained, timeout_s=timeout_s, every_s=0.5, what=f"{group} drained")


async def tables(kafka: KafkaSettings, app_id: str) -> dict[str, dict[bytes | None, bytes]]:
    """Each table's changelog read as a compacted topic would be: the last value per key."""
    state: dict[str, dict[bytes | None, bytes]] = {}
    for name in TABLES.values():
        records = await read_topic(kafka.bootstrap or "", f"{app_id}-{name}-changelog")
        state[name] = {key: value for _, key, value in records}
    return state


@dataclass
class Outcome:
    kafka: KafkaSettings
    attribution: list[bytes]
    alerts: list[tuple[str, str]]
    tables: dict[str, dict[bytes | None, bytes]]
    deadletter: int
    inputs: int = 0
    notes: list[str] = field(default_factory=list)


async def outcome(kafka: KafkaSettings, app_id: str) -> Outcome:
    bootstrap = kafka.bootstrap or ""
    attribution = [v for _, _, v in await read_topic(bootstrap, kafka.topic("attribution"))]
    alerts = []
    for _, _, v in await read_topic(bootstrap, kafka.topic("alerts")):
        alert = codec.decode(v)
        assert isinstance(alert, Alert)
        alerts.append((alert.id, alert.status))
    dead = await read_topic(bootstrap, kafka.topic("deadletter"))
    inputs = len(await read_topic(bootstrap, kafka.topic("node-events")))
    return Outcome(kafka, attribution, alerts, await tables(kafka, app_id), len(dead), inputs)


async def reference(fault_run: KafkaSettings, workdir: Path, worker_env: dict[str, str]) -> Outcome:
    """The fault run's input, copied in order to fresh topics, through one calm worker."""
    bootstrap = fault_run.bootstrap or ""
    kafka = fault_run.model_copy(update={"topic_prefix": f"ref{uuid.uuid4().hex[:8]}."})
    app_id = kafka.topic_prefix + "worker"
    await create_topics(bootstrap, topic_specs(kafka, app_id))
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        for partition, key, value in await read_topic(bootstrap, fault_run.topic("node-events")):
            await producer.send(kafka.topic("node-events"), value, key=key, partition=partition)
        await producer.flush()
    finally:
        await producer.stop()
    env = settings_env(
        KAFKA_BOOTSTRAP=bootstrap,
        KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
        KAFKA_PARTITIONS=kafka.partitions,
        WORKER_APP_ID=app_id,
        WORKER_DATA_DIR=workdir / "reference-worker",
        WORKER_WEB_ENABLED="false",
    )
    worker = Child("reference", ["worker"], {**env, **worker_env}, workdir / "reference.log")
    await worker.start()
    try:
        await wait_drained(kafka, app_id)
    finally:
        await worker.stop()
    return await outcome(kafka, app_id)


def compare(name: str, ref: Outcome, run: Outcome) -> dict[str, int]:
    """Counts of the comparison; asserts the guarantees and records a line for the summary."""
    got, want = Counter(run.attribution), Counter(ref.attribution)
    missing = sum((want - got).values())  # reference events absent from the fault run
    missing_distinct = len(set(want) - set(got))
    alerts_got, alerts_want = Counter(run.alerts), Counter(ref.alerts)
    identities = Counter(_identity(raw) for raw in run.attribution)
    figures = {
        "inputs": run.inputs,
        "events_reference": len(ref.attribution),
        "events_fault_run": len(run.attribution),
        "events_missing": missing_distinct,
        "event_duplicates": sum(n - 1 for n in identities.values()),
        "redelivered_changed": len(set(run.attribution)) - len(identities),
        "alerts_reference": len(set(ref.alerts)),
        "alerts_fault_run_keys": len(set(run.alerts)),
        "alerts_missing": len(set(alerts_want) - set(alerts_got)),
        "alert_duplicates": len(run.alerts) - len(set(run.alerts)),
        "deadlettered": run.deadletter,
        "tables_equal": int(run.tables == ref.tables),
    }
    RESULTS.append(f"{name:<22} " + " ".join(f"{k}={v}" for k, v in figures.items()))
    assert ref.inputs == run.inputs, "the reference saw other input"
    assert missing_distinct == 0, f"{name}: {missing_distinct} reference events missing"
    assert missing >= 0
    assert figures["alerts_missing"] == 0, (
        f"{name}: alerts missing {set(alerts_want) - set(alerts_got)}"
    )
    assert run.deadletter == 0, f"{name}: {run.deadletter} records dead-lettered"
    assert run.tables == ref.tables, f"{name}: final tables differ ({_table_diff(ref, run)})"
    return figures


def _identity(raw: bytes) -> tuple[str, str, int, str]:
    ev = codec.decode(raw)
    assert isinstance(ev, AttributionEvent)
    return ev.identity()


def _table_diff(ref: Outcome, run: Outcome) -> str:
    parts = []
    for name in ref.tables:
        a, b = ref.tables[name], run.tables.get(name, {})
        differing = [k for k in set(a) | set(b) if a.get(k) != b.get(k)]
        if differing:
            parts.append(f"{name}: {len(differing)} keys, e.g. {sorted(map(str, differing))[:3]}")
            first = sorted(differing, key=str)[0]
            parts.append(f"reference {a.get(first)!r}\nfault run {b.get(first)!r}")
    return "; ".join(parts) or "none"


def final_view(events: list[bytes]) -> dict[str, tuple[object, ...]]:
    """The last attribution of each device, reduced to what must not depend on timing:
    state, sharing, tenants and holders (pod, UID, workload)."""
    last: dict[str, AttributionEvent] = {}
    for raw in events:
        ev = codec.decode(raw)
        if isinstance(ev, AttributionEvent):
            key = f"{ev.node}/{ev.device_uuid}"
            if key not in last or ev.ts_ms >= last[key].ts_ms:
                last[key] = ev
    return {
        k: (
            e.state,
            e.sharing,
            e.tenant_count,
            tuple(sorted((h.pod, h.uid, h.workload) for h in e.holders)),
        )
        for k, e in last.items()
    }


def now_ms() -> int:
    return int(time.time() * 1000)


ROLES: tuple[TopicRole, ...] = ("attribution", "alerts", "deadletter")


async def group_members(bootstrap: str, group: str) -> tuple[str, int]:
    """The consumer group's state (``Stable``, ``PreparingRebalance``, ...) and member count."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_consumer_groups([group])
        _error, _group, state, _ptype, _protocol, members, *_ = response.groups[0]
        return str(state), len(members)
    finally:
        await admin.close()


CRASH_MARKS = ("Crashed", "We experienced a crash", "Traceback (most recent call last)")


def crashes(workdir: Path) -> dict[str, list[str]]:
    """Per worker log in ``workdir``: the lines that show a crashed service or an unhandled
    exception (only logs that have any)."""
    found = {}
    for log in sorted(workdir.glob("worker-*.log")):
        lines = log.read_text(errors="replace").splitlines()
        if bad := [line for line in lines if any(m in line for m in CRASH_MARKS)]:
            found[log.name] = bad
    return found


async def more_records(
    bootstrap: str, topic: str, n: int, timeout_s: float, what: str = "records"
) -> None:
    """Wait until ``topic`` holds ``n`` more records than now."""
    start = await count(bootstrap, topic)

    async def grown() -> bool:
        return await count(bootstrap, topic) >= start + n

    await wait_for_async(grown, timeout_s=timeout_s, every_s=0.2, what=f"{n} more {what}")


async def end_input_and_drain(p: Pipeline) -> Outcome:
    """Stop the agents (the input ends), start any worker that is down, let the group drain
    its lag, and read what the run wrote."""
    for agent in p.agents:
        await agent.stop()
    for worker in p.workers:
        if not worker.running:
            await worker.start()
    await wait_drained(p.kafka, p.kafka.topic_prefix + "worker")
    return await outcome(p.kafka, p.kafka.topic_prefix + "worker")
