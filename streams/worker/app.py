"""The Faust app factory: topics, tables and one thin agent over the node-keyed input topics.

A second agent consumes ``demand-events`` (keyed by resource) into the demand stage
(:mod:`streams.core.flow.demandstage`, its own changelog tables,
:data:`contract.topics.DEMAND_TABLES`),
publishing each pool's demand record to the compacted ``demand`` topic (a retired pool's key
gets a tombstone) and its ``demand-while-idle`` alerts to ``alerts``.

The input topic is keyed by node, so a node's snapshots, diffs, watch events, inventory and
samples arrive in the order the agent published them, in one partition; every table's changelog
has the same partition count and Faust keeps partition N of all of them on the same worker.
More workers split the nodes between them.
"""

from __future__ import annotations

import base64
import logging
import time
from typing import Any

import faust

from contract import codec
from contract.bounds import MAX_TEXT_CHARS, cut
from contract.inputs import NodeSupply, pool_resource
from contract.outputs import (
    Alert,
    AttributionEvent,
    DeadLetter,
    ExporterMisattribution,
    NodeStatus,
    NodeStatusRetired,
    PoolDemand,
    PoolDemandRetired,
    TelemetryRefused,
    UsageUncredited,
)
from contract.topics import DEMAND_TABLES, TABLES, TopicRole
from infra.apicreds import auth_headers
from infra.kafka import client_options
from infra.settings import (
    AlertSettings,
    ApiSettings,
    ClusterKeySettings,
    KafkaSettings,
    KubeSettings,
    SpineSettings,
    WorkerSettings,
)
from streams.core.flow.demandstage import DemandOutput, DemandStage, DemandTables
from streams.core.flow.processor import Output, Processor, Tables
from streams.core.lifetimes import Lifetimes
from streams.worker import selfmetrics
from streams.worker.api import QueryApi, assignment
from streams.worker.apiauth import guard_for
from streams.worker.demandloop import DemandLoop
from streams.worker.faust_codecs import RecordTable, register
from streams.worker.lag import consumer_lags
from streams.worker.live import LiveDevices
from streams.worker.livedemand import LiveDemand
from streams.worker.loop import Event, Message, RecordLoop
from streams.worker.memtrim import Trimmer, libc_trim
from streams.worker.monitor import LeanMonitor
from streams.worker.outbox import Outbox
from streams.worker.peers import PeerPolicy
from streams.worker.publisher import Publisher, topics_by_type
from streams.worker.transport import App

log = logging.getLogger(__name__)

INPUT_ROLES: tuple[TopicRole, ...] = ("node-events",)


def broker_credentials(kafka: KafkaSettings) -> Any:
    """Faust credentials for TLS / SASL (from the one builder, :func:`infra.kafka.client_options`),
    or ``None`` for plaintext."""
    opts = client_options(kafka)
    context = opts.get("ssl_context")
    if "sasl_mechanism" in opts:
        return faust.SASLCredentials(
            username=opts["sasl_plain_username"],
            password=opts["sasl_plain_password"] or "",
            ssl_context=context,
            mechanism=opts["sasl_mechanism"],
        )
    return faust.SSLCredentials(context) if context is not None else None


#: everything the worker publishes: stage one's outputs, a node's supply for the demand stage,
#: the demand stage's outputs
Published = Output | NodeSupply | DemandOutput


def output_key(record: Published) -> bytes:
    """Per device (``node/device-uuid``); an alert by its id; a refused scrape and the node's
    status are the node's (``node``); a node's supply its resource's (the demand-events key); a
    pool's demand record and tombstone the pool's."""
    if isinstance(record, Alert):
        return record.id.encode()
    if isinstance(record, NodeSupply):
        return pool_resource(record.resource).encode()
    if isinstance(record, PoolDemand | PoolDemandRetired):
        return record.pool.encode()
    if isinstance(record, TelemetryRefused | NodeStatus | NodeStatusRetired):
        return record.node.encode()
    return f"{record.node}/{record.device_uuid}".encode()


def output_value(record: Published) -> bytes | None:
    """The record in the codec; a retired node's status and a retired pool are tombstones (no
    value)."""
    if isinstance(record, NodeStatusRetired | PoolDemandRetired):
        return None
    return codec.encode(record)


#: room a dead letter keeps for its other fields beside the payload
DEAD_LETTER_FIELDS_BYTES = 8 * MAX_TEXT_CHARS


