"""``gpuattr sink``: read the alerts topic as a consumer group and deliver every alert.

Offsets are committed only after every destination delivered the alert or it was written to the
dead-letter topic: a crash redelivers (same idempotency key), nothing is lost. Partitions are
worked concurrently, each in order; run more sinks to scale (the group splits partitions).

A backlog never gets the sink evicted: it takes at most ``batch_max`` alerts at a time and, while
it delivers them (rate limits, retries while a destination is down can take minutes), it keeps
polling Kafka with its partitions paused, so the group sees a live member.

No fetched record is ever discarded, rebalance or not. After a rebalance aiokafka
builds fresh partition state, unpaused and positioned at the last commit; a keep-alive poll
would fetch from it. So (1) a rebalance listener pauses every partition the group hands over
while a batch is in delivery — it runs before the new partitions have a position, so before any
fetch; (2) should a keep-alive poll return records all the same, each partition is sought back
to the first of them, so they are fetched again and delivered; (3) a commit covers only the
batch that was delivered, and only partitions still assigned. A partition that moved away during
delivery is delivered again by its new owner, with the same idempotency keys (at least once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Sequence
from typing import Any

import aiohttp
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, IllegalStateError
from prometheus_client import Counter

from contract import codec
from contract.delivery import DeliveryFailure
from contract.outputs import Alert
from infra.admin import wait_for_coordinator
from infra.kafka import client_options
from infra.observe import ObservabilityServer
from infra.settings import KafkaSettings, ObserveSettings, SinkSettings
from sinks.delivery import Destination, GaveUp, RateLimiter, RetryPolicy, deliver
from sinks.http import SlackDestination, WebhookDestination

log = logging.getLogger(__name__)

DELIVERED = Counter("gpuattr_sink_delivered_total", "Alerts delivered", ["destination"])
DEAD = Counter("gpuattr_sink_dead_lettered_total", "Alerts dead-lettered", ["destination"])
READ = Counter("gpuattr_sink_alerts_read_total", "Alert records read from the alerts topic")
REWOUND = Counter(
    "gpuattr_sink_rewound_total",
    "Records a keep-alive poll returned during a delivery, sought back to be fetched again",
)


def destinations(settings: SinkSettings, session: aiohttp.ClientSession) -> list[Destination]:
    out: list[Destination] = []
    if settings.slack_webhook_url:
        out.append(SlackDestination("slack", settings.slack_webhook_url, session))
    if settings.webhook_url:
        out.append(
            WebhookDestination("webhook", settings.webhook_url, session, settings.webhook_secret)
        )
    return out


class Sink:
    def __init__(
        self,
        kafka: KafkaSettings,
        settings: SinkSettings,
        dests: Sequence[Destination],
        producer: AIOKafkaProducer,
    ) -> None:
        self.kafka = kafka
        self.dests = list(dests)
        self.producer = producer
        self.policy = RetryPolicy(
            settings.max_attempts, settings.base_delay_s, settings.max_delay_s
        )
        self.limiters = {d.name: RateLimiter(settings.rate_per_s, settings.burst) for d in dests}
        self.rng = random.Random()

    async def _dead_letter(
        self, msg: ConsumerRecord, alert_id: str, dest: str, attempts: int, error: str
    ) -> None:
        DEAD.labels(dest).inc()
        failure = DeliveryFailure(
            alert_id,
            dest,
            attempts,
            error,
            (msg.value or b"").decode(errors="replace"),
            msg.partition,
            msg.offset,
            int(time.time() * 1000),
        )
        await self.producer.send_and_wait(
            self.kafka.topic("deadletter"), codec.encode(failure), key=alert_id.encode()
        )

    async def handle(self, msg: ConsumerRecord) -> None:
        READ.inc()
        payload = msg.value or b""
        try:
            alert = codec.decode(payload)
            if not isinstance(alert, Alert):
                raise codec.DecodeError(f"not an alert: {type(alert).__name__}")
        except codec.DecodeError as exc:
            log.error(
                "alerts[%d]@%d is not an alert (%s): dead-lettered", msg.partition, msg.offset, exc
            )
            await self._dead_letter(msg, "", "decode", 0, str(exc))
            return

        async def one(dest: Destination) -> None:
            verdict = await deliver(
                alert, payload, dest, self.limiters[dest.name], self.policy, self.rng
            )
            if isinstance(verdict, GaveUp):
                await self._dead_letter(
                    msg, alert.id, dest.name, verdict.attempts, verdict.last_error
                )
            else:
                DELIVERED.labels(dest.name).inc()

        await asyncio.gather(*(one(d) for d in self.dests))

    async def partition(self, messages: list[ConsumerRecord]) -> None:
        for msg in messages:
            await self.handle(msg)


async def run_sink(
    kafka: KafkaSettings,
    settings: SinkSettings,
    dests: Sequence[Destination] | None = None,
    stop: asyncio.Event | None = None,
    observe: ObserveSettings | None = None,
) -> None:
    """Consume and deliver until ``stop`` is set (or forever)."""
    stop = stop or asyncio.Event()
    opts = client_options(kafka)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap,
        group_id=settings.group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_interval_ms=int(settings.max_poll_interval_s * 1000),
        session_timeout_ms=int(settings.session_timeout_s * 1000),
        heartbeat_interval_ms=int(settings.heartbeat_interval_s * 1000),
        **opts,
    )
    holding = HoldDuringDelivery(consumer)
    consumer.subscribe([kafka.topic("alerts")], listener=holding)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka.bootstrap, acks="all", enable_idempotence=True, **opts
    )
    timeout = aiohttp.ClientTimeout(total=settings.timeout_s)
    async with contextlib.AsyncExitStack() as stack:
        session = await stack.enter_async_context(aiohttp.ClientSession(timeout=timeout))
        await producer.start()
        stack.push_async_callback(producer.stop)
        if kafka.bootstrap and not await wait_for_coordinator(
            kafka.bootstrap, settings.group_id, **opts
        ):
            log.warning("no coordinator yet for %s; starting", settings.group_id)
        await consumer.start()
        stack.push_async_callback(consumer.stop)
        if observe is not None and observe.sink_port:
            server = ObservabilityServer(
                observe.host, observe.sink_port, {"kafka": lambda: bool(consumer.assignment())}
            )
            await server.start()
            stack.push_async_callback(server.stop)
        chosen = list(dests) if dests is not None else destinations(settings, session)
        if not chosen:
            log.warning(
                "no destination configured (GPUATTR_SINK_SLACK_WEBHOOK_URL, "
                "GPUATTR_SINK_WEBHOOK_URL): alerts are read and acknowledged only"
            )
        sink = Sink(kafka, settings, chosen, producer)
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=500, max_records=settings.batch_max)
            if not batch:
                continue
            work = asyncio.gather(*(sink.partition(msgs) for msgs in batch.values()))
            await _poll_while(consumer, holding, work)
            delivered = {
                TopicPartition(tp.topic, tp.partition): msgs[-1].offset + 1
                for tp, msgs in batch.items()
            }
            await _commit(consumer, delivered)


class HoldDuringDelivery(ConsumerRebalanceListener):  # type: ignore[misc]
    """Pauses the partitions a rebalance hands over while a batch is in delivery.

    aiokafka calls ``on_partitions_assigned`` right after it built the new partition state and
    before the task that fetches their committed offsets has run: a partition without a position
    cannot be fetched, so pausing it here comes before any fetch. (Its records would otherwise be
    returned by the next keep-alive poll.)"""

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self.consumer = consumer
        self.delivering = False

    def on_partitions_revoked(self, revoked: Any) -> None:
        """Nothing to do: the batch's commit leaves out partitions no longer assigned."""

    def on_partitions_assigned(self, assigned: Any) -> None:
        if self.delivering and assigned:
            self.consumer.pause(*assigned)


