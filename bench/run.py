"""``python -m bench.run``: worker throughput vs a raw Kafka passthrough, latency at 50 % and
80 % of saturation, worker CPU and RSS (at the bench fleet and at ``--rss-devices``), the
changelogs' writes and bytes per sample in steady state, agent cost, and two workers against
one — on real Kafka.

Samples/s counts GPU readings (a ``dcgm.scrape`` record carries every device of a node). The
passthrough moves the same input records with the worker's producer settings. ``--repeat N``
runs everything N times on one broker and prints each figure's median and spread; the JSON
(``--out``, default ``bench/results.json``) holds every run, the medians and the machine (its
``compare`` section kept). ``--compare REV`` runs REV's worker against this tree's instead,
alternating (:mod:`bench.compare`).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import functools
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import psutil
from aiokafka import AIOKafkaConsumer

from bench import compare, kafka_io
from bench.fleet import UtilTrace, fleet, sample_count, scrape, setup, stream
from contract import codec
from contract.inputs import DcgmScrape, InputRecord, PodRecord
from contract.outputs import AttributionEvent
from contract.topics import DEMAND_TABLES, TABLES
from gpuattr.procs import Child, settings_env
from infra.admin import create_topics
from infra.settings import KafkaSettings
from infra.topics import topic_specs
from streams.core.flow.processor import Processor, Tables
from streams.core.lifetimes import HISTORY_MS

PARTITIONS = 8
#: the bench fleet's first event time
START_MS = 1_700_000_000_000
#: alert windows short enough for the fleet's idle stretches (event time) to raise alerts
ALERTS = {"GPUATTR_ALERTS_IDLE_WINDOW_S": "20", "GPUATTR_ALERTS_ORPHAN_WINDOW_S": "20"}


class CpuClock:
    """A process's CPU seconds, sampled every 0.2 s, so that the CPU of a time window can be
    read afterwards (start-up and imports excluded)."""

    def __init__(self, pids: list[int]) -> None:
        self.procs = [psutil.Process(p) for p in pids]
        self.samples: list[tuple[float, float]] = []
        self._task: asyncio.Task[None] | None = None

    def _now(self) -> tuple[float, float]:
        return time.monotonic(), sum(sum(p.cpu_times()[:2]) for p in self.procs)

    async def _run(self) -> None:
        while True:
            self.samples.append(self._now())
            await asyncio.sleep(0.2)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self.samples.append(self._now())
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def between(self, t0: float, t1: float) -> float:
        """CPU seconds used between two monotonic times, interpolated linearly between the
        samples around each (a span shorter than the sampling step still gets its share)."""
        times = [t for t, _ in self.samples]

        def at(t: float) -> float:
            i = bisect.bisect_left(times, t)
            if i == 0:
                return self.samples[0][1]
            if i == len(times):
                return self.samples[-1][1]
            (ta, ca), (tb, cb) = self.samples[i - 1], self.samples[i]
            return ca + (cb - ca) * (t - ta) / max(tb - ta, 1e-9)

        return at(t1) - at(t0)


async def prepared(bootstrap: str, tag: str, partitions: int = PARTITIONS) -> KafkaSettings:
    """Fresh topics (a prefix of their own) for one run's workers: their settings."""
    kafka = KafkaSettings(
        bootstrap=bootstrap, topic_prefix=f"b{tag}{uuid.uuid4().hex[:6]}.", partitions=partitions
    )
    await create_topics(bootstrap, topic_specs(kafka, app_id(kafka)))
    return kafka


async def preloaded(
    bootstrap: str, tag: str, nodes: int, intervals: int, partitions: int = PARTITIONS
) -> tuple[KafkaSettings, int]:
    """Fresh topics (:func:`prepared`) with the input of the bench fleet (``nodes`` x
    ``intervals``) on the workers' input topic: their settings, and how many records it is."""
    kafka = await prepared(bootstrap, tag, partitions)
    n = await kafka_io.produce(
        bootstrap, kafka.topic("node-events"), stream(nodes, intervals, start_ms=START_MS)
    )
    return kafka, n


def app_id(kafka: KafkaSettings) -> str:
    """The workers' consumer group on these topics."""
    return kafka.topic_prefix + "worker"


