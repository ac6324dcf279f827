"""dcgm-exporter's per-pod rows (``--kubernetes-virtual-gpus`` with per-process values): the
device row stays the device-wide figure, per-pod rows become per-pod readings, a pod's replica
copies count once, MIG instances carry memory only, and rows that cannot be credited are
rejected with their reason."""

from __future__ import annotations

import math

import pytest

from agents.dcgm.collect import DcgmCollector
from agents.dcgm.perpod import (
    BAD_POD_UID,
    COPIES_DISAGREE,
    NEGATIVE,
    NO_POD_UID,
    UNMAPPED,
)
from agents.dcgm.translate import PerPodRows, parse_exposition
from agents.types import AgentRecord
from contract.inputs import DcgmSample, DcgmScrape, PodUsage
from tests.helpers import BodySession

TS = 1_700_000_000_000
GPU = "GPU-5f2c9d3e-1a7b-4c6d-8e9f-0a1b2c3d4e5f"
UID_A = "6b1e9a4c-2d3f-4e5a-8b7c-9d0e1f2a3b4c"
UID_B = "0c9d8e7f-6a5b-4c3d-9e2f-1a0b9c8d7e6f"
UID_IDLE = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
IDENTITY = (
    f'gpu="0",UUID="{GPU}",pci_bus_id="00000000:3B:00.0",device="nvidia0",'
    'modelName="NVIDIA A100-SXM4-40GB",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"'
)


def pod(ns: str, name: str, uid: str, vgpu: str, container: str = "main") -> str:
    return f'container="{container}",namespace="{ns}",pod="{name}",pod_uid="{uid}",vgpu="{vgpu}"'


def family(name: str, kind: str, rows: list[tuple[str, float | str]]) -> str:
    lines = [f"# HELP {name} {name}.", f"# TYPE {name} {kind}"]
    for labels, value in rows:
        lines.append(f"{name}{{{IDENTITY}{',' + labels if labels else ''}}} {value}")
    return "\n".join(lines) + "\n"


def page(
    util: list[tuple[str, float | str]],
    fb: list[tuple[str, float | str]],
    temp: list[tuple[str, float | str]] | None = None,
) -> str:
    """A page as the exporter prints it in that mode: the per-process families with the device
    row first, every other family as identical per-pod copies."""
    return (
        family("DCGM_FI_DEV_GPU_UTIL", "gauge", util)
        + family("DCGM_FI_DEV_FB_USED", "gauge", fb)
        + family("DCGM_FI_DEV_GPU_TEMP", "gauge", temp or [])
    )


A0, A1 = pod("team-a", "train-0", UID_A, "0"), pod("team-a", "train-0", UID_A, "1")
B2 = pod("team-b", "infer-0", UID_B, "2")
IDLE3 = pod("team-c", "notebook-0", UID_IDLE, "3", container="jupyter")


def parse(text: str, per_pod: PerPodRows = "auto") -> tuple[DcgmSample, list[str]]:
    result = parse_exposition(text, node="node-1", ts_ms=TS, per_pod=per_pod)
    (sample,) = result.samples
    return sample, [r.reason for r in result.rejected]


def test_device_row_is_the_device_figure_and_per_pod_rows_are_readings() -> None:
    text = page(
        util=[("", 83), (A0, 41), (A1, 41), (B2, 41), (IDLE3, 0)],
        fb=[("", 30000), (A0, 12000), (A1, 12000), (B2, 12000), (IDLE3, 5000)],
        temp=[(A0, 61), (A1, 61), (B2, 61), (IDLE3, 61)],
    )
    sample, rejected = parse(text)
    assert rejected == []
    assert sample.util_pct == 83  # the device's own row, not any pod's nor their sum
    assert sample.fb_used_mib == 30000
    assert sample.temp_c == 61
    assert sample.exporter_split_fields == ()
    assert sample.usage is not None
    assert sample.usage.source == "exporter"
    assert sample.usage.pods == (
        PodUsage(UID_B, "team-b", "infer-0", "main", 12000, 41, copies=1),
        PodUsage(UID_A, "team-a", "train-0", "main", 12000, 41, copies=2),
        PodUsage(UID_IDLE, "team-c", "notebook-0", "jupyter", 5000, 0, copies=1),
    )  # by pod UID
    # two pods with equal readings stay two pods; the two-replica pod is one reading
    assert sum(p.fb_used_mib or 0 for p in sample.usage.pods) == 29000
    # the pods the exporter listed are still its claims (checked by the worker)
    assert {c.pod for c in sample.exporter_claims} == {"train-0", "infer-0", "notebook-0"}


def test_a_pod_without_process_reads_zero_not_missing() -> None:
    sample, _ = parse(page(util=[("", 0), (IDLE3, 0)], fb=[("", 0), (IDLE3, 0)]))
    assert sample.usage is not None
    (only,) = sample.usage.pods
    assert (only.fb_used_mib, only.sm_util_pct) == (0, 0)


def test_mig_instance_carries_memory_only() -> None:
    mig = 'GPU_I_PROFILE="3g.20gb",GPU_I_ID="2"'
    text = page(
        util=[(mig, 0), (f"{mig},{A0}", 0)],
        fb=[(mig, 9000), (f"{mig},{A0}", 8800)],
    )
    sample, rejected = parse(text)
    assert rejected == []
    assert sample.mig_instance_id == 2
    assert sample.usage is not None
    (only,) = sample.usage.pods
    assert only.fb_used_mib == 8800
    assert only.sm_util_pct is None  # NVML samples no per-process utilisation on MIG


def test_identical_copies_without_device_row_are_the_older_copy_mode() -> None:
    text = page(util=[(A0, 55), (B2, 55)], fb=[(A0, 100), (B2, 100)])
    sample, rejected = parse(text)
    assert rejected == []
    assert sample.usage is None
    assert sample.util_pct == 55
    assert sample.fb_used_mib == 100


