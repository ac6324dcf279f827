"""Hypothesis strategies for kubelet PodResources replies, and the oracle they are checked against.

Random but valid ``ListPodResourcesResponse`` / ``AllocatableResourcesResponse`` messages (any
names including empty ones, unknown resources, DRA claims with missing fields, CPU and memory
noise); random bytes, and valid replies truncated or with flipped bytes; and the rows the
translation must produce, written independently of the agent's code.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import strategies as st

from contract.inputs import DeviceAssignment
from proto.podresources.v1 import api_pb2 as pb
from tests.fuzz_strategies import proto_text
from tests.podresources_wire import PREFIXES

names = st.one_of(st.sampled_from(["", "ml", "trainer-0", "main"]), proto_text)
resources = st.one_of(
    st.sampled_from(
        [
            "nvidia.com/gpu",
            "nvidia.com/gpu.shared",
            "nvidia.com/mig-1g.10gb",
            "nvidia.com/",
            "NVIDIA.com/gpu",
            "amd.com/gpu",
            "cpu",
            "",
        ]
    ),
    proto_text,
)
ids = st.one_of(
    st.sampled_from(["", "GPU-8b2c4a51", "GPU-8b2c4a51::3", "MIG-1f3a", "nvidia0/vgpu1"]),
    proto_text,
)
int64 = st.integers(-(2**63), 2**63 - 1)
numa = st.builds(pb.NUMANode, ID=int64)
devices = st.builds(
    pb.ContainerDevices,
    resource_name=resources,
    device_ids=st.lists(ids, max_size=5),
    topology=st.one_of(st.none(), st.builds(pb.TopologyInfo, nodes=st.lists(numa, max_size=3))),
)
memory = st.builds(pb.ContainerMemory, memory_type=names, size=st.integers(0, 2**64 - 1))
claim_resources = st.builds(
    pb.ClaimResource,
    cdi_devices=st.lists(st.builds(pb.CDIDevice, name=names), max_size=2),
    driver_name=st.one_of(st.just("gpu.nvidia.com"), names),
    pool_name=st.one_of(st.just("node-a/pool"), names),
    device_name=st.one_of(st.just("gpu-0"), names),
    share_id=st.one_of(st.none(), names),
)
containers = st.builds(
    pb.ContainerResources,
    name=names,
    devices=st.lists(devices, max_size=3),
    cpu_ids=st.lists(int64, max_size=3),
    memory=st.lists(memory, max_size=2),
    dynamic_resources=st.lists(
        st.builds(
            pb.DynamicResource,
            claim_name=names,
            claim_namespace=names,
            claim_resources=st.lists(claim_resources, max_size=3),
        ),
        max_size=2,
    ),
)
list_replies = st.builds(
    pb.ListPodResourcesResponse,
    pod_resources=st.lists(
        st.builds(
            pb.PodResources,
            name=names,
            namespace=names,
            containers=st.lists(containers, max_size=3),
            cpu_ids=st.lists(int64, max_size=2),
            memory=st.lists(memory, max_size=2),
        ),
        max_size=4,
    ),
)
allocatable_replies = st.builds(
    pb.AllocatableResourcesResponse,
    devices=st.lists(devices, max_size=4),
    cpu_ids=st.lists(int64, max_size=3),
    memory=st.lists(memory, max_size=2),
)


@st.composite
def corrupted(draw: st.DrawFn, messages: st.SearchStrategy[Any]) -> bytes:
    """Random bytes, or a valid serialization truncated / with bytes flipped / spliced."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=300))
    data = bytearray(draw(messages).SerializeToString())
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["truncate", "flip", "insert"]))
        if op == "truncate":
            del data[i:]
        elif op == "flip" and i < len(data):
            data[i] ^= draw(st.integers(1, 255))
        else:
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


def oracle(resp: pb.ListPodResourcesResponse) -> set[DeviceAssignment]:
    """The rows the translation must produce, written independently of agents/kubelet.py."""
    rows: set[DeviceAssignment] = set()
    for pod in resp.pod_resources:
        if pod.namespace == "" or pod.name == "":  # nobody to attribute to: counted instead
            continue
        for ctr in pod.containers:
            for dev in ctr.devices:
                if any(dev.resource_name.startswith(p) for p in PREFIXES):
                    rows |= {
                        DeviceAssignment(pod.namespace, pod.name, ctr.name, dev.resource_name, i)
                        for i in dev.device_ids
                        if i != ""  # no device to attribute: counted instead
                    }
            for claim in ctr.dynamic_resources:
                for res in claim.claim_resources:
                    if res.driver_name != "" and res.device_name != "":
                        resource = "dra:" + res.driver_name
                        device = res.pool_name + "/" + res.device_name
                        ref = claim.claim_namespace + "/" + claim.claim_name
                        rows.add(
                            DeviceAssignment(
                                pod.namespace,
                                pod.name,
                                ctr.name,
                                resource,
                                device,
                                claim=ref,
                                share_id=res.share_id,
                            )
                        )
    return rows


def unusable_oracle(resp: pb.ListPodResourcesResponse) -> Counter[str]:
    """How many entries of each reason the collector must count, written independently."""
    found: Counter[str] = Counter()
    for pod in resp.pod_resources:
        wanted = False
        for ctr in pod.containers:
            for dev in ctr.devices:
                if any(dev.resource_name.startswith(p) for p in PREFIXES):
                    wanted = True
                    found["empty_device_id"] += "" in list(dev.device_ids)
            for claim in ctr.dynamic_resources:
                for res in claim.claim_resources:
                    wanted = True
                    found["dra_claim_resource_without_device"] += (
                        res.driver_name == "" or res.device_name == ""
                    )
        found["pod_without_name"] += wanted and (pod.namespace == "" or pod.name == "")
    return +found  # reasons with a count only