def worker_children(
    kafka: KafkaSettings, n: int, workdir: Path, code: Path | None = None, **settings: object
) -> list[Child]:
    """``n`` worker processes on ``kafka``'s topics (not started), with the bench's alert
    windows; ``settings``: more of the worker's settings, as :func:`settings_env` takes them.
    Each logs to ``worker-<i>.log`` in a folder of ``workdir`` named by the topics' prefix.
    ``code``: the source tree the workers run from (another commit's checkout; its folder and
    ``PYTHONPATH``, the same interpreter), None: this one."""
    env = settings_env(
        KAFKA_BOOTSTRAP=kafka.bootstrap,
        KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
        KAFKA_PARTITIONS=kafka.partitions,
        WORKER_APP_ID=app_id(kafka),
        WORKER_WEB_ENABLED="false",
        **settings,
    )
    env.update(ALERTS)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    return [
        Child(
            f"worker-{i}",
            ["worker"],
            {**env, "GPUATTR_WORKER_DATA_DIR": str(workdir / f"{kafka.topic_prefix}{i}")},
            workdir / kafka.topic_prefix.rstrip(".") / f"worker-{i}.log",
            cwd=code,
        )
        for i in range(n)
    ]


def attribution_events(records: Iterable[object]) -> list[AttributionEvent]:
    """The attribution events the worker emits for ``records``, computed by the same core."""
    proc = Processor(Tables.in_memory())
    return [
        out
        for record in records
        for out in proc.handle(record)
        if isinstance(out, AttributionEvent)
    ]


@functools.cache
def expected_events(
    nodes: int, intervals: int, samples_only: bool = False
) -> frozenset[tuple[str, str, int, str]]:
    """The attribution events the worker emits for the fleet's stream: one per GPU sample, and
    the allocation spine's (allocation changes, heartbeats); ``samples_only``: the samples'
    alone (what any version of the worker emits, whatever its spine decides)."""
    events = attribution_events(stream(nodes, intervals, start_ms=START_MS))
    wanted = [e.identity() for e in events if not samples_only or e.origin == "sample"]
    if len(wanted) != len(set(wanted)):
        raise RuntimeError("two attribution events of one run share an identity")
    return frozenset(wanted)


def _identity(raw: bytes) -> tuple[str, str, int, str]:
    event = codec.decode(raw)
    if not isinstance(event, AttributionEvent):
        raise TypeError(f"not an attribution event on the attribution topic: {event!r}")
    return event.identity()


async def throughput(
    bootstrap: str,
    nodes: int,
    intervals: int,
    workers: int,
    workdir: Path,
    timeout_s: float = 600,
    code: Path | None = None,
    samples_only: bool = False,
) -> dict[str, Any]:
    """Load the input first, then start the workers: they run at saturation until done.
    ``code``: the tree the workers run from (:func:`worker_children`); ``samples_only``: the
    events waited for and timed are the samples' alone (:func:`expected_events`)."""
    samples = sample_count(nodes, intervals)
    wanted = expected_events(nodes, intervals, samples_only)
    expected = len(wanted)
    kafka, inputs = await preloaded(bootstrap, f"w{workers}", nodes, intervals)
    children = worker_children(kafka, workers, workdir, code)
    for c in children:
        await c.start()
    cpu = CpuClock([c.proc.pid for c in children if c.proc])
    cpu.start()
    wall_to_monotonic = time.monotonic() - time.time()
    try:
        await kafka_io.wait_count(
            bootstrap, kafka.topic("attribution"), expected, timeout_s=timeout_s
        )
        await cpu.stop()
        rss = sum(psutil.Process(c.proc.pid).memory_info().rss for c in children if c.proc)
        stamped = await kafka_io.wait_covered(
            bootstrap,
            kafka.topic("attribution"),
            wanted,
            _identity,
            timeout_s=timeout_s,
        )
    finally:
        await cpu.stop()
        for c in children:
            await c.stop()
    outputs = [value for _, value in stamped]
    # The measured span: from the first attribution event the workers produced to the last
    # wanted one's first copy, by the timestamps their producer gave them (a copy written
    # again after a rebalance is not new work). The events after the first are the work in it.
    made: dict[tuple[str, str, int, str], int] = {}
    for ts, value in stamped:
        if (identity := _identity(value)) in wanted:
            made.setdefault(identity, ts)
    first_ms, last_ms = min(made.values()), max(made.values())
    span_s = max(last_ms - first_ms, 1) / 1000  # the stamps' resolution is 1 ms
    first = first_ms / 1000 + wall_to_monotonic
    done = last_ms / 1000 + wall_to_monotonic
    # events per second over the measured span, as GPU samples (the spine's events ride along)
    rate = (expected - 1) / span_s * samples / expected
    measured_samples = (expected - 1) * samples / expected
    alerts = await kafka_io.count(bootstrap, kafka.topic("alerts"))
    writes = 0
    for name in TABLES.values():  # what the node-keyed stage wrote (its changelogs' records)
        writes += await kafka_io.count(bootstrap, f"{app_id(kafka)}-{name}-changelog")
    return {
        "kafka": kafka,
        "inputs": inputs,
        "samples": samples,
        "events": expected,
        "samples_per_s": rate,
        "cpu_us_per_sample": cpu.between(first, done) / max(measured_samples, 1) * 1e6,
        "alerts": alerts,
        "changelog_writes_per_sample": writes / samples,
        "rss_bytes": rss,
        "outputs": sorted(set(outputs)),
        "duplicates": len(outputs) - len(set(outputs)),
    }


