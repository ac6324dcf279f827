"""The benchmark's machinery, small and untimed: the generator is right, and two workers give
exactly the output of one for the same input."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest

from bench import floor
from bench.fleet import fleet, sample_count, stream
from bench.run import CHURN_INTERVAL_MS, churn_stream, rss_at_scale, rss_with_churn, throughput
from contract import codec
from contract.inputs import DcgmScrape, PodRecord, PodResourcesDiff, PodResourcesSnapshot
from streams.core.lifetimes import HISTORY_MS

pytestmark = pytest.mark.integration


def test_generator_shape() -> None:
    records = list(stream(8, 4, start_ms=0, churn_every=2))
    kinds = Counter(type(r).__name__ for r in records)
    assert kinds["DcgmScrape"] == 8 * 4  # one per node per interval, every device in it
    readings = sum(len(r.samples) for r in records if isinstance(r, DcgmScrape))
    assert readings == sample_count(8, 4) == 4 * sum(len(n.devices()) for n in fleet(8))
    assert kinds["PodResourcesSnapshot"] == 8
    assert kinds["PodResourcesDiff"] == 8 * 2  # churn at intervals 2 and 4
    assert {n.mode for n in fleet(8)} == {"exclusive", "time-slicing", "mps", "mig"}
    assert all(codec.decode(codec.encode(r)) == r for r in records)
    for node in fleet(8):  # time order within each node's stream
        kinds_with_time = (DcgmScrape, PodResourcesDiff, PodResourcesSnapshot)
        stamps = [
            r.ts_ms for r in records if r.node == node.name and isinstance(r, kinds_with_time)
        ]
        assert stamps == sorted(stamps)
    assert list(stream(8, 4, start_ms=0)) == list(stream(8, 4, start_ms=0))  # deterministic


async def test_two_workers_equal_one(kafka_bootstrap: str, tmp_path: Path) -> None:
    one = await throughput(kafka_bootstrap, 8, 3, 1, tmp_path)
    two = await throughput(kafka_bootstrap, 8, 3, 2, tmp_path)
    assert one["samples"] == sample_count(8, 3)
    assert len(one["outputs"]) == one["events"]  # distinct: every sample, and the spine's
    sampled = [o for o in map(orjson.loads, one["outputs"]) if o["origin"] == "sample"]
    assert len(sampled) == one["samples"]
    assert one["duplicates"] == 0
    assert one["outputs"] == two["outputs"]
    states = Counter(o["state"] for o in sampled)
    assert states["shared"] > 0
    assert states["exclusive"] > 0
    assert "unknown" not in states


async def test_two_workers_started_together_skip_no_input(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Regression: two workers starting on a preloaded topic hand partitions over before anyone
    has committed. Faust dropped what the new owner prefetched during recovery and did not seek
    back (no committed offset), so ~5 % of samples were never attributed. streams.worker.transport
    rewinds such partitions; every sample must now have its attribution event."""
    nodes, intervals = 100, 8
    two = await throughput(kafka_bootstrap, nodes, intervals, 2, tmp_path, timeout_s=120)
    seen = {
        (e["node"], e["gpu_uuid"], e["mig"] and e["mig"]["instance_id"], e["ts_ms"])
        for e in map(orjson.loads, two["outputs"])
        if e["origin"] == "sample"
    }
    wanted = {
        (s.node, s.uuid, s.mig_instance_id, s.ts_ms)
        for r in stream(nodes, intervals, start_ms=1_700_000_000_000)
        if isinstance(r, DcgmScrape)
        for s in r.samples
    }
    assert len(wanted) == sample_count(nodes, intervals)
    assert seen == wanted


async def test_rss_is_measured_on_a_fleet_of_the_size_asked(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The RSS figure at scale comes from a worker that processed a fleet of at least the
    devices asked for (the fewest nodes that reach it), not from an extrapolation."""
    small = await throughput(kafka_bootstrap, 4, 2, 1, tmp_path)
    big = await rss_at_scale(
        kafka_bootstrap, 60, 2, small["rss_bytes"], sample_count(4, 1), tmp_path
    )
    nodes = int(big["nodes"])
    assert sample_count(nodes, 1) >= 60 > sample_count(nodes - 1, 1)
    assert big["devices"] == sample_count(nodes, 1)
    assert big["rss_mib"] > 0
    # the same run's rate and cost at that size (what sizing by devices per worker reads)
    assert big["samples_per_s"] > 0
    assert big["cpu_us_per_sample"] > 0


async def test_floor_reads_every_record_at_each_level(kafka_bootstrap: str, tmp_path: Path) -> None:
    """bench.floor's figures come from readers that read the whole input: a bare consumer, and
    a worker cut at each level, which reports once it has handled as many records as the input
    has (no report fails the run)."""
    fleet = (4, 2)
    records = sum(1 for _ in stream(*fleet, start_ms=floor.START_MS))
    source = await floor.load(kafka_bootstrap, "fsmoke", fleet, records)
    topic = source.topic("node-events")
    assert await floor.bare(kafka_bootstrap, topic, records, False, "smoke-p") > 0
    assert await floor.bare(kafka_bootstrap, topic, records, True, "smoke-d") > 0
    for level in floor.LEVELS:
        cost = await floor.floor_worker(kafka_bootstrap, fleet, records, tmp_path, level, level)
        assert cost > 0
        report = (tmp_path / f"floor-{level}.txt").read_text().split()
        assert int(report[0]) == records


def test_churn_stream_outlives_the_remembered_history() -> None:
    """The churn row's fleet hands its first device to new pods at every scrape, for longer
    than a gone pod is remembered: what the worker holds at its end is the live set."""
    records = list(churn_stream(4, 30))
    diffs = [r for r in records if isinstance(r, PodResourcesDiff)]
    assert len(diffs) == 4 * 30  # every node, every scrape
    deleted = [r for r in records if isinstance(r, PodRecord) and r.deleted]
    assert len(deleted) == sum(len(d.removed) for d in diffs) > 0
    stamps = [r.ts_ms for r in records if isinstance(r, DcgmScrape)]
    assert max(stamps) - min(stamps) == 29 * CHURN_INTERVAL_MS > HISTORY_MS


async def test_rss_with_churn_reads_one_worker_twice(kafka_bootstrap: str, tmp_path: Path) -> None:
    small = await rss_with_churn(kafka_bootstrap, 2, 24, tmp_path)
    lifecycles = sum(1 for r in churn_stream(2, 24) if isinstance(r, PodRecord) and r.deleted)
    assert small["pod_lifecycles"] == lifecycles > 0
    assert small["devices"] == sample_count(2, 1)
    assert small["event_minutes"] == 24 * CHURN_INTERVAL_MS / 60_000 > small["history_minutes"]
    assert small["rss_half_mib"] > 0
    assert small["rss_end_mib"] > 0
