"""The simulated device plugin replicates only the GPUs its sharing config names."""

from __future__ import annotations

from sim.cluster import Cluster
from sim.kube_objects import node_objects
from sim.scenario import gpu_uuid, load


def test_mps_on_one_gpu_advertises_the_other_whole() -> None:
    scenario = load("mps-subset")
    cluster = Cluster(scenario, lambda: 10.0)
    held, allocatable = cluster.podresources("h100-mps")
    g0, g1 = gpu_uuid("h100-mps", 0), gpu_uuid("h100-mps", 1)
    assert sorted(a.device_id for a in allocatable) == sorted(
        [*(f"{g0}::{r}" for r in range(8)), g1]
    )
    assert [a.device_id for a in held if a.device_id.startswith(g1)] == [g1]
    assert len({a.pod for a in held if a.device_id.startswith(f"{g0}::")}) == 5
    labels = dict(scenario.node("h100-mps").labels)
    assert labels["nvidia.com/gpu.sharing-strategy"] == "mps"  # node-wide, as GFD does


def test_time_slicing_subset_renames_only_the_replicated_gpus() -> None:
    scenario = load("time-slicing-subset")
    cluster = Cluster(scenario, lambda: 10.0)
    _, allocatable = cluster.podresources("a10-ts")
    by_resource: dict[str, set[str]] = {}
    for a in allocatable:
        by_resource.setdefault(a.resource, set()).add(a.device_id.partition("::")[0])
    assert by_resource == {
        "nvidia.com/gpu.shared": {gpu_uuid("a10-ts", 0), gpu_uuid("a10-ts", 1)},
        "nvidia.com/gpu": {gpu_uuid("a10-ts", 2)},
    }
    (node,) = node_objects(scenario)
    alloc = node["status"]["allocatable"]
    assert (alloc["nvidia.com/gpu.shared"], alloc["nvidia.com/gpu"]) == ("8", "1")


def test_the_exporter_stamps_the_only_holder_of_the_whole_gpu() -> None:
    cluster = Cluster(load("mps-subset"), lambda: 10.0)
    rows = [r for r in cluster.exporter_rows("h100-mps", 0) if r.gpu == 1]
    assert [r.pod for r in rows] == [("ml", "train-mixtral-0", "trainer")]