async def rss_at_scale(
    bootstrap: str,
    devices: int,
    intervals: int,
    small_rss: int,
    small_devices: int,
    workdir: Path,
    code: Path | None = None,
    samples_only: bool = False,
) -> dict[str, float]:
    """The worker's RSS measured on a fleet of at least ``devices`` devices (all of its state
    built: every input processed), not extrapolated; the growth per 1,000 devices from the
    main fleet's run to this one (the same scrape rounds, so the same history per device); and
    the worker's rate and CPU per sample on that fleet."""
    nodes = 1
    while sample_count(nodes, 1) < devices:
        nodes += 1
    run = await throughput(
        bootstrap, nodes, intervals, 1, workdir, code=code, samples_only=samples_only
    )
    big = sample_count(nodes, 1)
    grown = (run["rss_bytes"] - small_rss) / 2**20 / max(big - small_devices, 1) * 1000
    return {
        "nodes": nodes,
        "devices": big,
        "rss_mib": round(run["rss_bytes"] / 2**20, 1),
        "mib_per_1k_devices": round(grown, 2),
        # the same worker's rate and cost at this size: what sizing by devices per worker reads
        "samples_per_s": round(run["samples_per_s"]),
        "cpu_us_per_sample": round(run["cpu_us_per_sample"], 1),
    }


def cpu_growth(at_scale_us: float, at_fleet_us: float) -> float:
    """How the worker's CPU per sample grows with the fleet: at scale over the bench fleet."""
    return round(at_scale_us / max(at_fleet_us, 1e-9), 3)


#: scrapes per node before the steady changelog row counts: the devices' first sight and the
#: idle episodes of idle devices starting and firing (as :func:`bench.core.steady_writes`)
STEADY_WARM_INTERVALS = 6


def node_changelogs(names: Iterable[str], app: str) -> list[str]:
    """The changelog topics of worker app ``app`` among ``names``, but the demand stage's:
    the node-keyed stage's tables, whichever the worker's version has."""
    demand = {f"{app}-{name}-changelog" for name in DEMAND_TABLES.values()}
    return sorted(
        n for n in names if n.startswith(f"{app}-") and n.endswith("-changelog") and n not in demand
    )


