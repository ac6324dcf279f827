"""``python -m bench.sink_churn``: does the sink lose an alert while its group rebalances?

On real Kafka: ``--alerts`` alerts (2,000) wait on the alerts topic (4 partitions); one sink
delivers them to a webhook in batches of ``--batch-max`` (20), while a second member of its
consumer group joins and leaves in turn, one change every ``--period`` seconds (2 s, start to
start), for as long as the sink has anything left to commit. The second member only holds
partitions (it never delivers or commits), so every alert must be delivered by the sink itself.

The window is forced, not hoped for: before each join or leave the webhook stops answering and
the harness waits until the sink has a request of its batch held there, i.e. until the sink is
in the middle of delivering a batch; the webhook stays down until the group is stable again and
``--hold`` seconds (1 s) more, long enough for the sink's keep-alive polls (every 0.5 s) to run
after the new partition state exists. Then it answers everything it held, and stays open for
the rest of the period (at least a tenth of it).

A run ends once the group's committed offsets reach the end of every partition, or the sink has
had nothing to deliver for 5 s; the churn then stops, one more alert per partition is written
and the run waits until the sink has committed it (so whatever a poll skipped is behind a
commit: lost). Per run it prints: alerts, distinct keys delivered, lost (never delivered),
duplicates (deliveries beyond the first, by idempotency key: the sink is at least once),
dead-lettered, joins, leaves, the median time between two changes, seconds. Exit status 1 if
any run lost or dead-lettered an alert. ``tests/integration/test_sink_churn.py`` runs one run
in ``make test``.

    .venv/bin/python -m bench.sink_churn --runs 20
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient
from pydantic import SecretStr

from contract import codec
from contract.outputs import Alert, AlertFigures
from gpuattr.localkafka import LocalKafka, LocalKafkaConfig
from infra.admin import create_topics, wait_for_coordinator
from infra.httpserve import start_site
from infra.settings import KafkaSettings, SinkSettings
from infra.topics import topic_specs
from sinks.http import WebhookDestination
from sinks.payloads import IDEMPOTENCY_HEADER
from sinks.runner import run_sink

PARTITIONS = 4
HEARTBEAT_MS = 500  # both members notice a join or leave within half a second
SESSION_MS = 6000
SECRET = "churn-bench-signing-key-0123456789"


@dataclass
class RunFigures:
    alerts: int
    delivered_keys: int
    lost: int
    duplicates: int
    dead_lettered: int
    joins: int
    leaves: int
    #: median seconds from one join or leave to the next (0 with fewer than two)
    spacing_s: float
    seconds: float

    def line(self) -> str:
        return (
            f"alerts {self.alerts}  delivered keys {self.delivered_keys}  lost {self.lost}  "
            f"duplicates {self.duplicates}  dead-lettered {self.dead_lettered}  "
            f"joins {self.joins}  leaves {self.leaves}  every {self.spacing_s:.2f} s  "
            f"{self.seconds:.1f} s"
        )


@dataclass
class GatedWebhook:
    """A webhook receiver that holds every request while ``gate`` is clear."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    waiting: int = 0
    keys: collections.Counter[str] = field(default_factory=collections.Counter)
    last_request: float = field(default_factory=time.monotonic)

    def quiet_for(self, seconds: float) -> bool:
        """Nothing held and no request for ``seconds``: the sink has nothing to deliver."""
        return not self.waiting and time.monotonic() - self.last_request > seconds

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.last_request = time.monotonic()
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1
        self.keys[request.headers[IDEMPOTENCY_HEADER]] += 1
        return web.Response(text="ok")


def alert(n: int) -> Alert:
    return Alert(
        id=f"churn-{n:05d}",
        kind="idle",
        status="firing",
        node=f"node-{n % 7}",
        device_uuid=f"GPU-{n}",
        gpu_uuid=f"GPU-{n}",
        model="A100",
        mig=None,
        sharing="none",
        holders=(),
        figures=AlertFigures(util_pct=0.0, util_threshold_pct=5.0),
        window_s=60,
        started_ms=n,
        ts_ms=n,
        device_wide=False,
        summary=f"idle alert {n}",
    )


def _median_gap(times: list[float]) -> float:
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return statistics.median(gaps) if gaps else 0.0


