"""Busy is not effective, and a sick GPU has an owner — on the real local Kafka.

A worker process reads a node's records from node-events as an agent publishes them (keyed by
node; dcgm.scrape with the counters' increases filled in) and writes attribution events and
alerts:

- G0, busy 100 % (GPU_UTIL) at 3 % SM active, shared by five MPS tenants: ``low-efficiency``
  fires naming all five (device-wide figures); ``idle`` never fires;
- G1, its trainer's GPU at 92 °C: ``thermal`` fires naming the trainer; the GPU is handed over
  to a new pod, and the alert is resolved — never carried to the new holder;
- G2, its uncorrectable remapped rows rising: ``memory-fault`` fires naming its holder then;
- the exporter restarts (every counter falls, ``since_last.resets`` set): nothing fires.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from contract.inputs import (
    DcgmSample,
    DcgmScrape,
    DeviceAssignment,
    NodeRecord,
    OwnerRef,
    PodRecord,
    PodResourcesDiff,
    SinceLast,
)
from contract.outputs import Alert, AttributionEvent
from gpuattr.procs import Child, settings_env
from infra.admin import create_topics
from infra.settings import KafkaSettings
from infra.topics import topic_specs
from tests.helpers import wait_for
from tests.integration.pipeline import collect
from tests.integration.test_node_status_kafka import publish
from tests.unit.test_spine import G0, G1, G2, NODE, S_, T0, TENANTS, TRAINER, setup, uid

pytestmark = pytest.mark.integration
PARTITIONS = 3
EVAL = DeviceAssignment("ml", "eval-0", "main", "nvidia.com/gpu", G2)
NEXT = DeviceAssignment("ml", "next-0", "main", "nvidia.com/gpu", G1)
HANDOVER_S = 60
ROWS_RISE_S = 40
RESTART_S = 80
LAST_S = 120
RESETS = ("pcie_replays", "uncorrectable_remapped_rows", "ecc_dbe_volatile")


def pods() -> list[object]:
    return [
        PodRecord(NODE, T0, uid(a.pod), a.namespace, a.pod, T0, workload=OwnerRef("Job", a.pod))
        for a in (EVAL, NEXT)
    ]


def sample(t: int, gpu: str, index: int, **fields: object) -> DcgmSample:
    return DcgmSample(NODE, T0 + t * S_, gpu, index, "H100", NODE, **fields)  # type: ignore[arg-type]


def since(t: int, rows: float = 0.0) -> SinceLast:
    if t == RESTART_S:  # every counter fell: the increase over the interval is not known
        return SinceLast(5 * S_, resets=RESETS)
    return SinceLast(
        5 * S_, pcie_replays=0.0, ecc_dbe_volatile=0.0, uncorrectable_remapped_rows=rows
    )


def scrape(t: int) -> DcgmScrape:
    restarted = t >= RESTART_S
    rows_total = 0.0 if restarted else (3.0 if t >= ROWS_RISE_S else 2.0)
    return DcgmScrape(
        NODE,
        T0 + t * S_,
        (
            sample(t, G0, 0, util_pct=100.0, sm_active=0.03, temp_c=60.0, since_last=since(t)),
            sample(
                t,
                G1,
                1,
                util_pct=90.0,
                sm_active=0.7,
                temp_c=92.0 if t < HANDOVER_S else 60.0,
                since_last=since(t),
            ),
            sample(
                t,
                G2,
                2,
                util_pct=70.0,
                sm_active=0.6,
                temp_c=60.0,
                uncorrectable_remapped_rows=rows_total,
                since_last=since(t, rows=1.0 if t == ROWS_RISE_S else 0.0),
            ),
        ),
        "http://10.1.2.3:9400/metrics",
        "gpu-operator/nvidia-dcgm-exporter-abcde",
    )


def inputs() -> list[object]:
    out: list[object] = [*setup(), *pods(), PodResourcesDiff(NODE, T0, (EVAL,), ())]
    for t in range(5, LAST_S + 1, 5):
        if t == HANDOVER_S:
            out.append(PodResourcesDiff(NODE, T0 + t * S_, (NEXT,), (TRAINER,)))
        out.append(scrape(t))
    out.append(NodeRecord(NODE, T0 + (LAST_S + 5) * S_, (), deleted=True))  # resolves the rest
    return out


def unique(records: list[object]) -> list[Alert]:
    """Alerts once per idempotency key (delivery is at least once), in arrival order."""
    seen: dict[tuple[str, str], Alert] = {}
    for a in records:
        if isinstance(a, Alert):
            seen.setdefault((a.id, a.status), a)
    return list(seen.values())


async def test_low_efficiency_and_health_alerts_name_the_holders_at_the_time(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka = KafkaSettings(
        bootstrap=kafka_bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:10]}.", partitions=PARTITIONS
    )
    app_id = kafka.topic_prefix + "worker"
    await create_topics(kafka_bootstrap, topic_specs(kafka, app_id))
    env = {
        **settings_env(
            KAFKA_BOOTSTRAP=kafka.bootstrap,
            KAFKA_TOPIC_PREFIX=kafka.topic_prefix,
            KAFKA_PARTITIONS=PARTITIONS,
            WORKER_APP_ID=app_id,
            WORKER_DATA_DIR=tmp_path / "worker",
            WORKER_WEB_ENABLED="false",
        ),
        "GPUATTR_ALERTS_IDLE_WINDOW_S": "20",
        "GPUATTR_ALERTS_LOW_EFF_WINDOW_S": "20",
        "GPUATTR_ALERTS_THERMAL_WINDOW_S": "20",
        "GPUATTR_ALERTS_HEALTH_QUIET_S": "600",
        "GPUATTR_ALERTS_COOLDOWN_S": "0",
    }
    worker = Child("worker", ["worker"], env, tmp_path / "worker.log")
    await worker.start()
    try:
        async with (
            collect(kafka, "attribution") as attribution,
            collect(kafka, "alerts") as alerts,
        ):
            await publish(kafka, inputs())

            def resolved_by_gone() -> bool:
                gone = [a for a in unique(alerts.records) if "the device is gone" in a.summary]
                return {a.kind for a in gone} >= {"low-efficiency", "memory-fault"}

            await wait_for(resolved_by_gone, 90.0, what=lambda: worker.tail(40))
            sent = unique(alerts.records)
            for a in sent:
                print(
                    f"{a.kind} {a.status} {a.device_uuid} at +{(a.ts_ms - T0) // S_}s: {a.summary}"
                )
            by = {(a.kind, a.status, a.device_uuid): a for a in sent}
            assert len(by) == len(sent)  # one episode per kind and device

            # G0: busy but ineffective, every tenant named, never idle
            low = by["low-efficiency", "firing", G0]
            assert {h.pod for h in low.holders} == {a.pod for a in TENANTS}
            assert low.device_wide
            assert "5 tenants" in low.summary
            assert (low.figures.util_pct, low.figures.effective_pct) == (100.0, 3.0)
            assert low.figures.effective_source == "DCGM_FI_PROF_SM_ACTIVE"
            assert low.ts_ms - low.started_ms >= 20 * S_
            assert not [a for a in sent if a.kind == "idle"]

            # G1: thermal names the trainer; the hand-over resolves it, the new pod gets nothing
            hot = by["thermal", "firing", G1]
            assert [(h.pod, h.uid) for h in hot.holders] == [("trainer-0", uid("trainer-0"))]
            assert hot.figures.gpu_temp_c == 92.0
            cooled = by["thermal", "resolved", G1]
            assert cooled.id == hot.id
            assert cooled.ts_ms == T0 + HANDOVER_S * S_
            assert cooled.holders == ()
            assert "holders changed" in cooled.summary
            assert "next-0" not in cooled.summary
            assert not [a for a in sent if any(h.pod == "next-0" for h in a.holders)]

            # G2: rising remapped rows, on the right device, naming its holder then
            fault = by["memory-fault", "firing", G2]
            assert fault.ts_ms == fault.started_ms == T0 + ROWS_RISE_S * S_
            assert [h.pod for h in fault.holders] == ["eval-0"]
            assert fault.figures.uncorrectable_remapped_rows == 3.0
            assert {a.device_uuid for a in sent if a.kind == "memory-fault"} == {G2}

            # the exporter restart raised nothing: no alert fired from then on
            assert not [a for a in sent if a.status == "firing" and a.ts_ms >= T0 + RESTART_S * S_]

            # the events carry activity and health, device-wide
            def restarted_events() -> list[AttributionEvent]:
                return [
                    e
                    for e in attribution.records
                    if isinstance(e, AttributionEvent)
                    and e.origin == "sample"
                    and e.ts_ms == T0 + RESTART_S * S_
                ]

            await wait_for(lambda: len(restarted_events()) >= 3, 30.0)
            for e in restarted_events():
                assert set(e.health.counter_resets) == set(RESETS)
                assert "memory-fault" not in e.health.marks
            g0 = next(e for e in restarted_events() if e.device_uuid == G0)
            assert (g0.activity.busy_pct, g0.activity.effective_pct) == (100.0, 3.0)
            assert g0.activity.work == "light"
    finally:
        await worker.stop()
