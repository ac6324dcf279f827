"""Per-process readings joined with a shared device's holders: a reading is credited only to
the pod of its UID that holds the device at the reading's time; every other reading is listed
and flagged, never credited; the device-wide figure stays the device's."""

from __future__ import annotations

from contract.inputs import DcgmSample, DeviceUsage, ExporterClaim, PodUsage, ProcessUsage
from contract.inputs import DeviceAssignment as A
from contract.outputs import Measured, UsageUncredited
from contract.records import replace
from gpuattr.report import accumulate
from streams.core.devices.attribution import DeviceContext, PodIdentity, attribute
from streams.core.devices.sharing import sharing_from_labels

G = "GPU-5f2c9d3e-1a7b-4c6d-8e9f-0a1b2c3d4e5f"
UIDS = {
    "train": "6b1e9a4c-2d3f-4e5a-8b7c-9d0e1f2a3b4c",
    "infer": "0c9d8e7f-6a5b-4c3d-9e2f-1a0b9c8d7e6f",
    "notebook": "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d",
}
STRANGER = "ffffffff-1111-4222-8333-444444444444"
TS = sharing_from_labels(
    {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}
)


def resolved(ns: str, pod: str, ts: int) -> PodIdentity:
    return PodIdentity(UIDS[pod], "resolved")


CTX = DeviceContext(node_sharing=TS, resolve_pod=resolved)
ROWS = (
    A("ml", "train", "main", "nvidia.com/gpu", f"{G}::0"),
    A("ml", "train", "main", "nvidia.com/gpu", f"{G}::1"),
    A("web", "infer", "server", "nvidia.com/gpu", f"{G}::2"),
    A("lab", "notebook", "jupyter", "nvidia.com/gpu", f"{G}::3"),
)


def reading(pod: str, fb: float, sm: float | None, ns: str = "") -> PodUsage:
    return PodUsage(UIDS.get(pod, pod), ns, pod, "main", fb, sm)


def sample(usage: DeviceUsage | None, mig: int | None = None) -> DcgmSample:
    return DcgmSample(
        node="n1",
        ts_ms=1000,
        uuid=G,
        gpu_index=0,
        model="A100",
        hostname="n1",
        util_pct=83.0,
        fb_used_mib=30000.0,
        mig_instance_id=mig,
        exporter_claims=tuple(ExporterClaim(a.namespace, a.pod, a.container) for a in ROWS),
        usage=usage,
    )


def measured_of(ev: object) -> dict[str, Measured | None]:
    return {p.pod: p.measured for p in ev.pods}  # type: ignore[attr-defined]


def test_each_holder_carries_its_own_measurement_and_the_device_figure_stays() -> None:
    usage = DeviceUsage(
        "exporter",
        pods=(
            reading("train", 12000, 41),
            reading("infer", 12000, 41),  # equal readings: two pods, two credits
            reading("notebook", 5000, 0),  # idle, holding memory
        ),
    )
    ev, flags = attribute(sample(usage), ROWS, CTX)
    assert ev.state == "shared"
    assert ev.usage.util_pct == 83.0  # the device's own figure
    assert ev.usage.fb_used_mib == 30000.0
    assert measured_of(ev) == {
        "train": Measured("exporter", 12000, 41),
        "infer": Measured("exporter", 12000, 41),
        "notebook": Measured("exporter", 5000, 0),
    }
    # the allocation share is untouched: the two-replica pod holds 2/4, measured once
    assert {p.pod: p.share for p in ev.pods} == {"train": 0.5, "infer": 0.25, "notebook": 0.25}
    assert ev.per_pod is not None
    assert (ev.per_pod.credited, ev.per_pod.uncredited) == (3, ())
    assert ev.exporter.mode == "per-process"
    assert "own join" in ev.exporter.reason
    assert flags == ()


def test_a_reading_of_a_pod_that_holds_no_slot_is_flagged_never_credited() -> None:
    usage = DeviceUsage(
        "exporter", pods=(reading("train", 100, 5), reading(STRANGER, 900, 60, ns="other"))
    )
    ev, flags = attribute(sample(usage), ROWS, CTX)
    assert measured_of(ev)["train"] == Measured("exporter", 100, 5)
    assert measured_of(ev)["infer"] is None  # the exporter gave no row for it: not read
    assert ev.per_pod is not None
    (uncredited,) = ev.per_pod.uncredited
    assert (uncredited.reason, uncredited.pod_uid) == ("not-a-holder", STRANGER)
    (flag,) = flags
    assert isinstance(flag, UsageUncredited)
    assert flag.reading == uncredited
    assert {h.pod for h in flag.holders} == {"train", "infer", "notebook"}
    assert "holds no slot" in flag.summary


