"""The exporter double's ``--kubernetes-virtual-gpus`` mode (4.5.3-4.8.2 and later), line by line
as upstream prints it, and read back by the agent's own parser into per-pod usage: the
per-process families keep the device row first and add each listed pod's own figure, every other
family becomes identical per-pod copies, a MIG instance measures memory only."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agents.dcgm.rows import MetricRow, read_rows
from agents.dcgm.translate import parse_exposition
from contract.inputs import PodUsage
from sim.cluster import Cluster
from sim.exporter_rows import ExporterRow, render
from sim.kube_objects import pod_objects
from sim.scenario import Scenario, gpu_uuid, load, parse
from sim.virtual_gpus import ListedPod

GPU = "GPU-7d67d8e0-a72e-51ce-a043-53a42b82f5a0"
MIG = "MIG-1b2c3d4e-5f60-5718-8a9b-0c1d2e3f4a5b"
UID_TRAIN = "0b93fe09-a8a6-5f58-94bf-cdc883c2855d"
UID_SERVE = "9cccdab2-9819-5932-925b-9c9937396ae7"
UID_NOTEBOOK = "1864567a-3d92-5019-ad6b-98901f7a5b77"
IDENTITY = (
    f'gpu="0",UUID="{GPU}",pci_bus_id="00000000:17:00.0",device="nvidia0",'
    'modelName="NVIDIA A100-SXM4-40GB",Hostname="node-1",DCGM_FI_DRIVER_VERSION="580.95.05"'
)
TRAIN = ListedPod("ml", "train-0", "trainer", UID_TRAIN, "0", sm_util_pct=60, fb_used_mib=22528)
LISTED = (
    TRAIN,
    ListedPod("ml", "train-0", "trainer", UID_TRAIN, "1", sm_util_pct=60, fb_used_mib=22528),
    ListedPod("research", "notebook-0", "jupyter", UID_NOTEBOOK, "3", fb_used_mib=3072),
    ListedPod("serving", "embedder-0", "server", UID_SERVE, "2", sm_util_pct=30, fb_used_mib=6144),
)
DEVICE = ExporterRow(
    gpu=0,
    uuid=GPU,
    model="NVIDIA A100-SXM4-40GB",
    hostname="node-1",
    pci_bus_id="00000000:17:00.0",
    values=(
        ("DCGM_FI_DEV_GPU_TEMP", 62),
        ("DCGM_FI_DEV_POWER_USAGE", 285.0),
        ("DCGM_FI_DEV_GPU_UTIL", 90),
        ("DCGM_FI_DEV_FB_FREE", 9216),
        ("DCGM_FI_DEV_FB_USED", 31744),
    ),
    listed=LISTED,
)


def family(text: str, name: str) -> list[MetricRow]:
    rows, rejected = read_rows(text)
    assert rejected == []
    return [r for r in rows if r.name == name]


def who(row: MetricRow) -> tuple[str | None, ...]:
    return tuple(row.labels.get(k) for k in ("pod", "pod_uid", "vgpu"))


# --- the text -------------------------------------------------------------------------------


def test_per_process_families_print_the_device_row_first_then_each_listed_pod() -> None:
    text = render([DEVICE])
    util = family(text, "DCGM_FI_DEV_GPU_UTIL")
    assert util[0].line == f"DCGM_FI_DEV_GPU_UTIL{{{IDENTITY}}} 90\n"  # unchanged, no pod
    assert util[1].line == (
        f'DCGM_FI_DEV_GPU_UTIL{{{IDENTITY},container="trainer",namespace="ml",pod="train-0",'
        f'pod_uid="{UID_TRAIN}",vgpu="0"}} 60\n'
    )  # attributes sorted by name after the fixed prefix
    assert [(who(r), r.value) for r in util[1:]] == [
        (("train-0", UID_TRAIN, "0"), 60),
        (("train-0", UID_TRAIN, "1"), 60),
        (("notebook-0", UID_NOTEBOOK, "3"), 0),
        (("embedder-0", UID_SERVE, "2"), 30),
    ]
    memory = family(text, "DCGM_FI_DEV_FB_USED")
    assert [(who(r), r.value) for r in memory] == [
        ((None, None, None), 31744),
        (("train-0", UID_TRAIN, "0"), 22528),
        (("train-0", UID_TRAIN, "1"), 22528),
        (("notebook-0", UID_NOTEBOOK, "3"), 3072),
        (("embedder-0", UID_SERVE, "2"), 6144),
    ]


def test_a_pod_holding_two_replicas_prints_two_identical_rows() -> None:
    rows = family(render([DEVICE]), "DCGM_FI_DEV_FB_USED")
    train = [r for r in rows if r.labels.get("pod") == "train-0"]
    assert [r.labels["vgpu"] for r in train] == ["0", "1"]
    assert {r.value for r in train} == {22528}  # keyed by pod UID: the same figure twice


def test_a_listed_pod_without_process_reads_an_explicit_zero() -> None:
    (notebook,) = [
        r for r in family(render([DEVICE]), "DCGM_FI_DEV_GPU_UTIL") if who(r)[0] == "notebook-0"
    ]
    assert notebook.line.rstrip().endswith("} 0")


@pytest.mark.parametrize(("pod_uid_label", "uid"), [(False, None), (True, UID_TRAIN)])
def test_every_other_family_is_one_identical_copy_per_listed_entry(
    pod_uid_label: bool, uid: str | None
) -> None:
    text = render([dataclasses.replace(DEVICE, pod_uid_label=pod_uid_label)])
    for name, value in (("DCGM_FI_DEV_GPU_TEMP", 62), ("DCGM_FI_DEV_FB_FREE", 9216)):
        copies = family(text, name)
        assert [r.labels.get("vgpu") for r in copies] == ["0", "1", "3", "2"]  # no device row
        assert {r.value for r in copies} == {value}
        assert copies[0].labels.get("pod_uid") == uid  # only with --kubernetes-enable-pod-uid
    (power, *_) = family(text, "DCGM_FI_DEV_POWER_USAGE")
    assert power.line.rstrip().endswith("} 285.000000")


def test_a_device_nobody_is_listed_for_keeps_its_plain_rows() -> None:
    bare = dataclasses.replace(DEVICE, listed=())
    text = render([bare])
    assert text == render([dataclasses.replace(bare, pod_uid_label=True)])
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP"):
        (row,) = family(text, name)
        assert "pod" not in row.labels


def test_a_whole_gpu_gets_per_pod_rows_without_vgpu() -> None:
    whole = ListedPod("research", "eval-0", "eval", UID_SERVE, sm_util_pct=80, fb_used_mib=30720)
    text = render([dataclasses.replace(DEVICE, listed=(whole,))])
    _, own = family(text, "DCGM_FI_DEV_GPU_UTIL")
    assert (who(own), own.value) == (("eval-0", UID_SERVE, None), 80)


def mig_row() -> ExporterRow:
    return ExporterRow(
        gpu=0,
        uuid=GPU,
        model="NVIDIA A100-SXM4-40GB",
        hostname="node-1",
        pci_bus_id="00000000:17:00.0",
        mig_profile="3g.20gb",
        mig_instance_id=2,
        values=(("DCGM_FI_DEV_GPU_UTIL", 0), ("DCGM_FI_DEV_FB_USED", 9000)),
        listed=(
            ListedPod("ml", "train-0", "trainer", UID_TRAIN, sm_util_pct=70, fb_used_mib=8800),
        ),
    )


def test_a_mig_instance_measures_memory_per_pod_and_no_utilisation() -> None:
    text = render([mig_row()])
    device, own = family(text, "DCGM_FI_DEV_GPU_UTIL")
    assert own.line == (
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="{GPU}",pci_bus_id="00000000:17:00.0",'
        'device="nvidia0",modelName="NVIDIA A100-SXM4-40GB",GPU_I_PROFILE="3g.20gb",'
        'GPU_I_ID="2",Hostname="node-1",DCGM_FI_DRIVER_VERSION="580.95.05",container="trainer",'
        f'namespace="ml",pod="train-0",pod_uid="{UID_TRAIN}"}} 0\n'
    )  # its pod works at 70 %: NVML samples no per-process utilisation on MIG
    assert "pod" not in device.labels
    assert [r.value for r in family(text, "DCGM_FI_DEV_FB_USED")] == [9000, 8800]


def test_a_row_that_lists_pods_carries_no_pod_labels_of_its_own() -> None:
    with pytest.raises(ValueError, match="no pod labels"):
        dataclasses.replace(DEVICE, pod=("ml", "train-0", "trainer"))


# --- read back by the agent's parser ----------------------------------------------------------


def test_the_agent_reads_the_device_row_and_each_pods_own_figures() -> None:
    result = parse_exposition(render([DEVICE]), node="node-1", ts_ms=1)
    assert result.rejected == ()
    (sample,) = result.samples
    assert (sample.util_pct, sample.fb_used_mib, sample.temp_c) == (90, 31744, 62)
    assert sample.usage is not None
    assert sample.usage.source == "exporter"
    assert sample.usage.pods == (
        PodUsage(UID_TRAIN, "ml", "train-0", "trainer", 22528, 60, copies=2),
        PodUsage(UID_NOTEBOOK, "research", "notebook-0", "jupyter", 3072, 0, copies=1),
        PodUsage(UID_SERVE, "serving", "embedder-0", "server", 6144, 30, copies=1),
    )  # by pod UID; the two-replica pod once


def test_the_agent_reads_a_mig_instances_memory_only() -> None:
    result = parse_exposition(render([mig_row()]), node="node-1", ts_ms=1)
    assert result.rejected == ()
    (sample,) = result.samples
    assert sample.usage is not None
    (only,) = sample.usage.pods
    assert (only.fb_used_mib, only.sm_util_pct) == (8800, None)


# --- from a scenario ----------------------------------------------------------------------------


def at(scenario: Scenario, t: float) -> Cluster:
    return Cluster(scenario, lambda: t)


def test_the_tenants_scenario_lists_each_pod_with_its_own_figures_and_real_uid() -> None:
    scenario = load("tenants")
    api_uids = {
        o["metadata"]["name"]: o["metadata"]["uid"] for o in pod_objects(scenario, 60.0, 0.0)
    }
    for t in (0.0, 25.0, 45.0, 60.0, 160.0):
        for row in at(scenario, t).exporter_rows("tenants-a", 0):
            values = dict(row.values)
            listed = row.listed
            pods = {e.pod: e for e in listed}  # one figure per pod, however often listed
            own_sm = sum(e.sm_util_pct for e in pods.values())
            assert values["DCGM_FI_DEV_GPU_UTIL"] == min(100, own_sm)
            assert values["DCGM_FI_DEV_FB_USED"] >= sum(e.fb_used_mib for e in pods.values())
            for e in listed:
                spec = next(p for p in scenario.pods if p.name == e.pod)
                assert (e.sm_util_pct, e.fb_used_mib) == (spec.util_at(t), spec.memory_at(t))
                assert e.pod_uid == spec.uid == api_uids[e.pod]
            if row.gpu == 0:  # the kubelet's List order: pods by namespace and name, device IDs
                assert [(e.namespace, e.pod, e.vgpu) for e in listed] == [
                    ("ml", "llm-finetune-7c9d8b6f5-k2x8q", "0"),
                    ("ml", "llm-finetune-7c9d8b6f5-k2x8q", "1"),
                    ("research", "notebook-lin-0", "5"),
                    ("serving", "embedder-5f8c7d9b4-q7w2m", "2"),
                    ("serving", "embedder-5f8c7d9b4-w3n6r", "4"),
                ]
            else:
                assert [(e.pod, e.vgpu) for e in listed] == [("llm-eval-x4k9p", "")]


def test_the_noisy_neighbours_memory_grows_past_half_the_gpu() -> None:
    trainer = next(p for p in load("tenants").pods if p.name.startswith("llm-finetune"))
    assert trainer.memory_at(0) == 8192
    assert trainer.memory_at(39.9) < 40960 / 2 <= trainer.memory_at(40)
    assert trainer.memory_at(1000) == 24576


def _scenario(node: dict[str, Any], pods: list[dict[str, Any]]) -> Scenario:
    base = {"name": "n", "model": "NVIDIA A10", "gpus": 2, "exporter_mode": "virtual-gpus"}
    return parse({"name": "s", "nodes": [{**base, **node}], "pods": pods})


def test_a_renamed_shared_resource_lists_nobody_and_a_whole_gpu_its_holder() -> None:
    scenario = _scenario(
        {"sharing": "time-slicing", "replicas": 4, "shared_gpus": [0], "rename_shared": True},
        [
            {"namespace": "a", "name": "p", "node": "n", "slots": ["0::1"], "util_pct": 40},
            {"namespace": "a", "name": "q", "node": "n", "slots": ["1"], "util_pct": 50},
        ],
    )
    rows = Cluster(scenario, lambda: 5.0).exporter_rows("n", 0)
    assert [(r.uuid, [e.pod for e in r.listed]) for r in rows] == [
        (gpu_uuid("n", 0), []),  # nvidia.com/gpu.shared: the exporter does not look it up
        (gpu_uuid("n", 1), ["q"]),
    ]


def test_the_scenario_refuses_an_unknown_exporter_mode() -> None:
    with pytest.raises(ValueError, match="unknown exporter_mode 'virtual-gpu'"):
        _scenario({"exporter_mode": "virtual-gpu"}, [])


def test_a_mig_node_lists_each_instances_pods_and_reads_their_memory() -> None:
    scenario = _scenario(
        {"gpus": 1, "mig": {"gpus": [0], "profile": "3g.20gb", "instances": [1, 2]}},
        [
            {"namespace": "a", "name": "p", "node": "n", "slots": ["0/gi2"], "util_pct": 70,
             "memory_mib": 4000},
        ],
    )  # fmt: skip
    rows = Cluster(scenario, lambda: 5.0).exporter_rows("n", 0)
    assert [(r.mig_instance_id, [e.pod for e in r.listed]) for r in rows] == [(1, []), (2, ["p"])]
    (sample, *_) = [
        s
        for s in parse_exposition(render(rows), node="n", ts_ms=1).samples
        if s.mig_instance_id == 2
    ]
    assert sample.usage is not None
    (only,) = sample.usage.pods
    assert (only.pod, only.fb_used_mib, only.sm_util_pct) == ("p", 4000, None)