async def steady_changelog(
    bootstrap: str,
    nodes: int,
    intervals: int,
    workdir: Path,
    code: Path | None = None,
    timeout_s: float = 600,
) -> dict[str, float]:
    """What the node-keyed stage writes to its changelogs per GPU sample in steady state: a
    fleet without pod churn whose devices keep their levels. One worker reads the warm-up
    (:data:`STEADY_WARM_INTERVALS` scrapes per node) and settles; the changelogs' end offsets
    are read, then ``intervals`` more scrapes per node are produced and read, and the end
    offsets read again: the records between them, counted and their key and value bytes
    summed, over the samples of those scrapes."""
    records = list(
        stream(nodes, STEADY_WARM_INTERVALS + intervals, start_ms=START_MS, churn_every=0, switch=0)
    )
    first = next(i for i, r in enumerate(records) if isinstance(r, DcgmScrape))
    warm = first + nodes * STEADY_WARM_INTERVALS

    def sampled(part: list[InputRecord]) -> frozenset[tuple[str, str, int, str]]:
        return frozenset(e.identity() for e in attribution_events(part) if e.origin == "sample")

    kafka = await prepared(bootstrap, "s")
    topic = kafka.topic("attribution")
    await kafka_io.produce(bootstrap, kafka.topic("node-events"), records[:warm])
    [child] = worker_children(kafka, 1, workdir, code)
    await child.start()
    try:
        await kafka_io.wait_covered(
            bootstrap, topic, sampled(records[:warm]), _identity, timeout_s=timeout_s
        )
        names = node_changelogs(await kafka_io.topics(bootstrap), app_id(kafka))
        before = await kafka_io.settled_ends(bootstrap, names)
        await kafka_io.produce(bootstrap, kafka.topic("node-events"), records[warm:])
        await kafka_io.wait_covered(
            bootstrap, topic, sampled(records), _identity, timeout_s=timeout_s
        )
        names = node_changelogs(await kafka_io.topics(bootstrap), app_id(kafka))
        after = await kafka_io.settled_ends(bootstrap, names)
        size = await kafka_io.bytes_between(bootstrap, before, after)
    finally:
        await child.stop()
    writes = sum(end - before.get(tp, 0) for tp, end in after.items())
    samples = sample_count(nodes, intervals)
    return {
        "nodes": nodes,
        "intervals": intervals,
        "samples": samples,
        "tables": len(names),
        "writes_per_sample": round(writes / samples, 4),
        "bytes_per_sample": round(size / samples, 1),
    }


#: the churn row's scrape interval (dcgm-exporter's default; the throughput fleet's is 5 s), so
#: that its stream covers several times the remembered history in a minute of the worker's time
CHURN_INTERVAL_MS = 30_000


def churn_stream(nodes: int, intervals: int) -> Iterator[InputRecord]:
    """The churn row's stream: the bench fleet with its first device's pods replaced on every
    node at every scrape, scraped every 30 s of event time."""
    return stream(nodes, intervals, start_ms=START_MS, interval_ms=CHURN_INTERVAL_MS, churn_every=1)


