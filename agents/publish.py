"""Publish agent records to Kafka: one input topic, key = node, ordered and idempotent.

The cluster role publishes demand too, on the demand-events topic: a pending pod and a queued
Kueue Workload keyed by the resource it asks for (:func:`contract.inputs.pool_resource`), the
pending-pod and queued-workload lists and the clock ticks into every partition with no key.

The producer is idempotent with ``acks=all`` so a retried send never duplicates or reorders a
node's records. When the broker is unreachable ``publish`` retries with backoff and does not
return until the record is acknowledged: collectors block instead of dropping data.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from agents.selfmetrics import RECORDS_PUBLISHED, SOURCE_ERRORS
from agents.types import AgentRecord
from contract import codec, signature
from contract.inputs import (
    ClockTick,
    ClusterPolicyRecord,
    DeviceTaintRuleRecord,
    GpuClusterRecord,
    NvidiaDriverRecord,
    PendingPod,
    PendingPodList,
    QueuedWorkload,
    QueuedWorkloadList,
    pool_resource,
)
from contract.topics import TopicRole
from infra.backoff import Backoff
from infra.kafka import client_options
from infra.settings import KafkaSettings

log = logging.getLogger(__name__)

#: Every agent record goes to one topic keyed by node: a node's PodResources changes, pod and
#: node events, inventory and samples stay in publish order in one partition, so the worker
#: joins them in the order they happened and a replay gives the same results.
INPUT_ROLE: TopicRole = "node-events"
#: The demand stage's input: pending pods (the cluster role's) and node supply, keyed by resource
DEMAND_ROLE: TopicRole = "demand-events"


class Publisher:
    """Owns one producer; ``publish`` is the agents' ``Emit``."""

    def __init__(
        self, kafka: KafkaSettings, *, max_backoff_s: float = 10.0, signing_key: bytes | None = None
    ) -> None:
        """``signing_key``: the cluster role's, which signs every record it sends
        (:mod:`contract.signature`); an agent's publisher has none."""
        self._kafka = kafka
        self._max_backoff_s = max_backoff_s
        self._signing_key = signing_key
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        if not self._kafka.bootstrap:
            raise ValueError("the agent needs a Kafka bootstrap address")
        backoff = Backoff(0.2, self._max_backoff_s)
        while True:
            producer = AIOKafkaProducer(
                bootstrap_servers=self._kafka.bootstrap,
                enable_idempotence=True,
                acks="all",
                linger_ms=5,
                **client_options(self._kafka),
            )
            try:
                await producer.start()
            except KafkaError as exc:
                await producer.stop()
                log.warning("Kafka not reachable at %s (%s); retrying", self._kafka.bootstrap, exc)
                await backoff.sleep()
                continue
            self._producer = producer
            return

    def started(self) -> bool:
        return self._producer is not None

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def __aenter__(self) -> Publisher:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    async def partitions(self, role: TopicRole = INPUT_ROLE) -> int:
        """How many partitions a topic (the input topic) has (each gets its own clock tick)."""
        if self._producer is None:
            raise RuntimeError("publisher not started")
        found = await self._producer.partitions_for(self._kafka.topic(role))
        return len(found)

    async def publish(self, record: AgentRecord) -> None:
        """Send one record and wait for the broker's acknowledgement, retrying while it is down."""
        await self._send(record, record.node.encode(), None)

    async def publish_tick(self, tick: ClockTick, role: TopicRole = INPUT_ROLE) -> None:
        """A partition's clock tick: no key, into that very partition (of the input topic, or of
        the demand-events topic)."""
        await self._send(tick, None, tick.partition, role)

    async def publish_pending(self, resource: str, record: PendingPod) -> None:
        """A pending pod's record for one resource it asks for, keyed by that resource."""
        await self._send(record, pool_resource(resource).encode(), None, DEMAND_ROLE)

    async def publish_pending_list(self, record: PendingPodList) -> None:
        """Every pending GPU pod after a list: no key, into every demand-events partition."""
        for partition in range(await self.partitions(DEMAND_ROLE)):
            await self._send(record, None, partition, DEMAND_ROLE)

    async def publish_workload(self, resource: str, record: QueuedWorkload) -> None:
        """A queued Kueue Workload's record for one resource it asks for, keyed by that resource."""
        await self._send(record, pool_resource(resource).encode(), None, DEMAND_ROLE)

    async def publish_workload_list(self, record: QueuedWorkloadList) -> None:
        """Every queued GPU Workload after a list: no key, into every demand-events partition."""
        for partition in range(await self.partitions(DEMAND_ROLE)):
            await self._send(record, None, partition, DEMAND_ROLE)

    async def publish_to_every_partition(
        self,
        record: ClusterPolicyRecord | GpuClusterRecord | NvidiaDriverRecord | DeviceTaintRuleRecord,
    ) -> None:
        """A record every partition's join reads (the GPU Operator's intent, a DeviceTaintRule):
        no key, into each partition the input topic has now, as clock ticks are."""
        for partition in range(await self.partitions()):
            await self._send(record, None, partition)

    async def _send(
        self,
        record: object,
        key: bytes | None,
        partition: int | None,
        role: TopicRole = INPUT_ROLE,
    ) -> None:
        if self._producer is None:
            raise RuntimeError("publisher not started")
        topic = self._kafka.topic(role)
        value = codec.encode(record)
        headers = (
            [(signature.HEADER, signature.sign(self._signing_key, value))]
            if self._signing_key is not None
            else None
        )
        backoff = Backoff(0.1, self._max_backoff_s)
        while True:
            try:
                await self._producer.send_and_wait(
                    topic, value=value, key=key, partition=partition, headers=headers
                )
            except KafkaError as exc:
                SOURCE_ERRORS.labels("kafka", type(exc).__name__).inc()
                delay = backoff.next_delay()
                log.warning("publish to %s failed (%s); retrying in %.1fs", topic, exc, delay)
                await asyncio.sleep(delay)
                continue
            RECORDS_PUBLISHED.labels(codec.kind_of(record).kind).inc()
            return
