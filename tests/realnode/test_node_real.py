"""The real node itself: a v1.35.4 kubelet the real scheduler places pods on, our device plugin's
IDs and the DRA driver's devices allocatable — and the host left as it was, nothing left running.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuattr.localkafka import default_cache_dir
from gpuattr.localkube.cluster import LocalCluster
from gpuattr.localkube.devices import plugin_config
from gpuattr.localkube.node import KUBELET_SYSCTLS

#: paths the kubelet, the device plugin and the DRA driver write by default
HOST_PATHS = (
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/etc/cdi",
    "/var/run/cdi",
)


def host_state() -> dict[str, str]:
    state = {p: str(os.path.exists(p)) for p in HOST_PATHS}
    for entry in KUBELET_SYSCTLS:
        state[entry] = Path("/proc/sys", entry).read_text().strip()
    return state


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is not running
        return f.read().split(")")[-1].split()[0] != "Z"


async def test_the_node_is_ready_with_our_devices(real_node: LocalCluster) -> None:
    await real_node.node.settled()
    node = real_node.kube.api("GET", f"/api/v1/nodes/{real_node.node_name}")
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.35.4"
    allocatable = node["status"]["allocatable"]
    for resource in plugin_config(real_node.node.layout)["resources"]:
        assert allocatable[resource["name"]] == str(len(resource["devices"]))
    assert [name for name, _ in real_node.node.dra_gpus()] == ["gpu-0", "gpu-1"]
    assert real_node.node.healthz()


async def test_a_cluster_changes_nothing_on_the_host_and_stops_entirely(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    before = host_state()
    tmp_path = tmp_path_factory.mktemp("host")  # short: unix socket paths are bounded
    cluster = LocalCluster(tmp_path, default_cache_dir(), node="gpu-node-z", dra_devices=1)
    await cluster.start()
    try:
        pids = cluster.pids()
        assert len(pids) == 9, "etcd, API server, scheduler, controllers and the node's five"
        during = host_state()
        ns = tmp_path / "node" / "ns" / "sysctl"
        # the kubelet set its kernel tunables — in files bound over /proc/sys in its namespace
        assert (ns / "vm.overcommit_memory").read_text().strip() == "1"
        assert (ns / "kernel.panic").read_text().strip() == "10"
        # its registration socket lives in the work directory, bound on the fixed path
        assert (tmp_path / "node" / "device-plugins" / "kubelet.sock").exists()
    finally:
        await cluster.stop()
    assert during == before
    assert host_state() == before
    assert not [pid for pid in pids if alive(pid)], "every process stopped"
    assert cluster.pids() == []