async def rss_with_churn(
    bootstrap: str, nodes: int, intervals: int, workdir: Path, timeout_s: float = 900
) -> dict[str, float]:
    """Is the worker's memory bounded by what is live on a churning cluster? One worker reads a
    fleet whose first device changes hands at every scrape (pods deleted, new pods, a
    PodResources diff), for event time several times the pods' remembered history
    (:data:`streams.core.lifetimes.HISTORY_MS`): its RSS is read when half its attribution events
    are out and again at the end. The live set is the same at both reads, the lifecycles behind it
    twice as many: the growth per 1,000 pod lifecycles between them is what history costs."""
    kafka = await prepared(bootstrap, "c")
    records = list(churn_stream(nodes, intervals))  # made once: counted, joined, produced
    events = attribution_events(records)
    lifecycles = sum(1 for r in records if isinstance(r, PodRecord) and r.deleted)
    await kafka_io.produce(bootstrap, kafka.topic("node-events"), records)
    [child] = worker_children(kafka, 1, workdir)
    await child.start()
    assert child.proc is not None
    proc = psutil.Process(child.proc.pid)
    try:
        topic = kafka.topic("attribution")
        await kafka_io.wait_count(bootstrap, topic, len(events) // 2, timeout_s=timeout_s)
        half = proc.memory_info().rss
        await kafka_io.wait_count(bootstrap, topic, len(events), timeout_s=timeout_s)
        end = proc.memory_info().rss
    finally:
        await child.stop()
    return {
        "nodes": nodes,
        "devices": sample_count(nodes, 1),
        "pod_lifecycles": lifecycles,
        "event_minutes": round(intervals * CHURN_INTERVAL_MS / 60_000, 1),
        "history_minutes": round(HISTORY_MS / 60_000, 1),
        "rss_half_mib": round(half / 2**20, 1),
        "rss_end_mib": round(end / 2**20, 1),
        "mib_per_1k_lifecycles": round((end - half) / 2**20 / (lifecycles / 2) * 1000, 2),
    }


async def latency(
    bootstrap: str, nodes: int, rate: float, seconds: float, workdir: Path, code: Path | None = None
) -> dict[str, float]:
    """Paced samples stamped with wall time; latency = arrival on the output topic - ts_ms."""
    kafka = await prepared(bootstrap, "lat")
    members = fleet(nodes)
    now = int(time.time() * 1000)
    records = [r for n in members for r in setup(n, now)]
    await kafka_io.produce(bootstrap, kafka.topic("node-events"), records)
    # the worker is up once its events for the set-up are out (allocation, spine)
    ready = len(attribution_events(records))
    if not ready:
        raise RuntimeError("the latency fleet's set-up makes no attribution event to wait for")
    consumer = AIOKafkaConsumer(
        kafka.topic("attribution"),
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="latest",
    )
    await consumer.start()
    children = worker_children(kafka, 1, workdir, code)
    await children[0].start()
    lat: list[float] = []

    async def measure() -> None:
        async for msg in consumer:
            event = orjson.loads(msg.value or b"{}")
            if event["origin"] == "sample":  # one per paced sample (the set-up's are spine's)
                lat.append(time.time() * 1000 - event["ts_ms"])

    reader = asyncio.create_task(measure())
    try:
        # worker start-up and partition assignment, not measured: a start-up slower than a
        # fixed wait (a loaded box) would be counted as latency
        await kafka_io.wait_count(bootstrap, kafka.topic("attribution"), ready, timeout_s=180)
        lat.clear()
        per_tick = sum(len(n.devices()) for n in members)
        tick_s = per_tick / rate
        trace = UtilTrace(random.Random(1))
        end = time.monotonic() + seconds
        paced = 0
        while time.monotonic() < end:
            t0 = time.monotonic()
            ts = int(time.time() * 1000)
            scrapes = [scrape(n, ts, trace) for n in members]
            await kafka_io.produce(bootstrap, kafka.topic("node-events"), scrapes)
            paced += sum(len(s.samples) for s in scrapes)
            await asyncio.sleep(max(0.0, tick_s - (time.monotonic() - t0)))
        # every paced sample's event, however late (a fixed wait would cut the tail off)
        deadline = time.monotonic() + 120
        while len(lat) < paced:
            if time.monotonic() > deadline:
                raise TimeoutError(f"latency: {len(lat)} of {paced} sample events after 120 s")
            await asyncio.sleep(0.1)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        await consumer.stop()
        await children[0].stop()
    lat.sort()
    return {
        "rate": rate,
        "n": len(lat),
        "p50_ms": statistics.median(lat) if lat else -1,
        "p99_ms": lat[int(len(lat) * 0.99) - 1] if lat else -1,
    }


async def agent_cost(seconds: float, workdir: Path, bootstrap: str) -> dict[str, float]:
    """One agent against one simulated 8-GPU-ish node: 1 s PodResources polls, 5 s scrapes."""
    from sim.runner import ScenarioClock, SimulatedCluster
    from sim.scenario import load

    kafka = await prepared(bootstrap, "agent")
    async with SimulatedCluster(load("exclusive"), workdir / "agent-sim", ScenarioClock()) as sim:
        ep = sim.endpoints()[0]
        env = {
            **settings_env(KAFKA_BOOTSTRAP=bootstrap, KAFKA_TOPIC_PREFIX=kafka.topic_prefix),
            **ep.agent_env(poll_interval_s=1.0, scrape_interval_s=5.0),
        }
        agent = Child("agent", ["agent", "--node", ep.node], env, workdir / "agent.log")
        await agent.start()
        try:
            assert agent.proc is not None
            proc = psutil.Process(agent.proc.pid)
            await asyncio.sleep(5)  # imports and connections, not measured
            cpu0 = sum(proc.cpu_times()[:2])
            await asyncio.sleep(seconds)
            cpu = (sum(proc.cpu_times()[:2]) - cpu0) / seconds
            rss = proc.memory_info().rss
        finally:
            await agent.stop()
    return {"cpu_cores": cpu, "rss_mib": rss / 2**20}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="gpuattr-bench-"))
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(shutil.rmtree, workdir, True)  # last out: after the broker has stopped
        bootstrap = await kafka_io.broker(stack, args.bootstrap, workdir)
        runs = []
        for n in range(args.repeat):
            load0 = os.getloadavg()
            run = await one_run(args, bootstrap, workdir)
            run["load_avg_1_5_15_before"] = [round(x, 2) for x in load0]
            run["load_avg_1_5_15_after"] = [round(x, 2) for x in os.getloadavg()]
            runs.append(run)
            print(f"run {n + 1} of {args.repeat}:\n{table(run)}\n", flush=True)
    return {
        "command": "python -m bench.run " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "runs": runs,
        "median": {k: _median(runs, k) for k in FIGURES},
        "spread": {k: _spread(runs, k) for k in FIGURES},
    }


