"""Busy versus effective and health as Prometheus series: device-wide, absent where unknown,
one series per kind and mark (stable label sets), none naming a pod."""

from __future__ import annotations

from contract.records import replace
from streams.present.views import device_row
from tests.unit.test_promseries import parsed
from tests.unit.test_views_effective import BLIND, SM, with_activity
from tests.unit.test_views_report import ALICE, BOB, TRAIN, ev

ROWS = [
    device_row(with_activity(ev("GPU-A", 10, 100, (TRAIN,)), 3.0, work="light"), None),
    device_row(
        with_activity(
            ev("GPU-S", 10, 60, (ALICE, BOB), sharing="time-slicing"),
            20.0,
            work="memory-bound",
            marks=("hot", "pcie-replays"),
        ),
        None,
    ),
    # no profiling field; only the temperatures exported: the other marks are not judged
    device_row(with_activity(ev("GPU-N", 10, 97, (TRAIN,)), None, watched=("hot",)), None),
    device_row(replace(ev("GPU-U", 10, None, (TRAIN,)), telemetry=BLIND), None),  # no reading
    device_row(
        replace(with_activity(ev("GPU-Z", 10, 50, (TRAIN,)), 40.0, marks=("hot",)), origin="stale"),
        None,
    ),
]
SERIES = parsed(ROWS)


def by_device(name: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for labels, value in SERIES[name]:
        out.setdefault(labels["device_uuid"], []).append((labels, value))
    return out


def test_effective_ratio_is_the_device_s_and_absent_where_unknown() -> None:
    eff = by_device("gpuattr_device_effective_ratio")
    assert set(eff) == {"GPU-A", "GPU-S"}  # unknown (no field, no reading) and stale: absent
    ((labels, value),) = eff["GPU-A"]
    assert labels == {"node": "n1", "device_uuid": "GPU-A", "scope": "device", "source": SM}
    assert value == 0.03
    ((_, shared),) = eff["GPU-S"]
    assert shared == 0.2  # one device-wide figure for the two tenants, no per-pod split
    busy = {d: v for d, ((_, v),) in by_device("gpuattr_device_utilization_ratio").items()}
    assert busy["GPU-N"] == 0.97  # busy is known where effective is not: never copied over


def test_work_and_health_one_series_per_kind_and_mark() -> None:
    work = by_device("gpuattr_device_work")
    assert set(work) == {"GPU-A", "GPU-S", "GPU-N"}  # a device without a reading has none
    for device, samples in work.items():
        assert sorted(lab["work"] for lab, _ in samples) == sorted(
            ["tensor", "memory-bound", "compute", "light", "unknown"]
        )
        assert sum(v for _, v in samples) == 1.0, device
    current = {d: next(lab["work"] for lab, v in s if v == 1.0) for d, s in work.items()}
    assert current == {"GPU-A": "light", "GPU-S": "memory-bound", "GPU-N": "unknown"}
    health = by_device("gpuattr_device_health")
    assert set(health) == {"GPU-A", "GPU-S", "GPU-N"}
    marks = {d: {lab["mark"] for lab, v in s if v == 1.0} for d, s in health.items()}
    assert marks == {"GPU-A": set(), "GPU-S": {"hot", "pcie-replays"}, "GPU-N": set()}
    assert {d: len(s) for d, s in health.items()} == {"GPU-A": 4, "GPU-S": 4, "GPU-N": 1}
    assert [lab["mark"] for lab, _ in health["GPU-N"]] == ["hot"]  # unknown marks: no series, no 0


def test_no_new_series_names_a_pod() -> None:
    for name in ("gpuattr_device_effective_ratio", "gpuattr_device_work", "gpuattr_device_health"):
        for labels, _ in SERIES[name]:
            assert not {"pod", "namespace", "pod_uid", "container"} & set(labels), name
