"""ResourceSlice device taints → ``DraDevice.taints``: a golden test from the NVIDIA driver's slice
as the API server returns it (``tests/fixtures/kube/resourceslice-taints.json``, plain JSON as
the custom-objects client hands it), and the taints the API would not have accepted."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from agents.kube import translate
from agents.kube.dra import slice_record
from contract import codec
from contract.inputs import DeviceTaint, ResourceSliceRecord

SLICE: dict[str, Any] = json.loads(
    (
        Path(__file__).resolve().parents[1] / "fixtures" / "kube" / "resourceslice-taints.json"
    ).read_text()
)
NODE = "gh200-dra"


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def refused() -> float:
    labels = {"what": "device_taint"}
    return REGISTRY.get_sample_value("gpuattr_agent_refused_values_total", labels) or 0.0


def taints_of(obj: dict[str, Any]) -> dict[str, tuple[DeviceTaint, ...]]:
    record = slice_record(obj, node=NODE, ts_ms=5)
    assert isinstance(record, ResourceSliceRecord)
    assert codec.decode(codec.encode(record)) == record  # valid on the wire
    return {d.name: d.taints for d in record.devices}


def test_slice_taints_golden(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(translate, "_logged_refusals", set())  # as if first seen here
    before = refused()
    assert taints_of(SLICE) == {
        "gpu-0": (  # sorted by key: not-ready before unreachable
            DeviceTaint("gpu.nvidia.com/not-ready", "NoSchedule", "", ms("2026-11-20T11:15:02")),
            DeviceTaint(
                "gpu.nvidia.com/unreachable", "NoExecute", "xid-79", ms("2026-11-20T11:15:02")
            ),
        ),
        "gpu-1": (  # PreferNoSchedule (a node taint's effect) and no effect: dropped
            DeviceTaint("gpu.nvidia.com/degraded", "NoSchedule", "", ms("2026-11-20T11:40:00")),
        ),
        "gpu-2": (),
    }
    assert refused() == before + 2
    said = [r.getMessage() for r in caplog.records if "taint" in r.getMessage()]
    assert any("'PreferNoSchedule'" in m and "gpu-1" in m for m in said)
    taints_of(SLICE)  # the slice again (every update resends it): counted, not logged again
    assert refused() == before + 4
    assert [r.getMessage() for r in caplog.records if "taint" in r.getMessage()] == said


def test_the_same_taints_in_another_order_are_the_same_record() -> None:
    shuffled = copy.deepcopy(SLICE)
    for device in shuffled["spec"]["devices"]:
        device.get("taints", []).reverse()
    assert taints_of(shuffled) == taints_of(SLICE)


def test_a_taint_removed_changes_the_record() -> None:
    cleared = copy.deepcopy(SLICE)
    del cleared["spec"]["devices"][0]["taints"]
    assert taints_of(cleared)["gpu-0"] == ()
    assert taints_of(cleared) != taints_of(SLICE)


@pytest.mark.parametrize(
    ("taint", "kept"),
    [
        pytest.param(
            {"key": "k", "effect": "None", "timeAdded": "2026-11-20T11:15:02.5Z"},
            (DeviceTaint("k", "None", "", ms("2026-11-20T11:15:02.5")),),
            id="effect-none-fractional-time",
        ),
        pytest.param(
            {"key": "k", "effect": "NoSchedule"},
            (DeviceTaint("k", "NoSchedule", "", None),),
            id="no-time",
        ),
        pytest.param(
            {"key": "k", "effect": "NoSchedule", "timeAdded": "yesterday", "value": 3},
            (DeviceTaint("k", "NoSchedule", "", None),),
            id="unreadable-time-and-value",
        ),
        pytest.param({"effect": "NoExecute"}, (), id="no-key"),
        pytest.param({"key": "k", "effect": None}, (), id="null-effect"),
        pytest.param({"key": "k", "effect": 1}, (), id="effect-not-text"),
        pytest.param("NoExecute", (), id="not-an-object"),
    ],
)
def test_partial_taints_never_crash(taint: Any, kept: tuple[DeviceTaint, ...]) -> None:
    obj = copy.deepcopy(SLICE)
    obj["spec"]["devices"][2]["taints"] = [taint]
    assert taints_of(obj)["gpu-2"] == kept


def test_taints_not_a_list_give_none() -> None:
    obj = copy.deepcopy(SLICE)
    obj["spec"]["devices"][2]["taints"] = {"key": "k", "effect": "NoSchedule"}
    assert taints_of(obj)["gpu-2"] == ()