def test_settings_force_either_reading() -> None:
    per_pod = page(util=[("", 70), (A0, 30), (B2, 40)], fb=[("", 9), (A0, 4), (B2, 5)])
    forced_off, _ = parse(per_pod, per_pod="off")
    assert forced_off.usage is None
    assert forced_off.util_pct is None
    assert forced_off.exporter_split_fields == (
        "fb_used_mib",
        "util_pct",
    )
    copies = page(util=[(A0, 30), (B2, 40)], fb=[(A0, 4), (B2, 5)])
    forced_on, _ = parse(copies, per_pod="on")
    assert forced_on.usage is not None
    assert [p.sm_util_pct for p in forced_on.usage.pods] == [40, 30]
    assert forced_on.util_pct is None  # no device row: no device-wide figure is invented
    auto, _ = parse(copies)
    assert auto.usage is None
    assert auto.util_pct is None


@pytest.mark.parametrize(
    ("labels", "value", "reason"),
    [
        ('container="main",namespace="team-x",pod="x-0",vgpu="0"', 5, NO_POD_UID),
        (pod("team-x", "x-0", "not-a-uid", "0"), 5, BAD_POD_UID),
        (pod("team-x", "x-0", "../../etc/passwd", "0"), 5, BAD_POD_UID),
        (pod("team-x", "x-0", UID_B, "0"), -3, NEGATIVE),
    ],
)
def test_rows_that_cannot_be_credited_are_rejected(labels: str, value: float, reason: str) -> None:
    text = page(util=[("", 20), (A0, 20), (labels, value)], fb=[("", 1), (A0, 1)])
    sample, rejected = parse(text)
    assert rejected == [reason]
    assert sample.util_pct == 20
    assert sample.usage is not None
    assert [p.pod_uid for p in sample.usage.pods] == [UID_A]


def test_nan_per_pod_row_is_rejected_and_reads_as_no_reading() -> None:
    text = page(util=[("", 20), (A0, "NaN")], fb=[("", 1), (A0, 1)])
    sample, rejected = parse(text)
    assert len(rejected) == 1
    assert "NaN" in rejected[0]
    assert sample.usage is not None
    (only,) = sample.usage.pods
    assert only.sm_util_pct is None
    assert only.fb_used_mib == 1
    assert not math.isnan(sample.util_pct or 0)


def test_copies_of_one_pod_that_disagree_give_no_reading() -> None:
    text = page(util=[("", 20), (A0, 10), (A1, 12)], fb=[("", 1), (A0, 1), (A1, 1)])
    sample, rejected = parse(text)
    assert rejected == [COPIES_DISAGREE, COPIES_DISAGREE]
    assert sample.usage is not None
    (only,) = sample.usage.pods
    assert only.sm_util_pct is None
    assert only.fb_used_mib == 1
    assert only.copies == 2


def test_exporter_switching_modes_between_scrapes_is_read_per_scrape() -> None:
    per_pod = page(util=[("", 70), (A0, 30), (B2, 40)], fb=[("", 9), (A0, 4), (B2, 5)])
    copies = page(util=[(A0, 70), (B2, 70)], fb=[(A0, 9), (B2, 9)])
    first, _ = parse(per_pod)
    second, _ = parse(copies)
    assert first.usage is not None
    assert first.util_pct == 70
    assert second.usage is None
    assert second.util_pct == 70


def test_uid_in_upper_case_is_read_in_the_api_servers_spelling() -> None:
    text = page(util=[("", 20), (pod("t", "p", UID_A.upper(), "0"), 20)], fb=[("", 1)])
    sample, rejected = parse(text)
    assert rejected == []
    assert sample.usage is not None
    assert sample.usage.pods[0].pod_uid == UID_A


def test_all_zero_per_pod_rows_on_a_working_device_are_no_measurement() -> None:
    """A default install with only KUBERNETES_VIRTUAL_GPUS set: no hostPID, so the exporter maps
    no process and every per-pod row reads 0 (with or without a pod_uid)."""
    text = page(util=[("", 64), (A0, 0), (B2, 0)], fb=[("", 20000), (A0, 0), (B2, 0)])
    sample, rejected = parse(text)
    assert rejected == [UNMAPPED] * 4
    assert sample.util_pct == 64
    assert sample.fb_used_mib == 20000
    assert sample.usage is not None
    assert sample.usage.pods == ()
    assert sample.usage.unread == UNMAPPED


def test_all_zero_per_pod_rows_on_an_idle_device_are_read() -> None:
    sample, rejected = parse(page(util=[("", 0), (A0, 0)], fb=[("", 0), (A0, 0)]))
    assert rejected == []
    assert sample.usage is not None
    assert len(sample.usage.pods) == 1


@pytest.mark.parametrize(("setting", "read"), [("auto", True), ("off", False)])
async def test_the_agents_setting_reaches_the_reading(setting: PerPodRows, read: bool) -> None:
    published: list[AgentRecord] = []

    async def emit(record: AgentRecord) -> None:
        published.append(record)

    collector = DcgmCollector(
        node="node-1",
        url="http://exporter.test/metrics",
        interval_s=5,
        timeout_s=1,
        emit=emit,
        now_ms=lambda: TS,
        per_pod=setting,
    )
    text = page(util=[("", 70), (A0, 30), (B2, 40)], fb=[("", 9), (A0, 4), (B2, 5)])
    assert await collector.scrape_once(BodySession(text.encode())) == 1  # type: ignore[arg-type]
    (scrape,) = published
    assert isinstance(scrape, DcgmScrape)
    (sample,) = scrape.samples
    assert (sample.usage is not None) is read