async def _poll_while(
    consumer: AIOKafkaConsumer, holding: HoldDuringDelivery, work: asyncio.Future[Any]
) -> None:
    """Wait for ``work`` while polling with every partition paused: the poll keeps this member
    alive in its group (``max_poll_interval``) and fetches nothing. Should it return records
    anyway, they are not dropped: each partition is sought back to its first returned record."""
    holding.delivering = True
    try:
        consumer.pause(*consumer.assignment())
        while not work.done():
            await asyncio.wait([work], timeout=0.5)
            if not work.done():
                _seek_back(consumer, await consumer.getmany(timeout_ms=0))
        await work  # its exception, if any, is the caller's
    finally:
        holding.delivering = False
        consumer.resume(*consumer.assignment())


def _seek_back(consumer: AIOKafkaConsumer, polled: dict[TopicPartition, list[Any]]) -> None:
    """Put records a keep-alive poll returned back: the partition's next fetch starts at the
    first of them. (No await between the poll and this: each partition is still assigned.)"""
    for tp, msgs in polled.items():
        if msgs:
            REWOUND.inc(len(msgs))
            log.warning(
                "a keep-alive poll returned %d record(s) of %s[%d] from offset %d: sought back",
                len(msgs),
                tp.topic,
                tp.partition,
                msgs[0].offset,
            )
            consumer.seek(tp, msgs[0].offset)
            consumer.pause(tp)  # until the batch is delivered, like every other partition


async def _commit(consumer: AIOKafkaConsumer, offsets: dict[TopicPartition, int]) -> None:
    """Commit what was delivered; partitions a rebalance took away are redelivered by their new
    owner (same idempotency keys), so a refused commit is logged, not fatal."""
    owned = {tp: off for tp, off in offsets.items() if tp in consumer.assignment()}
    if len(owned) < len(offsets):
        moved = len(offsets) - len(owned)
        log.info("%d partition(s) moved during delivery: their new owner redelivers", moved)
    if not owned:
        return
    try:
        await consumer.commit(owned)
    except (CommitFailedError, IllegalStateError) as exc:
        log.warning("commit after delivery refused (%s): those alerts are delivered again", exc)