#: the figures whose median and spread are reported (dotted paths into a run)
FIGURES = (
    "one_worker_samples_per_s",
    "one_worker_input_records_per_s",
    "raw_passthrough_records_per_s",
    "ratio_to_raw",
    "raw_like_for_like_samples_per_s",
    "ratio_to_like_for_like",
    "worker_cpu_us_per_sample",
    "changelog_writes_per_sample",
    "steady_changelog.writes_per_sample",
    "steady_changelog.bytes_per_sample",
    "two_workers_samples_per_s",
    "two_vs_one",
    "latency_50pct.p99_ms",
    "latency_80pct.p50_ms",
    "latency_80pct.p99_ms",
    "worker_rss_mib",
    "worker_rss_at_10k.rss_mib",
    "worker_rss_at_10k.mib_per_1k_devices",
    "worker_rss_at_10k.samples_per_s",
    "worker_rss_at_10k.cpu_us_per_sample",
    "cpu_per_sample_10k_vs_fleet",
    "worker_rss_with_churn.rss_half_mib",
    "worker_rss_with_churn.rss_end_mib",
    "worker_rss_with_churn.mib_per_1k_lifecycles",
    "agent_per_node.cpu_cores",
    "agent_per_node.rss_mib",
)


def _get(run: dict[str, Any], path: str) -> float:
    value: Any = run
    for part in path.split("."):
        value = value[part]
    return float(value)


def _median(runs: list[dict[str, Any]], path: str) -> float:
    return round(statistics.median(_get(r, path) for r in runs), 3)


def _spread(runs: list[dict[str, Any]], path: str) -> list[float]:
    values = [_get(r, path) for r in runs]
    return [round(min(values), 3), round(max(values), 3)]


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": psutil.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


async def one_run(args: argparse.Namespace, bootstrap: str, workdir: Path) -> dict[str, Any]:
    devices = sample_count(args.nodes, 1)
    one = await throughput(bootstrap, args.nodes, args.intervals, 1, workdir)
    raw_kafka = await prepared(bootstrap, "raw")
    await kafka_io.produce(
        bootstrap,
        raw_kafka.topic("node-events"),
        stream(args.nodes, args.intervals, start_ms=START_MS),
    )
    raw, _ = await kafka_io.passthrough(
        bootstrap, raw_kafka.topic("node-events"), raw_kafka.topic("attribution"), one["inputs"]
    )
    # the like-for-like line: the same scrapes in, one record per device out, each the size of
    # the worker's mean attribution event (measured on its own output), with its settings
    event_bytes = round(statistics.fmean(len(o) for o in one["outputs"]))
    _, raw_samples = await kafka_io.passthrough(
        bootstrap,
        raw_kafka.topic("node-events"),
        raw_kafka.topic("flags"),
        one["inputs"],
        event_bytes,
    )
    two = await throughput(bootstrap, args.nodes, args.intervals, 2, workdir)
    same = one["outputs"] == two["outputs"]
    # an input processed again after a rebalance meets state recovered past it, so its copy can
    # differ in content (docs/RELIABILITY.md): such copies are counted, and what one worker
    # wrote must all be there, identity for identity
    extra = set(two["outputs"]) - set(one["outputs"])
    covered = set(one["outputs"]) <= set(two["outputs"]) and {_identity(o) for o in extra} <= {
        _identity(o) for o in one["outputs"]
    }
    sat = one["samples_per_s"]
    lat50 = await latency(bootstrap, args.latency_nodes, 0.5 * sat, args.latency_s, workdir)
    lat80 = await latency(bootstrap, args.latency_nodes, 0.8 * sat, args.latency_s, workdir)
    agent = await agent_cost(args.agent_s, workdir, bootstrap)
    big = await rss_at_scale(
        bootstrap, args.rss_devices, args.intervals, one["rss_bytes"], devices, workdir
    )
    churned = await rss_with_churn(bootstrap, args.churn_nodes, args.churn_intervals, workdir)
    steady = await steady_changelog(bootstrap, args.nodes, args.intervals, workdir)
    input_rate = sat * one["inputs"] / one["samples"]  # all input records, setup and churn too
    return {
        "fleet": {
            "nodes": args.nodes,
            "devices": devices,
            "intervals": args.intervals,
            "samples": one["samples"],
            "input_records": one["inputs"],
        },
        "one_worker_samples_per_s": round(sat),
        "one_worker_input_records_per_s": round(input_rate),
        "raw_passthrough_records_per_s": round(raw),
        "ratio_to_raw": round(input_rate / raw, 3),
        "event_bytes": event_bytes,
        "raw_like_for_like_samples_per_s": round(raw_samples),
        "ratio_to_like_for_like": round(sat / raw_samples, 3),
        "worker_cpu_us_per_sample": round(one["cpu_us_per_sample"], 1),
        "changelog_writes_per_sample": round(one["changelog_writes_per_sample"], 3),
        "steady_changelog": steady,
        "alerts": one["alerts"],
        "two_workers_samples_per_s": round(two["samples_per_s"]),
        "two_vs_one": round(two["samples_per_s"] / sat, 2),
        "two_workers_output_equal": same,
        "two_workers_cover_one_worker": covered,
        "two_workers_redelivered_changed": len(extra),
        "two_workers_duplicates": two["duplicates"],
        "latency_50pct": lat50,
        "latency_80pct": lat80,
        "worker_rss_mib": round(one["rss_bytes"] / 2**20, 1),
        "worker_rss_at_10k": big,
        # how the cost per sample grows with the fleet (sizing by devices per worker reads it)
        "cpu_per_sample_10k_vs_fleet": cpu_growth(
            big["cpu_us_per_sample"], one["cpu_us_per_sample"]
        ),
        "worker_rss_with_churn": churned,
        "agent_per_node": agent,
    }


