"""PodResources protobuf → records, from realistic replies (golden expectations)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agents.diff import diff_assignments
from agents.events import AllocatableDevice, DeviceAssignment
from agents.kubelet import (
    allocatable_from_response,
    allocatable_response,
    assignments_from_list,
    list_response,
)
from proto.podresources.v1 import api_pb2 as pb

G = "GPU-8b2c4a51-8a9e-4f1b-a0d2-3c5e7f9a1b2c"
M = "MIG-5f0e1d2c-3b4a-5968-7a8b-9c0d1e2f3a4b"

LIST = pb.ListPodResourcesResponse(
    pod_resources=[
        pb.PodResources(
            name="trainer-0",
            namespace="ml",
            containers=[
                pb.ContainerResources(
                    name="main",
                    devices=[
                        pb.ContainerDevices(
                            resource_name="nvidia.com/gpu",
                            device_ids=[G],
                            topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=0)]),
                        )
                    ],
                    cpu_ids=[2, 3],
                ),
                pb.ContainerResources(name="sidecar"),
            ],
        ),
        pb.PodResources(
            name="nb-1",
            namespace="dev",
            containers=[
                pb.ContainerResources(
                    name="jupyter",
                    devices=[
                        pb.ContainerDevices(
                            resource_name="nvidia.com/gpu.shared", device_ids=[f"{G}::3", f"{G}::5"]
                        )
                    ],
                )
            ],
        ),
        pb.PodResources(
            name="mig-pod",
            namespace="inf",
            containers=[
                pb.ContainerResources(
                    name="srv",
                    devices=[
                        pb.ContainerDevices(resource_name="nvidia.com/mig-1g.10gb", device_ids=[M])
                    ],
                )
            ],
        ),
        pb.PodResources(
            name="coredns-5d78c9869d-x",
            namespace="kube-system",
            containers=[pb.ContainerResources(name="coredns", cpu_ids=[1])],
        ),
        pb.PodResources(
            name="sriov",
            namespace="net",
            containers=[
                pb.ContainerResources(
                    name="c",
                    devices=[
                        pb.ContainerDevices(
                            resource_name="intel.com/sriov", device_ids=["0000:3b:02.1"]
                        )
                    ],
                )
            ],
        ),
        pb.PodResources(
            name="dra-pod",
            namespace="gpu-test2",
            containers=[
                pb.ContainerResources(
                    name="ctr0",
                    dynamic_resources=[
                        pb.DynamicResource(
                            claim_name="shared-gpu",
                            claim_namespace="gpu-test2",
                            claim_resources=[
                                pb.ClaimResource(
                                    driver_name="gpu.nvidia.com",
                                    pool_name="node-a",
                                    device_name="gpu-0",
                                )
                            ],
                        )
                    ],
                )
            ],
        ),
    ]
)


def test_list_golden() -> None:
    assert assignments_from_list(LIST) == (
        DeviceAssignment("dev", "nb-1", "jupyter", "nvidia.com/gpu.shared", f"{G}::3"),
        DeviceAssignment("dev", "nb-1", "jupyter", "nvidia.com/gpu.shared", f"{G}::5"),
        DeviceAssignment("gpu-test2", "dra-pod", "ctr0", "dra:gpu.nvidia.com", "node-a/gpu-0"),
        DeviceAssignment("inf", "mig-pod", "srv", "nvidia.com/mig-1g.10gb", M),
        DeviceAssignment("ml", "trainer-0", "main", "nvidia.com/gpu", G),
    )


def test_other_vendors_only_when_asked() -> None:
    rows = assignments_from_list(LIST, resource_prefixes=("intel.com/",))
    assert [r.device_id for r in rows if r.resource.startswith("intel")] == ["0000:3b:02.1"]


def test_allocatable_with_numa() -> None:
    resp = pb.AllocatableResourcesResponse(
        devices=[
            pb.ContainerDevices(
                resource_name="nvidia.com/gpu",
                device_ids=[f"{G}::0", f"{G}::1"],
                topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=1)]),
            )
        ],
        cpu_ids=[0, 1],
    )
    assert allocatable_from_response(resp) == (
        AllocatableDevice("nvidia.com/gpu", f"{G}::0", (1,)),
        AllocatableDevice("nvidia.com/gpu", f"{G}::1", (1,)),
    )


def test_wire_round_trip_through_bytes() -> None:
    rows = assignments_from_list(LIST)
    plugin_rows = tuple(r for r in rows if not r.resource.startswith("dra:"))
    wire = list_response(plugin_rows).SerializeToString()
    assert assignments_from_list(pb.ListPodResourcesResponse.FromString(wire)) == plugin_rows
    alloc = (AllocatableDevice("nvidia.com/gpu", G, (0,)),)
    assert allocatable_from_response(allocatable_response(alloc)) == alloc


ids = st.sampled_from(["GPU-a", "GPU-a::1", "GPU-b", "MIG-c", "nvidia0"])
rows = st.frozensets(
    st.builds(
        DeviceAssignment,
        st.sampled_from(["ns1", "ns2"]),
        st.sampled_from(["p", "q"]),
        st.just("c"),
        st.just("nvidia.com/gpu"),
        ids,
    ),
    max_size=8,
)


@given(st.none() | rows, rows)
def test_diff_applied_to_previous_gives_current(
    previous: frozenset[DeviceAssignment] | None, current: frozenset[DeviceAssignment]
) -> None:
    added, removed = diff_assignments(previous, current)
    assert ((previous or frozenset()) - set(removed)) | set(added) == current
    assert not set(added) & set(removed)
    assert list(added) == sorted(added)
