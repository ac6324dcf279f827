"""A partition handed over is committed where its first owner stopped (streams/worker/transport.py).

faust-streaming forgets a revoked partition's acknowledged offsets before its rebalance callbacks
run and discards commits for it, so without our commit at revoke the next owner started from the
last periodic commit and processed everything since again. Here the periodic commit is an hour
away: only the commit at revoke can move the group's offsets.

One worker processes a preloaded fleet whole; a second joins the group (every partition is
revoked from the first: Faust's rebalance is eager). Once the group is stable with both, every
input record is committed and no attribution event was written twice. The second case hands the
partitions over while the first worker is saturated: it stops taking records before it commits
(without that, it processed 61 to 172 more while the commit was under way, and the second worker
processed each again).

Why the first worker has acknowledged its last record once its last output is on the topic:
Faust acknowledges an event when the stream is asked for the next one, which the record loop
does right after handing the record's outputs to the outbox without yielding to the event loop
(``Outbox.room`` returns at once below its bound, far off on this fleet); the outbox's linger
timer, which sends them, needs the event loop, so it runs after the acknowledgement.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import kafka_io
from bench.run import app_id, expected_events, preloaded, worker_children
from contract import codec
from contract.outputs import AttributionEvent
from tests.faults.harness import crashes, group_members, lag
from tests.helpers import wait_for_async

pytestmark = pytest.mark.integration

NODES, INTERVALS = 6, 3
#: a fleet the first worker is still busy with when the second one has joined (30,300 events)
BUSY_NODES, BUSY_INTERVALS = 300, 8


async def stable_with_both(bootstrap: str, group: str) -> None:
    async def stable() -> bool:
        return await group_members(bootstrap, group) == ("Stable", 2)

    await wait_for_async(stable, timeout_s=120, every_s=0.2, what="both in group")


async def identities(bootstrap: str, topic: str) -> list[tuple[str, str, int, str]]:
    """The identity of every attribution event on ``topic``, copies included."""
    events = [codec.decode(raw) for raw in await kafka_io.read_present(bootstrap, topic)]
    return [e.identity() for e in events if isinstance(e, AttributionEvent)]


async def test_a_partition_handed_over_is_committed_where_its_first_owner_stopped(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka, inputs = await preloaded(kafka_bootstrap, "rv", NODES, INTERVALS, partitions=4)
    group = app_id(kafka)
    wanted = expected_events(NODES, INTERVALS)
    assert inputs > 0
    workers = worker_children(kafka, 2, tmp_path, WORKER_COMMIT_INTERVAL_S=3600)
    try:
        await workers[0].start()
        await kafka_io.wait_count(
            kafka_bootstrap, kafka.topic("attribution"), len(wanted), timeout_s=180
        )
        # nothing committed yet: the periodic commit is an hour away
        assert await lag(kafka_bootstrap, group, kafka.topic("node-events")) == inputs
        await workers[1].start()
        await stable_with_both(kafka_bootstrap, group)
        assert await lag(kafka_bootstrap, group, kafka.topic("node-events")) == 0
        written = await identities(kafka_bootstrap, kafka.topic("attribution"))
        assert set(written) == wanted
        assert len(written) == len(wanted)  # no copy: the second worker redid nothing
    finally:
        for w in workers:
            await w.stop()
    logs = tmp_path / kafka.topic_prefix.rstrip(".")
    assert sorted(p.name for p in logs.glob("worker-*.log")) == ["worker-0.log", "worker-1.log"]
    assert crashes(logs) == {}


async def test_a_partition_handed_over_mid_stream_is_committed_where_processing_stopped(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka, inputs = await preloaded(kafka_bootstrap, "rm", BUSY_NODES, BUSY_INTERVALS, partitions=4)
    group = app_id(kafka)
    wanted = expected_events(BUSY_NODES, BUSY_INTERVALS)
    workers = worker_children(kafka, 2, tmp_path, WORKER_COMMIT_INTERVAL_S=3600)
    try:
        await workers[0].start()
        await kafka_io.wait_count(kafka_bootstrap, kafka.topic("attribution"), 1, timeout_s=180)
        await workers[1].start()
        await stable_with_both(kafka_bootstrap, group)
        so_far = await kafka_io.count(kafka_bootstrap, kafka.topic("attribution"))
        # the hand-over happened mid-stream: the fleet was not done when the group was stable
        assert so_far < len(wanted)
        await kafka_io.wait_count(
            kafka_bootstrap, kafka.topic("attribution"), len(wanted), timeout_s=300
        )
        written = await identities(kafka_bootstrap, kafka.topic("attribution"))
        assert set(written) == wanted
        assert len(written) == len(wanted)  # no copy: nothing processed was processed again
    finally:
        for w in workers:
            await w.stop()
    assert inputs > 0
    assert crashes(tmp_path / kafka.topic_prefix.rstrip(".")) == {}
