"""Handing the worker's outputs to Kafka: a record's outputs queued together in the outbox.

A record's outputs (a scrape's attribution events, the spine's heartbeats, alerts, the node's
supply) are encoded, keyed and queued in :class:`streams.worker.outbox.Outbox` in one call
(:meth:`Publisher.publish_all`) without awaiting any send; the outbox hands them to aiokafka as
whole per-partition batches, each to the partition a keyed send would choose, and drains before
every offset commit (at least once). Per-output metrics are counted per batch handed over.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from streams.worker.outbox import Outbox


class Publisher:
    """Queues outputs for their topics (``topic_of``), keyed (``key_of``), encoded (``value_of``,
    ``None``: a tombstone), in ``outbox``."""

    def __init__(
        self,
        outbox: Outbox,
        topic_of: Callable[[object], str],
        key_of: Callable[[Any], bytes],
        value_of: Callable[[Any], bytes | None],
    ) -> None:
        self.outbox = outbox
        self.topic_of = topic_of
        self.key_of = key_of
        self.value_of = value_of

    async def publish(self, out: object) -> None:
        await self.publish_all((out,))

    async def publish_all(self, outputs: Iterable[object]) -> None:
        add = self.outbox.add
        for out in outputs:
            add(self.topic_of(out), self.key_of(out), self.value_of(out), None, type(out).__name__)
        await self.outbox.room()  # backpressure: waits only while the outbox is over its bound


def topics_by_type(names: Mapping[type, str]) -> Callable[[object], str]:
    """The topic of an output, by its type."""
    return lambda out: names[type(out)]
