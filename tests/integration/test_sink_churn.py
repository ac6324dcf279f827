"""The sink under group churn on real Kafka: no alert lost, none dead-lettered.

One run of ``bench.sink_churn`` (its module doc tells how the window is forced): 2,000 alerts,
batches of 20, a second member joining and leaving in turn every 2 s while a batch is held in
delivery. ``python -m bench.sink_churn --runs 20`` is the acceptance run (docs/RELIABILITY.md).
Before the fix, each run lost about half the alerts (the keep-alive poll dropped what it
fetched after a rebalance, and later commits covered it).
"""

from __future__ import annotations

import pytest

from bench.sink_churn import churn_run

pytestmark = pytest.mark.integration


async def test_no_alert_is_lost_while_the_group_rebalances(kafka_bootstrap: str) -> None:
    figures = await churn_run(kafka_bootstrap, alerts=2000, batch_max=20, period_s=2.0)
    print(f"\nsink churn: {figures.line()}")
    assert figures.lost == 0
    assert figures.delivered_keys == figures.alerts  # every key at least once
    assert figures.dead_lettered == 0
    assert figures.joins >= 2
    assert figures.leaves >= 2  # every join and leave happened with a batch in delivery
