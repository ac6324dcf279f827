"""A worker SIGKILLed in the middle of an idle window, restarted: the alert fires exactly once,
at the right event time — the pending window lives in a changelog-backed table."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.outputs import Alert, AttributionEvent
from sim.scenario import gpu_uuid, load
from tests.helpers import wait_for
from tests.integration.pipeline import collect, pipeline

pytestmark = pytest.mark.integration

WINDOW_S = 8
NOTEBOOK_GPU = gpu_uuid("gpu-a", 2)  # research/notebook-0, idle (0 %) from the start


async def test_sigkill_mid_window_fires_once_at_the_right_time(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    env = {"GPUATTR_ALERTS_IDLE_WINDOW_S": str(WINDOW_S), "GPUATTR_ALERTS_COOLDOWN_S": "3600"}
    async with (
        pipeline(kafka_bootstrap, load("exclusive"), tmp_path, worker_env=env) as p,
        collect(p.kafka, "attribution") as events,
        collect(p.kafka, "alerts") as alerts,
    ):
        p.clock.offset_s = 10  # notebook held and idle; scenario time stays put

        def notebook() -> list[AttributionEvent]:
            return [
                e
                for e in events.records
                if isinstance(e, AttributionEvent)
                and e.device_uuid == NOTEBOOK_GPU
                and e.holders
                and e.origin == "sample"  # a reading: what idle windows run on
            ]

        def halfway() -> bool:
            idle = notebook()
            return bool(idle) and idle[-1].ts_ms - idle[0].ts_ms >= WINDOW_S * 1000 / 2

        await wait_for(halfway, timeout_s=90, what=lambda: f"half a window\n{p.logs()}")
        assert not [a for a in alerts.records if isinstance(a, Alert)]
        first_idle = notebook()[0].ts_ms
        p.workers[0].kill()  # SIGKILL: no shutdown, no commit, no flush
        await p.workers[0].stop()
        restarted = p.worker_child(1)
        p.workers.append(restarted)
        await restarted.start()

        def fired() -> list[Alert]:
            return [
                a for a in alerts.records if isinstance(a, Alert) and a.device_uuid == NOTEBOOK_GPU
            ]

        await wait_for(fired, timeout_s=90, what=lambda: f"the idle alert\n{p.logs()}")
        # keep watching a while longer (in event time) for a duplicate
        fire_ts = fired()[0].ts_ms
        await wait_for(
            lambda: notebook()[-1].ts_ms >= fire_ts + 3000,
            timeout_s=60,
            what="three more seconds of samples",
        )
    sent = fired()
    assert len({a.id for a in sent}) == 1, sent
    assert {a.status for a in sent} == {"firing"}
    alert = sent[0]
    assert alert.started_ms == first_idle  # the window began before the kill, and survived it
    assert alert.ts_ms - alert.started_ms >= WINDOW_S * 1000
    # it fired at the first sample at or past the window's end, not later
    samples = sorted({e.ts_ms for e in notebook()})
    assert alert.ts_ms == min(ts for ts in samples if ts - first_idle >= WINDOW_S * 1000)
    assert [h.pod for h in alert.holders] == ["notebook-0"]
