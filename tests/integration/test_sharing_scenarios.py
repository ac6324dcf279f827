"""Each sharing scenario end to end on the real local Kafka: honest events, by construction."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from contract import codec
from contract.outputs import AttributionEvent
from sim.cluster import Cluster
from sim.scenario import gpu_uuid, load, mig_uuid
from tests.helpers import wait_for
from tests.integration.pipeline import Collected, collect, pipeline

pytestmark = pytest.mark.integration

USAGE_WORDS = ("util", "usage", "fb_", "power", "temp")


def events_since(events: Collected, since_ms: int) -> list[AttributionEvent]:
    return [e for e in events.records if isinstance(e, AttributionEvent) and e.ts_ms >= since_ms]


async def run_scenario(
    name: str, tmp_path: Path, bootstrap: str, per_device: int = 4, t: float = 20.0
) -> tuple[list[AttributionEvent], set[str]]:
    scenario = load(name)
    async with pipeline(bootstrap, scenario, tmp_path) as p, collect(p.kafka, "attribution") as ev:
        p.clock.offset_s = t
        devices = set()
        cluster = Cluster(scenario, lambda: t)
        for node in scenario.nodes:
            for row in cluster.exporter_rows(node.name, 0):
                devices.add(
                    mig_uuid(node.name, row.gpu, row.mig_instance_id)
                    if row.mig_instance_id is not None
                    else row.uuid
                )

        def warmed_up() -> bool:  # agents and worker running, the node's view complete
            ready = {
                e.device_uuid
                for e in events_since(ev, 0)
                if e.state != "unknown" and e.sharing != "unknown"
            }
            return devices <= ready

        await wait_for(warmed_up, timeout_s=90, what=lambda: f"warm-up\n{p.logs()}")
        since = int(time.time() * 1000) + 1500

        def enough() -> bool:
            seen = [e.device_uuid for e in events_since(ev, since)]
            return all(seen.count(d) >= per_device for d in devices)

        await wait_for(
            enough, timeout_s=60, what=lambda: f"{per_device} events per device\n{p.logs()}"
        )
        return events_since(ev, since), devices


async def test_mps_lab_names_all_four_tenants_every_time(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events, _ = await run_scenario("mps-lab", tmp_path, kafka_bootstrap, per_device=8)
    scenario = load("mps-lab")
    uids = {p.name: p.uid for p in scenario.pods}
    claimed = set()
    for ev in events:
        assert ev.sharing == "mps"
        assert (ev.state, ev.tenant_count, ev.replicas, ev.credit) == (
            "shared",
            4,
            4,
            "device-wide",
        )
        assert {h.pod: h.uid for h in ev.holders} == uids  # 100%: all four, with their UIDs
        assert all(h.allocation_share == 0.25 for h in ev.holders)
        assert ev.usage.util_pct == 8  # the one device-wide figure the hardware measured
        assert not ev.exporter.trusted
        assert "4 tenants share this GPU" in ev.summary
        for holder in orjson.loads(codec.encode(ev))["holders"]:  # no per-pod usage, anywhere
            assert not [k for k in holder if k.startswith(USAGE_WORDS)]
        claimed.update(c.pod for c in ev.exporter.claims)
    assert len(claimed) >= 1  # the exporter did stamp tenants: we recorded and distrusted them


async def test_time_slicing_counts_slots_and_never_adds_copies(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events, _ = await run_scenario("time-slicing", tmp_path, kafka_bootstrap)
    for ev in events:
        assert (ev.sharing, ev.replicas, ev.tenant_count) == ("time-slicing", 8, 3)
        slots = {h.pod: (h.slots, h.allocation_share) for h in ev.holders}
        assert slots["gpu-tests-28847311-9vbcz"] == (2, 0.25)  # two replicas, listed once
        assert slots["notebook-alice-0"] == (1, 0.125)
        assert ev.usage.util_pct == 47  # one device-wide value, not 3 copies added up
        assert len(ev.exporter.claims) == 3
        assert "copies" in ev.exporter.reason
        assert not ev.exporter.trusted


async def test_mig_instances_are_devices_of_their_own(kafka_bootstrap: str, tmp_path: Path) -> None:
    events, devices = await run_scenario("mig", tmp_path, kafka_bootstrap)
    scenario = load("mig")
    parent = gpu_uuid("mig-node", 0)
    owner = {mig_uuid("mig-node", 0, int(p.slots[0].split("/gi")[1])): p for p in scenario.pods}
    assert len(devices) == 7
    for ev in events:
        assert ev.gpu_uuid == parent
        assert ev.mig is not None
        assert ev.mig.profile == "1g.10gb"
        assert ev.usage.util_source == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
        pod = owner.get(ev.device_uuid)
        if pod is None:
            assert ev.state == "unallocated"
            continue
        assert [h.pod for h in ev.holders] == [pod.name]  # credited only with its own instance
        assert (ev.state, ev.sharing, ev.credit) == ("exclusive", "mig", "holder")
        assert ev.usage.util_pct == pytest.approx(pod.util_pct)


async def test_mixed_covers_every_mode_and_all_eight_gpus(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events, _ = await run_scenario("mixed", tmp_path, kafka_bootstrap, per_device=2)
    assert len({(e.node, e.gpu_uuid) for e in events}) == 8
    assert {e.sharing for e in events} >= {"none", "mig", "time-slicing", "mps"}
    renamed = [e for e in events if e.node == "gpu-b" and e.holders]
    assert renamed
    for ev in renamed:  # the exporter ignores nvidia.com/gpu.shared: we do not
        assert ev.holders[0].resource == "nvidia.com/gpu.shared"
        assert ev.exporter.claims == ()
        assert not ev.exporter.trusted


async def test_mps_on_a_subset_leaves_the_whole_gpu_exclusive(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events, devices = await run_scenario("mps-subset", tmp_path, kafka_bootstrap)
    scenario = load("mps-subset")
    uids = {p.name: p.uid for p in scenario.pods}
    shared, whole = gpu_uuid("h100-mps", 0), gpu_uuid("h100-mps", 1)
    assert devices == {shared, whole}
    for ev in (e for e in events if e.device_uuid == whole):  # 100 % of them
        assert (ev.state, ev.sharing, ev.replicas, ev.credit) == (
            "exclusive",
            "none",
            None,
            "holder",
        )
        assert [(h.pod, h.uid, h.allocation_share) for h in ev.holders] == [
            ("train-mixtral-0", uids["train-mixtral-0"], 1.0)
        ]
        assert ev.usage.util_pct == 88
        assert ev.exporter.trusted
        assert any("hands out this device whole" in n for n in ev.notes)
    tenants = {p.name for p in scenario.pods if p.slots[0].startswith("0::")}
    for ev in (e for e in events if e.device_uuid == shared):
        assert (ev.state, ev.sharing, ev.replicas, ev.tenant_count) == ("shared", "mps", 8, 5)
        assert {h.pod: h.uid for h in ev.holders} == {t: uids[t] for t in tenants}
        assert {h.pod: h.allocation_share for h in ev.holders}["notebook-dan-0"] == 0.25
        assert ev.credit == "device-wide"
        assert "5 tenants share this GPU" in ev.summary


async def test_time_slicing_on_a_subset_with_the_renamed_resource(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events, devices = await run_scenario("time-slicing-subset", tmp_path, kafka_bootstrap)
    whole = gpu_uuid("a10-ts", 2)
    assert len(devices) == 3
    for ev in events:
        if ev.device_uuid == whole:
            assert (ev.state, ev.sharing, ev.replicas) == ("exclusive", "none", None)
            assert [(h.pod, h.resource, h.allocation_share) for h in ev.holders] == [
                ("finetune-bert-6f9c7d8b5-q3wzr", "nvidia.com/gpu", 1.0)
            ]
            assert ev.usage.util_pct == 76
            assert ev.exporter.trusted  # the exporter looks up nvidia.com/gpu: right here
        else:
            assert (ev.state, ev.sharing, ev.replicas) == ("shared", "time-slicing", 4)
            assert {h.resource for h in ev.holders} == {"nvidia.com/gpu.shared"}
            assert (ev.exporter.claims, ev.exporter.trusted) == ((), False)  # renamed: no pod