def dead_letter_of(msg: Message, error: str, max_record_bytes: int, ts_ms: int) -> DeadLetter:
    """The dead letter of an input: where it came from, why (cut), and its payload unless that
    would make the record larger than the worker sends (base64 is 4/3 of it): then the payload
    is left out and the reason says so."""
    value = msg.value or b""
    payload = ""
    if 4 * ((len(value) + 2) // 3) + DEAD_LETTER_FIELDS_BYTES <= max_record_bytes:
        payload = base64.b64encode(value).decode()
    else:
        error = (
            f"{cut(error, MAX_TEXT_CHARS // 2)} (its {len(value)} bytes are not kept: too large)"
        )
    return DeadLetter(
        source_topic=msg.topic,
        partition=msg.partition,
        offset=msg.offset,
        key=cut(msg.key.decode(errors="replace")) if msg.key is not None else None,
        error=cut(error),
        payload_b64=payload,
        ts_ms=ts_ms,
    )


def lifetimes_of(spine: SpineSettings) -> Lifetimes:
    return Lifetimes(
        heartbeat_ms=int(spine.heartbeat_s * 1000),
        stale_after_ms=int(spine.stale_after_s * 1000),
        node_ttl_ms=int(spine.node_ttl_s * 1000),
        max_clock_jump_ms=int(spine.max_clock_jump_s * 1000),
    )


def build_app(
    kafka: KafkaSettings,
    worker: WorkerSettings,
    alerts: AlertSettings,
    spine: SpineSettings | None = None,
    api: ApiSettings | None = None,
    kube: KubeSettings | None = None,
    signing: ClusterKeySettings | None = None,
) -> faust.App:
    """Create the worker's Faust app from explicit settings."""
    if not kafka.bootstrap:
        raise ValueError("the worker needs a Kafka bootstrap address")
    register()
    app = App(
        worker.app_id,
        broker=[f"kafka://{b}" for b in kafka.bootstrap.split(",")],
        broker_credentials=broker_credentials(kafka),
        store="memory://",
        datadir=str(worker.data_dir),
        topic_partitions=kafka.partitions,
        topic_replication_factor=kafka.replication,
        web_enabled=worker.web_enabled,  # query API, /metrics, /healthz, /readyz
        # Faust's own views serve tables and the group's topology unauthenticated: off unless
        # asked for (GPUATTR_WORKER_FAUST_VIEWS); the query API routes without them
        web_router_enabled=worker.faust_views,
        web_tables_enabled=worker.faust_views,
        web_graph_enabled=worker.faust_views,
        web_stats_enabled=worker.faust_views,
        web_metrics_enabled=False,
        # Faust's own statistics feed only its views: without them, a monitor that keeps only
        # what Faust's consumer reads back (streams/worker/monitor.py)
        monitor=None if worker.faust_views else LeanMonitor(),
        web_bind=worker.web_host,
        web_port=worker.web_port,
        canonical_url=f"http://{worker.advertised_host or worker.web_host}:{worker.web_port}",
        broker_session_timeout=worker.session_timeout_s,
        broker_heartbeat_interval=worker.heartbeat_interval_s,
        broker_commit_interval=worker.commit_interval_s,
        producer_acks=-1,
        processing_guarantee="at_least_once",
        producer_linger=worker.producer_linger_s,
        producer_compression_type=None
        if worker.producer_compression == "none"
        else worker.producer_compression,
        producer_max_batch_size=worker.producer_batch_bytes,
        producer_max_request_size=worker.max_record_bytes,
        # what it reads ahead of processing: a bounded backlog in memory (WorkerSettings)
        stream_buffer_maxsize=worker.stream_buffer,
        consumer_max_fetch_size=worker.fetch_bytes_per_partition,
    )
    raw = {
        "key_type": bytes,
        "value_type": bytes,
        "key_serializer": "raw",
        "value_serializer": "raw",
    }
    inputs = app.topic(*(kafka.topic(r) for r in INPUT_ROLES), **raw)
    attribution = app.topic(kafka.topic("attribution"), partitions=kafka.partitions, **raw)
    flags = app.topic(kafka.topic("flags"), partitions=kafka.partitions, **raw)
    alert_topic = app.topic(kafka.topic("alerts"), partitions=kafka.partitions, **raw)
    node_status = app.topic(kafka.topic("node-status"), partitions=kafka.partitions, **raw)
    deadletter = app.topic(kafka.topic("deadletter"), partitions=kafka.partitions, **raw)
    demand_events = app.topic(kafka.topic("demand-events"), partitions=kafka.partitions, **raw)
    demand_topic = app.topic(kafka.topic("demand"), partitions=kafka.partitions, **raw)

    def table(name: str) -> Any:
        return app.tables.add(
            RecordTable(
                app, name=name, key_type=str, partitions=kafka.partitions, beacon=app.tables.beacon
            )
        )

    tables = Tables(**{field: table(name) for field, name in TABLES.items()})
    life = lifetimes_of(spine or SpineSettings())
    processor = Processor(tables, alerts, life)
    live = LiveDevices()
    demand_tables = DemandTables(**{field: table(name) for field, name in DEMAND_TABLES.items()})
    stage = DemandStage(demand_tables, alerts.demand_window_s, worker.demand_supply_every_s, life)
    app.demand_stage = stage
    live_demand = LiveDemand()  # the demand stage's records, for the API and /metrics

    async def dead_letter(event: Event, error: str) -> None:
        msg = event.message
        selfmetrics.DEAD_LETTERED.labels(msg.topic).inc()
        log.error("dead-lettering %s[%d]@%d: %s", msg.topic, msg.partition, msg.offset, cut(error))
        record = dead_letter_of(msg, error, worker.max_record_bytes, int(time.time() * 1000))
        await deadletter.send(key=msg.key, value=codec.encode(record))

    names: dict[type, str] = {
        Alert: alert_topic.get_topic_name(),
        AttributionEvent: attribution.get_topic_name(),
        ExporterMisattribution: flags.get_topic_name(),
        TelemetryRefused: flags.get_topic_name(),
        UsageUncredited: flags.get_topic_name(),
        NodeStatus: node_status.get_topic_name(),
        NodeStatusRetired: node_status.get_topic_name(),
        NodeSupply: demand_events.get_topic_name(),
        PoolDemand: demand_topic.get_topic_name(),
        PoolDemandRetired: demand_topic.get_topic_name(),
    }

    # the outputs and the tables' changelog records, handed to aiokafka's producer (the one Faust
    # flushes) as whole per-partition batches; drained before every commit (transport.Producer)
    app.outbox = Outbox(
        lambda: app.producer._ensure_producer(),
        app._crash,
        max_records=worker.outbox_records,
        max_bytes=worker.outbox_bytes,
        linger_s=worker.outbox_linger_s,
        max_record_bytes=worker.max_record_bytes,
        dead_letter_topic=deadletter.get_topic_name(),
    )
    publisher = Publisher(app.outbox, topics_by_type(names), output_key, output_value)

    cluster_key = (signing or ClusterKeySettings()).key()
    if cluster_key is None:
        log.warning(
            "GPUATTR_CLUSTER_SIGNING_KEY unset: clock ticks, ClusterPolicies, DeviceTaintRules "
            "and pending-pod lists are honoured unsigned (any writer of the input topics can "
            "send them)"
        )
    record_loop = RecordLoop(
        processor, publisher.publish_all, dead_letter, live, app._crash, cluster_key
    )

    async def node_events(stream: Any) -> None:
        await record_loop.run(stream.events())

    app.agent(inputs, name="node-events")(node_events)

    demand_loop = DemandLoop(
        stage, publisher.publish, dead_letter, live_demand, app._crash, cluster_key
    )

    async def demand_events_agent(stream: Any) -> None:
        await demand_loop.run(stream.events())

    app.agent(demand_events, name="demand-events")(demand_events_agent)
    _gauges(app, tables, kafka.topic("node-events"), demand_tables)
    _trims(app, worker.malloc_trim_every_s)
    if worker.web_enabled:
        ready = lambda: bool(assignment(app))  # noqa: E731
        peers = PeerPolicy(worker.peers, worker.peer_service, worker.web_port)
        demand_topic = kafka.topic("demand-events")
        api_settings = api or ApiSettings()
        QueryApi(
            app,
            tables,
            live,
            kafka.topic("node-events"),
            ready,
            peers,
            live_demand,
            demand_topic,
            guard_for(api_settings, kube or KubeSettings()),
            lambda: auth_headers(api_settings),
        ).register()
    return app


def _gauges(app: faust.App, tables: Tables, input_topic: str, demand_tables: DemandTables) -> None:
    """Table sizes and consumer lag for /metrics, refreshed every 5 s."""

    async def refresh() -> None:
        for name in TABLES:
            selfmetrics.TABLE_KEYS.labels(name).set(len(getattr(tables, name)))
        for name in DEMAND_TABLES:
            selfmetrics.TABLE_KEYS.labels(name).set(len(getattr(demand_tables, name)))
        lags = await consumer_lags(app, input_topic)
        selfmetrics.CONSUMER_LAG.clear()  # partitions that moved away leave the series
        for partition, lag in lags.items():
            selfmetrics.CONSUMER_LAG.labels(partition).set(lag)

    app.timer(interval=5.0, name="refresh-gauges")(refresh)


def _trims(app: faust.App, every_s: float) -> None:
    """The allocator's free pages back to the system every ``every_s`` (0: never; off where the
    C library cannot)."""
    if every_s <= 0:
        return
    trimmer = Trimmer(libc_trim())
    if not trimmer.enabled:
        return

    async def trim() -> None:
        trimmer()

    app.timer(interval=every_s, name="malloc-trim")(trim)