def table(r: dict[str, Any]) -> str:
    rows = [
        (
            "fleet",
            f"{r['fleet']['nodes']} nodes, {r['fleet']['devices']} devices, "
            f"{r['fleet']['samples']} samples",
        ),
        (
            "1 worker",
            f"{r['one_worker_samples_per_s']} samples/s "
            f"({r['one_worker_input_records_per_s']} input records/s), "
            f"{r['worker_cpu_us_per_sample']} µs CPU per sample, {r['alerts']} alerts, "
            f"{r['changelog_writes_per_sample']} changelog writes per sample",
        ),
        (
            "changelog, steady state",
            f"{r['steady_changelog']['writes_per_sample']} writes and "
            f"{r['steady_changelog']['bytes_per_sample']} bytes per sample "
            f"({r['steady_changelog']['tables']} node tables; no churn, levels kept)",
        ),
        ("raw aiokafka passthrough", f"{r['raw_passthrough_records_per_s']} records/s"),
        ("ratio to raw", f"{r['ratio_to_raw']}"),
        (
            "raw like-for-like",
            f"{r['raw_like_for_like_samples_per_s']} samples/s (one {r['event_bytes']}-byte "
            f"record per device produced); worker / it: {r['ratio_to_like_for_like']}",
        ),
        (
            "2 workers",
            f"{r['two_workers_samples_per_s']} samples/s = {r['two_vs_one']}x; "
            f"distinct output equal to 1 worker: {r['two_workers_output_equal']} "
            f"({r['two_workers_duplicates']} duplicates after rebalances; "
            f"{r['two_workers_redelivered_changed']} of them redelivered changed; every record "
            f"of 1 worker's there, no other identity: {r['two_workers_cover_one_worker']})",
        ),
        (
            "latency at 50%",
            f"p50 {r['latency_50pct']['p50_ms']:.0f} ms, p99 {r['latency_50pct']['p99_ms']:.0f} ms",
        ),
        (
            "latency at 80%",
            f"p50 {r['latency_80pct']['p50_ms']:.0f} ms, p99 {r['latency_80pct']['p99_ms']:.0f} ms",
        ),
        ("worker RSS", f"{r['worker_rss_mib']} MiB at {r['fleet']['devices']} devices"),
        (
            "worker RSS at scale",
            f"{r['worker_rss_at_10k']['rss_mib']} MiB at {r['worker_rss_at_10k']['devices']} "
            f"devices ({r['worker_rss_at_10k']['nodes']} nodes, measured); "
            f"{r['worker_rss_at_10k']['mib_per_1k_devices']} MiB per 1,000 devices more; "
            f"{r['worker_rss_at_10k']['samples_per_s']} samples/s at "
            f"{r['worker_rss_at_10k']['cpu_us_per_sample']} µs CPU per sample there "
            f"({r['cpu_per_sample_10k_vs_fleet']}x the fleet's)",
        ),
        (
            "worker RSS with churn",
            f"{r['worker_rss_with_churn']['rss_half_mib']} MiB half-way, "
            f"{r['worker_rss_with_churn']['rss_end_mib']} MiB at the end "
            f"({r['worker_rss_with_churn']['pod_lifecycles']} pod lifecycles on "
            f"{r['worker_rss_with_churn']['devices']} devices over "
            f"{r['worker_rss_with_churn']['event_minutes']} min of event time, history "
            f"{r['worker_rss_with_churn']['history_minutes']} min): "
            f"{r['worker_rss_with_churn']['mib_per_1k_lifecycles']} MiB per 1,000 lifecycles",
        ),
        (
            "agent per node",
            f"{r['agent_per_node']['cpu_cores']:.3f} cores, "
            f"{r['agent_per_node']['rss_mib']:.0f} MiB RSS",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


async def compare_side(
    args: argparse.Namespace, bootstrap: str, workdir: Path, code: Path | None
) -> dict[str, float]:
    """One side of ``--compare`` (:data:`bench.compare.FIGURES`): its worker run from ``code``
    (None: this tree). The events timed are the samples' alone (any version emits them)."""
    one = await throughput(
        bootstrap, args.nodes, args.intervals, 1, workdir, code=code, samples_only=True
    )
    big = await rss_at_scale(
        bootstrap,
        args.rss_devices,
        args.intervals,
        one["rss_bytes"],
        sample_count(args.nodes, 1),
        workdir,
        code=code,
        samples_only=True,
    )
    steady = await steady_changelog(bootstrap, args.nodes, args.intervals, workdir, code)
    lat = await latency(
        bootstrap, args.latency_nodes, 0.8 * one["samples_per_s"], args.latency_s, workdir, code
    )
    return {
        "samples_per_s": round(one["samples_per_s"]),
        "cpu_us_per_sample": round(one["cpu_us_per_sample"], 1),
        "samples_per_s_10k": big["samples_per_s"],
        "cpu_us_per_sample_10k": big["cpu_us_per_sample"],
        "cpu_10k_vs_fleet": cpu_growth(big["cpu_us_per_sample"], one["cpu_us_per_sample"]),
        "rss_mib": round(one["rss_bytes"] / 2**20, 1),
        "rss_mib_10k": big["rss_mib"],
        "changelog_writes_per_sample": steady["writes_per_sample"],
        "changelog_bytes_per_sample": steady["bytes_per_sample"],
        "latency_80pct_p50_ms": round(lat["p50_ms"], 1),
        "latency_80pct_p99_ms": round(lat["p99_ms"], 1),
    }


def parser() -> argparse.ArgumentParser:
    """``python -m bench.run``'s arguments (``--compare REV``: :mod:`bench.compare`)."""
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", default=None)
    p.add_argument("--nodes", type=int, default=250)
    p.add_argument("--intervals", type=int, default=8)
    p.add_argument("--latency-nodes", type=int, default=50)
    p.add_argument("--latency-s", type=float, default=20.0)
    p.add_argument("--agent-s", type=float, default=30.0)
    p.add_argument("--rss-devices", type=int, default=10_000)
    p.add_argument("--churn-nodes", type=int, default=50)
    p.add_argument("--churn-intervals", type=int, default=80)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument(
        "--compare",
        metavar="REV",
        default=None,
        help="also build REV's worker (a temporary git worktree) and alternate the two",
    )
    p.add_argument("--out", type=Path, default=Path("bench/results.json"))
    return p


def run_and_record(args: argparse.Namespace) -> dict[str, Any]:
    """The ordinary run: every figure, ``--repeat`` times, written to ``--out`` (its
    ``compare`` section kept)."""
    result = asyncio.run(main(args))
    previous = args.out.read_bytes() if args.out.exists() else None
    recorded = compare.ordinary(previous, result)
    args.out.write_bytes(orjson.dumps(recorded, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"median of {args.repeat} run(s) [min, max]:")
    for key in FIGURES:
        print(f"  {key:<38} {result['median'][key]:>12,.3f}  {result['spread'][key]}")
    return result


if __name__ == "__main__":
    cli_args = parser().parse_args()
    if cli_args.compare:
        compare.run_and_record(cli_args, compare_side, machine())
    else:
        run_and_record(cli_args)
