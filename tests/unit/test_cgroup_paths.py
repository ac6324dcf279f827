"""A process's pod and container from the text of ``/proc/<pid>/cgroup``, as each kubelet cgroup
driver, runtime and cgroup version writes it (v1 files list every hierarchy, hybrid ones add a
``0::/`` line)."""

from __future__ import annotations

import pytest

from agents.processes.cgroup import CgroupIdentity, identity_of, pod_uid

UID = "e64c0184-57cc-45cc-896d-edd3d1bf704c"
UID_ = UID.replace("-", "_")  # the systemd driver's slice spelling
OTHER = "a34e1cec-0152-43a3-ac99-bea948711919"
CID = "e73d754ba7c184f060ad431b571d4c764f540e639c13f6c9b37b1eb405dcfc83"
NODE_CID = "05673d730914b2867eb75cf8721d5769c86c691cbb76725f16b408f0b948bb8f"
STATIC_UID = "6ab1f2b3c94d5e8f7a0b1c2d3e4f5a6b"  # the kubelet's md5 of a static pod's manifest

V1_CONTROLLERS = (
    "hugetlb",
    "cpuset",
    "memory",
    "devices",
    "blkio",
    "pids",
    "net_cls,net_prio",
    "perf_event",
    "freezer",
    "cpu,cpuacct",
)


def v1(path: str, *, rdma_root: bool = True, hybrid: bool = True) -> str:
    """A cgroup v1 file: every hierarchy at ``path`` (rdma at the root, as on most nodes), the
    named systemd hierarchy, and the hybrid layout's empty unified line."""
    lines = [f"{12 - i}:{c}:{path}" for i, c in enumerate(V1_CONTROLLERS)]
    if rdma_root:
        lines.append("2:rdma:/")
    lines.append(f"1:name=systemd:{path}")
    if hybrid:
        lines.append("0::/")
    return "\n".join(lines) + "\n"


def v2(path: str) -> str:
    return f"0::{path}\n"


SYSTEMD_BURSTABLE = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"
SYSTEMD_BESTEFFORT = (
    f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice"
)
IN_CONTAINERD = CgroupIdentity(UID, CID, "containerd")
IN_CRIO = CgroupIdentity(UID, CID, "cri-o")
IN_DOCKER = CgroupIdentity(UID, CID, "docker")
BARE = CgroupIdentity(UID, CID, "")  # cgroupfs: the runtime names the container by its ID alone

