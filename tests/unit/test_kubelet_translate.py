"""PodResources protobuf ↔ records: golden tests from realistic kubelet replies."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agents.podresources.translate import (
    Unusable,
    allocatable_from_response,
    assignments_from_list,
    unusable,
)
from contract.inputs import AllocatableDevice, DeviceAssignment
from proto.podresources.v1 import api_pb2 as pb
from sim.podresources_replies import allocatable_response, get_response, list_response

GPU_A = "GPU-8b2c4a51-8a9e-4f1b-a0d2-3c5e7f9a1b2c"
GPU_B = "GPU-1f3a9c7e-52d4-4b8e-9a06-7d2e4c1b8f30"
GPU_C = "GPU-c0ffee00-1234-4abc-8def-0123456789ab"
MIG = "MIG-5f0e1d2c-3b4a-5968-7a8b-9c0d1e2f3a4b"
MIG_LEGACY = f"MIG-{GPU_C}/7/0"
NV = "nvidia.com/gpu"
NUMA0 = pb.TopologyInfo(nodes=[pb.NUMANode(ID=0)])


def devices(resource: str, *ids: str, numa: pb.TopologyInfo | None = None) -> pb.ContainerDevices:
    return pb.ContainerDevices(resource_name=resource, device_ids=ids, topology=numa)


def claim(name: str, ns: str, *resources: pb.ClaimResource) -> pb.DynamicResource:
    return pb.DynamicResource(claim_name=name, claim_namespace=ns, claim_resources=resources)


# A List reply as a kubelet on a mixed GPU node gives it: every active pod, with or without
# devices; sidecars without devices; a CPU-pinned system pod; another vendor's devices; DRA.
LIST = pb.ListPodResourcesResponse(
    pod_resources=[
        pb.PodResources(
            name="trainer-0",
            namespace="ml",
            containers=[
                pb.ContainerResources(
                    name="main",
                    devices=[devices("nvidia.com/gpu", GPU_A, GPU_B, numa=NUMA0)],
                    cpu_ids=[2, 3, 4, 5],
                    memory=[pb.ContainerMemory(memory_type="memory", size=8 << 30, topology=NUMA0)],
                ),
                pb.ContainerResources(name="log-shipper"),
            ],
        ),
        pb.PodResources(
            name="notebook-7f9c6d5b8-x2k4q",
            namespace="dev",
            containers=[
                pb.ContainerResources(
                    name="jupyter",
                    # time-slicing with renameByDefault: two replicas of one GPU in one pod
                    devices=[devices("nvidia.com/gpu.shared", f"{GPU_C}::5", f"{GPU_C}::3")],
                ),
            ],
        ),
        pb.PodResources(
            name="triton-0",
            namespace="inference",
            containers=[
                pb.ContainerResources(
                    name="triton",
                    devices=[
                        devices("nvidia.com/mig-1g.10gb", MIG, MIG),  # listed twice: one row
                        devices("nvidia.com/mig-3g.40gb", MIG_LEGACY),
                    ],
                ),
                pb.ContainerResources(
                    name="metrics",
                    devices=[devices("nvidia.com/mig-1g.10gb", f"{MIG}::7")],
                ),
            ],
        ),
        pb.PodResources(
            name="gke-trainer",
            namespace="gke",
            containers=[
                pb.ContainerResources(
                    name="train",
                    devices=[devices("nvidia.com/gpu", "nvidia0/vgpu1", "nvidia1/gi3/vgpu0")],
                )
            ],
        ),
        pb.PodResources(
            name="coredns-5d78c9869d-8jq2p",
            namespace="kube-system",
            containers=[pb.ContainerResources(name="coredns", cpu_ids=[1])],
            cpu_ids=[1],
        ),
        pb.PodResources(
            name="dpdk-fwd",
            namespace="net",
            containers=[
                pb.ContainerResources(
                    name="fwd", devices=[devices("intel.com/sriov_netdevice", "0000:3b:02.1")]
                )
            ],
        ),
        pb.PodResources(
            name="pod0",
            namespace="gpu-test2",
            containers=[
                pb.ContainerResources(
                    name="ctr0",
                    dynamic_resources=[
                        claim(
                            "pod0-shared-gpu-4xk2p",
                            "gpu-test2",
                            pb.ClaimResource(
                                cdi_devices=[pb.CDIDevice(name="k8s.gpu.nvidia.com/gpu=gpu-0")],
                                driver_name="gpu.nvidia.com",
                                pool_name="worker-1",
                                device_name="gpu-0",
                            ),
                            pb.ClaimResource(
                                driver_name="gpu.nvidia.com",
                                pool_name="worker-1",
                                device_name="gpu-1",
                                share_id="8d1c9c0e-1b7e-4a3f-9d55-2f8e0a6b4c71",
                            ),
                            # no device name: not a device (or an old kubelet): skipped
                            pb.ClaimResource(cdi_devices=[pb.CDIDevice(name="vendor.com/x=1")]),
                        )
                    ],
                )
            ],
        ),
        pb.PodResources(
            name="pod1",
            namespace="gpu-test2",
            containers=[
                pb.ContainerResources(
                    name="ctr0",
                    dynamic_resources=[
                        claim(
                            "pod1-gpu-9qz7r",
                            "gpu-test2",
                            pb.ClaimResource(
                                driver_name="gpu.nvidia.com",
                                pool_name="cluster/rack-1",  # pool names may contain '/'
                                device_name="gpu-3",
                            ),
                        )
                    ],
                )
            ],
        ),
    ]
)


def row(
    ns: str,
    pod: str,
    ctr: str,
    resource: str,
    device: str,
    claim: str = "",
    share_id: str = "",
) -> DeviceAssignment:
    return DeviceAssignment(ns, pod, ctr, resource, device, claim, share_id)


SHARE = "8d1c9c0e-1b7e-4a3f-9d55-2f8e0a6b4c71"
POD0_CLAIM = "gpu-test2/pod0-shared-gpu-4xk2p"


GOLDEN = (
    row("dev", "notebook-7f9c6d5b8-x2k4q", "jupyter", "nvidia.com/gpu.shared", f"{GPU_C}::3"),
    row("dev", "notebook-7f9c6d5b8-x2k4q", "jupyter", "nvidia.com/gpu.shared", f"{GPU_C}::5"),
    row("gke", "gke-trainer", "train", "nvidia.com/gpu", "nvidia0/vgpu1"),
    row("gke", "gke-trainer", "train", "nvidia.com/gpu", "nvidia1/gi3/vgpu0"),
    row("gpu-test2", "pod0", "ctr0", "dra:gpu.nvidia.com", "worker-1/gpu-0", POD0_CLAIM),
    row("gpu-test2", "pod0", "ctr0", "dra:gpu.nvidia.com", "worker-1/gpu-1", POD0_CLAIM, SHARE),
    row(
        "gpu-test2",
        "pod1",
        "ctr0",
        "dra:gpu.nvidia.com",
        "cluster/rack-1/gpu-3",
        "gpu-test2/pod1-gpu-9qz7r",
    ),
    row("inference", "triton-0", "metrics", "nvidia.com/mig-1g.10gb", f"{MIG}::7"),
    row("inference", "triton-0", "triton", "nvidia.com/mig-1g.10gb", MIG),
    row("inference", "triton-0", "triton", "nvidia.com/mig-3g.40gb", MIG_LEGACY),
    row("ml", "trainer-0", "main", "nvidia.com/gpu", GPU_B),
    row("ml", "trainer-0", "main", "nvidia.com/gpu", GPU_A),
)


def test_list_golden() -> None:
    assert assignments_from_list(LIST) == GOLDEN


def test_list_golden_survives_the_wire() -> None:
    wire = LIST.SerializeToString()
    assert assignments_from_list(pb.ListPodResourcesResponse.FromString(wire)) == GOLDEN


def test_dra_devices_listed_again_and_any_order_give_the_same_rows() -> None:
    """What a kubelet 1.35.4 answers after a restart and a sandbox re-creation
    (kubernetes/kubernetes#140471): each claim device once more per re-creation, its CDI list
    longer each time; and pods and device IDs in another order. The same rows."""
    reply = pb.ListPodResourcesResponse()
    reply.CopyFrom(LIST)
    for pod in reply.pod_resources:
        for ctr in pod.containers:
            for dev in ctr.devices:
                ids = list(reversed(dev.device_ids))
                del dev.device_ids[:]
                dev.device_ids.extend(ids)
            for dyn in ctr.dynamic_resources:
                copies = []
                for n in (1, 2, 3):
                    for res in dyn.claim_resources:
                        again = pb.ClaimResource()
                        again.CopyFrom(res)
                        del again.cdi_devices[:]
                        again.cdi_devices.extend(list(res.cdi_devices) * n)
                        copies.append(again)
                del dyn.claim_resources[:]
                dyn.claim_resources.extend(copies)
    pods = list(reversed(reply.pod_resources))
    del reply.pod_resources[:]
    reply.pod_resources.extend(pods)
    assert sum(len(d.claim_resources) for d in pods[1].containers[0].dynamic_resources) == 9
    assert assignments_from_list(reply) == GOLDEN


def test_resource_prefixes_select_plugin_resources_only() -> None:
    rows = assignments_from_list(LIST, resource_prefixes=("intel.com/",))
    plugin = [r for r in rows if not r.resource.startswith("dra:")]
    assert plugin == [row("net", "dpdk-fwd", "fwd", "intel.com/sriov_netdevice", "0000:3b:02.1")]
    assert len(rows) - len(plugin) == 3  # DRA devices are kept whatever the prefixes


def test_several_prefixes() -> None:
    rows = assignments_from_list(LIST, resource_prefixes=("nvidia.com/mig-", "intel.com/"))
    assert {r.resource for r in rows} == {
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-3g.40gb",
        "intel.com/sriov_netdevice",
        "dra:gpu.nvidia.com",
    }


def test_empty_and_cpu_only_replies() -> None:
    assert assignments_from_list(pb.ListPodResourcesResponse()) == ()
    cpu_only = pb.ListPodResourcesResponse(pod_resources=[LIST.pod_resources[4]])
    assert assignments_from_list(cpu_only) == ()


def test_unusable_entries_are_listed_with_their_reason_and_yield_no_row() -> None:
    reply = pb.ListPodResourcesResponse(
        pod_resources=[
            pb.PodResources(  # a wanted resource, one of its IDs empty
                name="a",
                namespace="ml",
                containers=[pb.ContainerResources(name="c", devices=[devices(NV, GPU_A, "")])],
            ),
            pb.PodResources(  # a DRA claim resource without a device name
                name="b",
                namespace="ml",
                containers=[
                    pb.ContainerResources(
                        name="c",
                        dynamic_resources=[
                            claim("gpu", "ml", pb.ClaimResource(driver_name="gpu.nvidia.com"))
                        ],
                    )
                ],
            ),
            pb.PodResources(  # a GPU, but no pod name to attribute it to
                namespace="ml",
                containers=[pb.ContainerResources(name="c", devices=[devices(NV, GPU_B)])],
            ),
            LIST.pod_resources[4],  # CPU only: out of scope, not unusable
        ]
    )
    assert assignments_from_list(reply) == (DeviceAssignment("ml", "a", "c", NV, GPU_A),)
    assert unusable(reply) == (
        Unusable("empty_device_id", f"pod ml/a c {NV}"),
        Unusable("dra_claim_resource_without_device", "pod ml/b c claim gpu"),
        Unusable("pod_without_name", "pod ml/?"),
    )
    allocatable = pb.AllocatableResourcesResponse(devices=[devices(NV, GPU_A, "")])
    assert allocatable_from_response(allocatable) == (AllocatableDevice(NV, GPU_A, ()),)
    assert unusable(allocatable) == (Unusable("empty_device_id", f"allocatable {NV}"),)
    # the realistic reply: only the claim resource an old kubelet reports without a device
    assert unusable(LIST) == (
        Unusable(
            "dra_claim_resource_without_device",
            "pod gpu-test2/pod0 ctr0 claim pod0-shared-gpu-4xk2p",
        ),
    )


ALLOCATABLE = pb.AllocatableResourcesResponse(
    devices=[
        devices("nvidia.com/gpu", GPU_B, GPU_A, numa=NUMA0),
        devices(
            "nvidia.com/gpu.shared",
            f"{GPU_C}::0",
            f"{GPU_C}::1",
            numa=pb.TopologyInfo(nodes=[pb.NUMANode(ID=1), pb.NUMANode(ID=0)]),
        ),
        devices("nvidia.com/mig-1g.10gb", MIG),  # no topology reported
        devices("intel.com/sriov_netdevice", "0000:3b:02.1", numa=NUMA0),
    ],
    cpu_ids=[0, 1, 2, 3],
    memory=[pb.ContainerMemory(memory_type="hugepages-1Gi", size=4 << 30)],
)


def test_allocatable_golden() -> None:
    assert allocatable_from_response(ALLOCATABLE) == (
        AllocatableDevice("nvidia.com/gpu", GPU_B, (0,)),
        AllocatableDevice("nvidia.com/gpu", GPU_A, (0,)),
        AllocatableDevice("nvidia.com/gpu.shared", f"{GPU_C}::0", (0, 1)),
        AllocatableDevice("nvidia.com/gpu.shared", f"{GPU_C}::1", (0, 1)),
        AllocatableDevice("nvidia.com/mig-1g.10gb", MIG, ()),
    )


def test_allocatable_round_trip() -> None:
    devices_ = allocatable_from_response(ALLOCATABLE)
    wire = allocatable_response(devices_).SerializeToString()
    resp = pb.AllocatableResourcesResponse.FromString(wire)
    assert allocatable_from_response(resp) == devices_


def test_list_response_round_trip() -> None:
    wire = list_response(reversed(GOLDEN)).SerializeToString()
    assert assignments_from_list(pb.ListPodResourcesResponse.FromString(wire)) == GOLDEN


def test_list_response_shape() -> None:
    resp = list_response(GOLDEN)
    assert [(p.namespace, p.name) for p in resp.pod_resources] == sorted(
        {(r.namespace, r.pod) for r in GOLDEN}
    )
    pod0 = next(p for p in resp.pod_resources if p.name == "pod0")
    (dra,) = pod0.containers[0].dynamic_resources
    assert dra.claim_namespace == "gpu-test2"
    assert [(c.driver_name, c.pool_name, c.device_name) for c in dra.claim_resources] == [
        ("gpu.nvidia.com", "worker-1", "gpu-0"),
        ("gpu.nvidia.com", "worker-1", "gpu-1"),
    ]


def test_get_response() -> None:
    resp = get_response(GOLDEN, "ml", "trainer-0")
    assert resp is not None
    assert resp.pod_resources.name == "trainer-0"
    assert list(resp.pod_resources.containers[0].devices[0].device_ids) == [GPU_B, GPU_A]
    assert get_response(GOLDEN, "ml", "nobody") is None


name = st.sampled_from(["a", "b", "web-0"])
plugin_rows = st.builds(
    DeviceAssignment,
    name,
    name,
    name,
    st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb"]),
    st.sampled_from([GPU_A, f"{GPU_A}::1", MIG, f"{MIG}::2", MIG_LEGACY, "nvidia0/vgpu1"]),
)
dra_rows = st.builds(
    DeviceAssignment,
    name,
    name,
    name,
    st.sampled_from(["dra:gpu.nvidia.com", "dra:gpu.example.com"]),
    st.sampled_from(["worker-1/gpu-0", "worker-1/gpu-1", "cluster/rack-1/gpu-0"]),
    st.sampled_from(["ml/shared-gpu", "ml/train-0-gpu-x7k2p", "other/claim"]),
    st.sampled_from(["", "8d1c9c0e-1b7e-4a3f-9d55-2f8e0a6b4c71"]),
)


@given(st.frozensets(plugin_rows | dra_rows, max_size=12))
def test_any_assignments_round_trip(rows: frozenset[DeviceAssignment]) -> None:
    wire = list_response(rows).SerializeToString()
    assert assignments_from_list(pb.ListPodResourcesResponse.FromString(wire)) == tuple(
        sorted(rows)
    )