async def _until(condition: Callable[[], Any], timeout_s: float, what: str) -> None:
    """Poll an (async) condition every 20 ms; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout_s:.0f} s")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def _webhook(hook: GatedWebhook) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/hook", hook.handle)
    runner, _, port = await start_site(app, "127.0.0.1", 0, shutdown_timeout=0.1)
    try:
        yield f"http://127.0.0.1:{port}/hook"
    finally:
        hook.gate.set()
        await runner.cleanup()


async def _queue(
    kafka: KafkaSettings, alerts: Sequence[tuple[Alert, int | None]], opts: dict[str, Any]
) -> dict[int, int]:
    """Write ``alerts`` (to the partition given, or by key); the end offset of every partition
    written to."""
    assert kafka.bootstrap is not None
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all", **opts)
    await producer.start()
    try:
        sends = [
            await producer.send(
                kafka.topic("alerts"), codec.encode(a), key=a.id.encode(), partition=partition
            )
            for a, partition in alerts
        ]
        results = await asyncio.gather(*sends)
    finally:
        await producer.stop()
    ends: dict[int, int] = {}
    for meta in results:
        ends[meta.partition] = max(ends.get(meta.partition, 0), meta.offset + 1)
    return ends


async def _dead_lettered(kafka: KafkaSettings, opts: dict[str, Any]) -> int:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap, group_id=None, enable_auto_commit=False, **opts
    )
    await consumer.start()
    try:
        tps = [TopicPartition(kafka.topic("deadletter"), p) for p in range(PARTITIONS)]
        return sum((await consumer.end_offsets(tps)).values())  # nothing is ever deleted there
    finally:
        await consumer.stop()


class _Assigned(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.event = asyncio.Event()

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.event.clear()

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.event.set()


class Churn:
    """A second group member that joins and leaves in turn while the sink delivers."""

    def __init__(
        self,
        kafka: KafkaSettings,
        group: str,
        hook: GatedWebhook,
        admin: AIOKafkaAdminClient,
        period_s: float,
        hold_s: float,
        opts: dict[str, Any],
    ) -> None:
        self.kafka, self.group, self.hook, self.admin = kafka, group, hook, admin
        self.period_s, self.hold_s, self.opts = period_s, hold_s, opts
        self.stopping = False
        self.joins = self.leaves = 0
        self.member: AIOKafkaConsumer | None = None
        self.starts: list[float] = []  # monotonic time each join or leave began

    async def _members(self) -> int | None:
        """Members of the group once it is stable (None while it rebalances)."""
        (response,) = await self.admin.describe_consumer_groups([self.group])
        (group,) = response.groups
        state, members = group[2], group[5]
        return len(members) if state == "Stable" else None

    async def _join(self) -> None:
        listener = _Assigned()
        member = AIOKafkaConsumer(
            bootstrap_servers=self.kafka.bootstrap,
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            **self.opts,
        )
        member.subscribe([self.kafka.topic("alerts")], listener=listener)
        await member.start()
        self.member = member
        self.joins += 1
        await _until(listener.event.is_set, 60, "assignment for the joining member")

    async def _leave(self) -> None:
        assert self.member is not None
        member, self.member = self.member, None
        await member.stop()  # LeaveGroup: its partitions go back to the sink
        self.leaves += 1

    async def _cycle(self) -> None:
        self.hook.gate.clear()
        await _until(lambda: self.hook.waiting or self.stopping, 60, "a batch in delivery")
        if self.stopping:
            return
        self.starts.append(time.monotonic())
        await (self._join() if self.member is None else self._leave())
        expected = 1 if self.member is None else 2
        await _until(lambda: self._stable(expected), 60, "a stable group")
        await asyncio.sleep(self.hold_s)  # the webhook stays down across the rebalance
        self.hook.gate.set()

    async def _stable(self, expected: int) -> bool:
        return await self._members() == expected

    async def run(self) -> None:
        try:
            while not self.stopping:
                began = time.monotonic()
                await self._cycle()
                # the cadence: a join or leave every period, and the webhook open at least a
                # tenth of it in between, so that the sink delivers something between changes
                rest = max(self.period_s - (time.monotonic() - began), self.period_s / 10)
                await asyncio.sleep(rest)
        finally:
            self.hook.gate.set()
            if self.member is not None:
                await self._leave()


async def churn_run(
    bootstrap: str,
    *,
    alerts: int = 2000,
    batch_max: int = 20,
    period_s: float = 2.0,
    hold_s: float = 1.0,
    rate_per_s: float = 200.0,
    timeout_s: float = 600.0,
    client_options: dict[str, Any] | None = None,
) -> RunFigures:
    """One run (module doc): the figures, whatever they are — the caller judges them."""
    opts = client_options or {}
    kafka = KafkaSettings(
        bootstrap=bootstrap, topic_prefix=f"churn{uuid.uuid4().hex[:8]}.", partitions=PARTITIONS
    )
    group = f"{kafka.topic_prefix}sink"
    await create_topics(bootstrap, topic_specs(kafka), **opts)
    ends = await _queue(kafka, [(alert(n), None) for n in range(alerts)], opts)
    await wait_for_coordinator(bootstrap, group, **opts)
    settings = SinkSettings(
        group_id=group,
        batch_max=batch_max,
        rate_per_s=rate_per_s,
        burst=batch_max,
        session_timeout_s=SESSION_MS / 1000,
        heartbeat_interval_s=HEARTBEAT_MS / 1000,
    )
    hook = GatedWebhook()
    hook.gate.set()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **opts)
    await admin.start()
    stop = asyncio.Event()
    began = time.monotonic()
    try:

        async def committed_all() -> bool:
            offsets = await admin.list_consumer_group_offsets(group)
            done = {tp.partition: meta.offset for tp, meta in offsets.items()}
            return all(done.get(p, -1) >= end for p, end in ends.items())

        # The end: every alert committed — or the sink idle short of that, which happens when a
        # poll discarded the last records of a partition (its position is at the end, its commit
        # is not). Then one more alert per partition, written after the churn, shows where the
        # sink stands: it delivers them and its commits go past whatever it skipped (lost).

        async with _webhook(hook) as url, aiohttp.ClientSession() as session:
            dest = WebhookDestination("webhook", SecretStr(url), session, SecretStr(SECRET))
            sink = asyncio.create_task(run_sink(kafka, settings, [dest], stop))
            churn = Churn(kafka, group, hook, admin, period_s, hold_s, opts)
            churning = asyncio.create_task(churn.run())
            try:
                await _until(
                    lambda: (
                        sink.done() or churning.done() or hook.quiet_for(5.0) or committed_all()
                    ),
                    timeout_s,
                    "commit of every alert",
                )
                churn.stopping = True
                await churning  # the last member leaves; its partitions return to the sink
                last = [(alert(alerts + p), p) for p in range(PARTITIONS)]
                ends |= await _queue(kafka, last, opts)
                await _until(lambda: sink.done() or committed_all(), timeout_s, "the final commits")
            finally:
                churn.stopping = True
                stop.set()
                await asyncio.gather(sink, churning, return_exceptions=True)
            if sink.done() and sink.exception() is not None:
                raise RuntimeError("the sink crashed") from sink.exception()
            churning.result()
        sent = {f"{a.id}:firing" for a in map(alert, range(alerts + PARTITIONS))}
        delivered = set(hook.keys)
        return RunFigures(
            alerts=alerts + PARTITIONS,
            delivered_keys=len(delivered & sent),
            lost=len(sent - delivered),
            duplicates=sum(n - 1 for n in hook.keys.values()),
            dead_lettered=await _dead_lettered(kafka, opts),
            joins=churn.joins,
            leaves=churn.leaves,
            spacing_s=_median_gap(churn.starts),
            seconds=time.monotonic() - began,
        )
    finally:
        await admin.close()


async def _main(args: argparse.Namespace) -> int:
    async with contextlib.AsyncExitStack() as stack:
        bootstrap = os.environ.get("GPUATTR_KAFKA_BOOTSTRAP")
        if not bootstrap:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="churn-")))
            broker = await stack.enter_async_context(LocalKafka(LocalKafkaConfig(data_dir=tmp)))
            bootstrap = broker.bootstrap
        runs: list[RunFigures] = []
        for n in range(args.runs):
            figures = await churn_run(
                bootstrap,
                alerts=args.alerts,
                batch_max=args.batch_max,
                period_s=args.period,
                hold_s=args.hold,
            )
            runs.append(figures)
            print(f"run {n + 1:2d}: {figures.line()}", flush=True)
    for name in ("lost", "duplicates", "dead_lettered", "joins", "leaves", "spacing_s", "seconds"):
        values = [getattr(r, name) for r in runs]
        print(f"{name}: median {statistics.median(values):g} [{min(values):g}, {max(values):g}]")
    print(
        f"runs with a lost or dead-lettered alert: "
        f"{sum(1 for r in runs if r.lost or r.dead_lettered)} of {len(runs)}"
    )
    return 1 if any(r.lost or r.dead_lettered for r in runs) else 0


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.sink_churn", description=__doc__)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--alerts", type=int, default=2000)
    p.add_argument("--batch-max", type=int, default=20)
    p.add_argument("--period", type=float, default=2.0, help="seconds between joins and leaves")
    p.add_argument("--hold", type=float, default=1.0, help="seconds the webhook stays down")
    sys.exit(asyncio.run(_main(p.parse_args())))


if __name__ == "__main__":
    main()
