"""The report's GPU-hours come from the core's accounting: on a time-sliced GPU whose replicas
are not advertised (no share known: split equally between the pods), a pod with two containers
and a pod with one each hold half of it — in the events, in the Prometheus share series, in the
GPUs-held rule, and in the report, whether the events carry their ``pods`` or only their holders.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from contract.outputs import AttributionEvent, Holder
from contract.records import replace
from gpuattr.report import accumulate
from sim.scenario import load
from streams.core.devices.accounting import pod_shares
from streams.present.promseries import pod_device_share
from streams.present.views import device_row
from tests.scenario_events import events
from tests.unit.test_accounting_agreement import MINUTES, from_report, series_file
from tests.unit.test_prometheus_rules import promtool, rules_file

SCENARIO = """
name = "split"
description = "A time-sliced A10 without advertised replicas: duo-0's two containers, solo-0's one."

[[nodes]]
name = "ts-blind"
model = "NVIDIA A10"
gpus = 1
memory_mib = 23028
sharing = "time-slicing"
labels = { "nvidia.com/gpu.product" = "NVIDIA-A10-SHARED", "nvidia.com/mig.strategy" = "none" }

[[pods]]
namespace = "lab"
name = "duo-0"
workload = "Job/duo"
node = "ts-blind"
containers = [{ name = "left", slots = ["0::0"] }, { name = "right", slots = ["0::1"] }]
util_pct = 30
memory_mib = 6000

[[pods]]
namespace = "lab"
name = "solo-0"
workload = "Job/solo"
node = "ts-blind"
containers = [{ name = "main", slots = ["0::2"] }]
util_pct = 30
memory_mib = 6000
"""


def hour_of_events(tmp_path: Path) -> list[AttributionEvent]:
    path = tmp_path / "split.toml"
    path.write_text(SCENARIO)
    return events(load(str(path)), at_s=10.0, minutes=MINUTES)


def held(evs: list[AttributionEvent]) -> dict[str, float]:
    lines = accumulate(evs, max_gap_s=90, idle_threshold_pct=5)
    return {line.workload: round(line.held_gpu_hours, 6) for line in lines}


def test_a_two_container_pod_on_a_shared_gpu_holds_the_same_everywhere(tmp_path: Path) -> None:
    evs = hour_of_events(tmp_path)
    last = evs[-1]
    assert last.state == "shared"
    assert [h.allocation_share for h in last.holders] == [None, None, None]  # no share known
    in_events = {p.pod: p.share for p in last.pods}
    series = {dict(lb)["pod"]: v for lb, v in pod_device_share([device_row(last, None)]).samples}
    assert in_events == series == {"duo-0": 0.5, "solo-0": 0.5}
    assert held(evs) == {"Job/duo": 0.5, "Job/solo": 0.5}  # an hour at half a GPU each
    # the shipped GPUs-held rule over the same series says the same
    rules_file(tmp_path)
    (tmp_path / "agree_test.yaml").write_text(yaml.safe_dump(series_file(evs, from_report(evs))))
    promtool("test", "rules", "agree_test.yaml", cwd=tmp_path)


def test_events_without_pods_are_accounted_by_the_same_rule(tmp_path: Path) -> None:
    """Not per container: duo-0's two holders are one pod's half, as the event's own pods say."""
    evs = hour_of_events(tmp_path)
    bare = [replace(ev, pods=()) for ev in evs]
    assert held(bare) == held(evs)
    assert pod_shares(bare[-1]) == evs[-1].pods


def holder(
    pod: str, container: str, ids: tuple[str, ...], share: float | None, claim: str = ""
) -> Holder:
    resource = "gpu.nvidia.com" if claim else "nvidia.com/gpu"
    return Holder("lab", pod, container, resource, ids, len(ids), share, claim=claim or None)


#: any event: only its holders are read
EVENT = events(load("time-slicing"), at_s=10.0, minutes=0)[-1]


@pytest.mark.parametrize(
    ("holders", "shares"),
    [
        pytest.param(  # one claim listed for each of a pod's two containers: one unit, held once
            (holder("a", "x", ("gpu-0",), 1.0, "lab/c"),
             holder("a", "y", ("gpu-0",), 1.0, "lab/c")),
            {"a": (1.0, "whole")},
            id="claim-of-two-containers",
        ),
        pytest.param(  # two replicas of four held by one pod's two containers
            (holder("a", "x", ("G::0",), 0.25), holder("a", "y", ("G::1",), 0.25)),
            {"a": (0.5, "replicas")},
            id="two-replicas-one-pod",
        ),
        pytest.param(  # nothing known: equal between pods, whatever their containers
            (holder("a", "x", ("G::0",), None), holder("a", "y", ("G::1",), None),
             holder("b", "z", ("G::2",), None)),
            {"a": (0.5, "equal-split"), "b": (0.5, "equal-split")},
            id="unknown-split-by-pod",
        ),
        pytest.param(  # two compute instances of one MIG instance, each listed whole, one pod
            (holder("a", "x", ("MIG-G/1/0",), 1.0), holder("a", "x", ("MIG-G/1/1",), 1.0)),
            {"a": (1.0, "whole")},
            id="one-pod-over-the-device-holds-it-whole",
        ),
        pytest.param(  # two pods each given the device whole: the inputs disagree
            (holder("a", "x", ("gpu-0",), 1.0), holder("b", "y", ("gpu-1",), 1.0)),
            {"a": (0.5, "equal-split"), "b": (0.5, "equal-split")},
            id="two-pods-over-the-device-split-equally",
        ),
    ],
)  # fmt: skip
def test_pod_shares_of_listed_holders(
    holders: tuple[Holder, ...], shares: dict[str, tuple[float, str]]
) -> None:
    ev = replace(EVENT, holders=holders, pods=())
    assert {p.pod: (p.share, p.basis) for p in pod_shares(ev)} == shares