CASES: dict[str, tuple[str, CgroupIdentity | None]] = {
    # containerd, systemd driver
    "containerd-systemd-v1": (v1(f"{SYSTEMD_BURSTABLE}/cri-containerd-{CID}.scope"), IN_CONTAINERD),
    "containerd-systemd-v2": (v2(f"{SYSTEMD_BURSTABLE}/cri-containerd-{CID}.scope"), IN_CONTAINERD),
    "containerd-systemd-v2-guaranteed": (
        v2(f"/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope"),
        IN_CONTAINERD,
    ),
    # containerd (or cri-dockerd), cgroupfs driver
    "containerd-cgroupfs-v1": (v1(f"/kubepods/burstable/pod{UID}/{CID}"), BARE),
    "containerd-cgroupfs-v1-guaranteed": (v1(f"/kubepods/pod{UID}/{CID}", hybrid=False), BARE),
    "containerd-cgroupfs-v2": (v2(f"/kubepods/besteffort/pod{UID}/{CID}"), BARE),
    # CRI-O
    "crio-systemd-v2": (v2(f"{SYSTEMD_BURSTABLE}/crio-{CID}.scope"), IN_CRIO),
    "crio-systemd-v1": (v1(f"{SYSTEMD_BESTEFFORT}/crio-{CID}.scope"), IN_CRIO),
    "crio-cgroupfs-v1": (v1(f"/kubepods/burstable/pod{UID}/crio-{CID}"), IN_CRIO),
    "crio-conmon-is-not-the-container": (
        v2(f"{SYSTEMD_BURSTABLE}/crio-conmon-{CID}.scope"),
        CgroupIdentity(UID, "", "conmon"),
    ),
    # dockershim / cri-dockerd
    "docker-systemd-v1": (v1(f"{SYSTEMD_BESTEFFORT}/docker-{CID}.scope"), IN_DOCKER),
    "docker-cgroupfs-v1": (v1(f"/kubepods/besteffort/pod{UID}/{CID}", rdma_root=False), BARE),
    # nested clusters
    "kind-in-its-node": (
        v2(
            "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
            f"kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope"
        ),
        IN_CONTAINERD,
    ),
    "kind-seen-from-the-host": (
        v2(
            f"/system.slice/docker-{NODE_CID}.scope/kubelet.slice/kubelet-kubepods.slice/"
            f"kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod{UID_}.slice/"
            f"cri-containerd-{CID}.scope"
        ),
        IN_CONTAINERD,
    ),
    "minikube-docker-driver-v1": (
        v1(f"/docker/{NODE_CID}/kubepods/burstable/pod{UID}/{CID}"),
        BARE,
    ),
    # read from inside a cgroup namespace: relative to the reader's own cgroup
    "relative-to-the-readers-cgroup-namespace": (
        v2(f"/../../kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope"),
        IN_CONTAINERD,
    ),
    "cgroup-removed-while-read": (
        v2(f"{SYSTEMD_BURSTABLE}/cri-containerd-{CID}.scope (deleted)"),
        IN_CONTAINERD,
    ),
    # in the pod, in no container
    "pod-cgroup-itself-systemd": (v2(SYSTEMD_BESTEFFORT), CgroupIdentity(UID)),
    "pod-cgroup-itself-cgroupfs-v1": (v1(f"/kubepods/burstable/pod{UID}"), CgroupIdentity(UID)),
    "another-runtimes-container-name": (
        v2(f"/kubepods/besteffort/pod{UID}/sandbox-7f3a"),
        CgroupIdentity(UID, "sandbox-7f3a", ""),
    ),
    "upper-case-uid": (
        v2(f"/kubepods/besteffort/pod{UID.upper()}/{CID}"),
        BARE,
    ),
    "static-pod-uid": (
        v2(f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{STATIC_UID}.slice"),
        CgroupIdentity(STATIC_UID),
    ),
    # not in Kubernetes
    "user-session": (v2("/user.slice/user-1000.slice/session-4.scope"), None),
    "root-cgroup": (v2("/"), None),
    "system-service": (v2("/system.slice/containerd.service"), None),
    "docker-container-outside-kubernetes": (v2(f"/system.slice/docker-{CID}.scope"), None),
    "v1-user-session": (v1("/user.slice/user-1000.slice/session-4.scope"), None),
    "kubepods-without-a-pod": (v2("/kubepods.slice/kubepods-burstable.slice"), None),
    # not a pod UID
    "uid-not-hex": (v2(f"/kubepods/besteffort/podnot-a-uid/{CID}"), None),
    "uid-too-short": (v2(f"/kubepods/besteffort/pod1234-5678/{CID}"), None),
    "uid-misplaced-dashes": (
        v2(f"/kubepods/besteffort/pod{UID.replace('-', '')[:30]}-ab/{CID}"),
        None,
    ),
    # not a cgroup file
    "empty": ("", None),
    "garbage": ("not a cgroup file\n\x00\x01\xff\n::::\n", None),
    "line-without-path": ("12:memory\n0::\n", None),
    "line-without-hierarchy-id": (f"memory:/kubepods/besteffort/pod{UID}/{CID}\n", None),
    "lines-naming-two-pods": (
        f"12:memory:/kubepods/besteffort/pod{UID}/{CID}\n0::/kubepods/besteffort/pod{OTHER}/{CID}\n",
        None,
    ),
}


@pytest.mark.parametrize(("text", "expected"), list(CASES.values()), ids=list(CASES))
def test_cgroup_names_the_pod_and_container(text: str, expected: CgroupIdentity | None) -> None:
    assert identity_of(text) == expected


def test_a_line_naming_the_container_wins_over_one_naming_only_the_pod() -> None:
    text = f"4:pids:/kubepods/burstable/pod{UID}\n3:memory:/kubepods/burstable/pod{UID}/{CID}\n"
    assert identity_of(text) == BARE


@pytest.mark.parametrize(
    ("spelling", "uid"),
    [(UID, UID), (UID_, UID), (UID.upper(), UID), (STATIC_UID, STATIC_UID), ("1234", None)],
    ids=["dashed", "systemd-escaped", "upper-case", "static-pod", "not-a-uid"],
)
def test_pod_uid_spellings(spelling: str, uid: str | None) -> None:
    assert pod_uid(spelling) == uid