def test_same_name_other_uid_is_not_the_holder() -> None:
    """A pod recreated under the same name (a StatefulSet) is another pod: the UID decides."""
    usage = DeviceUsage("exporter", pods=(PodUsage(STRANGER, "ml", "train", "main", 100, 5),))
    ev, flags = attribute(sample(usage), ROWS, CTX)
    assert measured_of(ev)["train"] is None
    assert [f.reading.reason for f in flags if isinstance(f, UsageUncredited)] == ["not-a-holder"]


def test_holder_uid_not_known_yet_is_listed_not_flagged() -> None:
    ctx = DeviceContext(node_sharing=TS)  # no pod watch: no UID to check against
    usage = DeviceUsage("exporter", pods=(reading("train", 100, 5, ns="ml"),))
    ev, flags = attribute(sample(usage), ROWS, ctx)
    assert all(p.measured is None for p in ev.pods)
    assert ev.per_pod is not None
    assert [u.reason for u in ev.per_pod.uncredited] == ["holder-uid-unknown"]
    assert flags == ()


def test_nvml_lists_every_process_so_a_holder_without_one_uses_nothing() -> None:
    usage = DeviceUsage("nvml", pods=(reading("train", 7000, 55),))
    ev, flags = attribute(sample(usage), ROWS, CTX)
    assert measured_of(ev) == {
        "train": Measured("nvml", 7000, 55),
        "infer": Measured("nvml", 0.0, 0.0),
        "notebook": Measured("nvml", 0.0, 0.0),
    }
    assert flags == ()


def test_an_orphan_process_is_flagged_with_its_pid_and_no_zero_is_inferred() -> None:
    orphan = ProcessUsage(4242, container_id="9f" * 32, fb_used_mib=3000, sm_util_pct=0)
    usage = DeviceUsage("nvml", pods=(reading("train", 7000, 55),), orphans=(orphan,))
    ev, flags = attribute(sample(usage), ROWS, CTX)
    assert measured_of(ev)["infer"] is None  # the orphan might be its process: not read
    (flag,) = flags
    assert isinstance(flag, UsageUncredited)
    assert (flag.reading.reason, flag.reading.pid) == ("no-pod", 4242)
    assert "pid 4242" in flag.summary


def test_mig_instance_has_memory_only() -> None:
    usage = DeviceUsage("exporter", pods=(reading("train", 4000, 0),))
    ev, _ = attribute(sample(usage, mig=2), ROWS[:1], CTX)
    assert measured_of(ev)["train"] == Measured("exporter", 4000, None)


def test_unread_readings_credit_nobody_and_say_why() -> None:
    usage = DeviceUsage("exporter", unread="every per-pod row reads 0 while the device works")
    ev, flags = attribute(sample(usage), ROWS, CTX)
    assert all(p.measured is None for p in ev.pods)
    assert ev.per_pod is not None
    assert ev.per_pod.unread.startswith("every per-pod row")
    assert ev.usage.util_pct == 83.0
    assert flags == ()


def test_no_per_process_source_leaves_the_event_as_it_was() -> None:
    ev, _ = attribute(sample(None), ROWS, CTX)
    assert ev.per_pod is None
    assert all(p.measured is None for p in ev.pods)


def test_the_report_counts_measured_memory_hours_per_pod_and_nothing_where_unmeasured() -> None:
    usage = DeviceUsage("exporter", pods=(reading("train", 10240, 41), reading("infer", 2048, 10)))
    first, _ = attribute(sample(usage), ROWS, CTX)
    events = [replace(first, ts_ms=0), replace(first, ts_ms=3_600_000)]
    lines = {
        line.workload: line for line in accumulate(events, max_gap_s=7200, idle_threshold_pct=5)
    }
    assert lines["Pod/train"].memory_gib_hours == 10.0  # one hour at 10 GiB: its own processes
    assert lines["Pod/infer"].memory_gib_hours == 2.0
    assert lines["Pod/train"].memory_measured_held_gpu_hours == 0.5  # its allocation share
    assert lines["Pod/notebook"].memory_gib_hours is None  # not measured: never 0
    assert lines["Pod/notebook"].held_gpu_hours == 0.25


def test_an_exclusive_device_in_per_pod_mode_keeps_the_exporters_trust() -> None:
    """Its one pod's labels are right: the per-pod rows change nothing of the verdict there."""
    usage = DeviceUsage("exporter", pods=(reading("train", 100, 5),))
    claims = (ExporterClaim("ml", "train", "main"),)
    only = (A("ml", "train", "main", "nvidia.com/gpu", G),)
    ev, flags = attribute(replace(sample(usage), exporter_claims=claims), only, CTX)
    assert ev.state == "exclusive"
    assert (ev.exporter.trusted, ev.exporter.verdict) == (True, "trusted")
    assert ev.exporter.mode == "per-process"
    assert measured_of(ev)["train"] == Measured("exporter", 100, 5)
    assert flags == ()
