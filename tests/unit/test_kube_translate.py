"""Kubernetes objects → records: owner resolution and partial objects (never a crash)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes_asyncio.client import (
    V1Container,
    V1Node,
    V1NodeStatus,
    V1ObjectMeta,
    V1OwnerReference,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
    V1ResourceRequirements,
)
from kubernetes_asyncio.client.api_client import ApiClient

from agents.kube.translate import node_record, pod_record, resolve_workload
from contract.inputs import OwnerRef


@pytest.mark.parametrize(
    ("owner", "labels", "workload"),
    [
        pytest.param(
            OwnerRef("ReplicaSet", "train-7b9c6d5f4"),
            {"pod-template-hash": "7b9c6d5f4"},
            OwnerRef("Deployment", "train", inferred=True),
            id="rs-to-deployment",
        ),
        pytest.param(
            OwnerRef("ReplicaSet", "train-7b9c6d5f4"),
            {},
            OwnerRef("ReplicaSet", "train-7b9c6d5f4"),
            id="bare-replicaset",
        ),
        pytest.param(
            OwnerRef("Job", "etl-nightly-29311420"),
            {},
            OwnerRef("CronJob", "etl-nightly", inferred=True),
            id="job-to-cronjob",
        ),
        pytest.param(OwnerRef("Job", "embed-docs"), {}, OwnerRef("Job", "embed-docs"), id="job"),
        pytest.param(OwnerRef("StatefulSet", "pg"), {}, OwnerRef("StatefulSet", "pg"), id="sts"),
        pytest.param(OwnerRef("RayCluster", "r1"), {}, OwnerRef("RayCluster", "r1"), id="custom"),
        pytest.param(None, {}, None, id="bare-pod"),
    ],
)
def test_resolve_workload(
    owner: OwnerRef | None, labels: dict[str, str], workload: OwnerRef | None
) -> None:
    assert resolve_workload(owner, labels) == workload


def test_lookup_beats_naming_conventions() -> None:
    found = OwnerRef("Rollout", "canary")
    assert (
        resolve_workload(
            OwnerRef("ReplicaSet", "canary-abc"), {}, "ns", lambda kind, ns, name: found
        )
        == found
    )


def test_full_pod() -> None:
    created = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    pod = V1Pod(
        metadata=V1ObjectMeta(
            name="train-7b9c6d5f4-x2k4q",
            namespace="ml",
            uid="uid-1",
            creation_timestamp=created,
            deletion_timestamp=created,
            deletion_grace_period_seconds=30,
            resource_version="42",
            labels={"pod-template-hash": "7b9c6d5f4", "app": "train"},
            annotations={"gpuattr.io/idle-window-s": "600", "other": "dropped"},
            owner_references=[
                V1OwnerReference(
                    api_version="apps/v1",
                    kind="ReplicaSet",
                    name="train-7b9c6d5f4",
                    uid="rs",
                    controller=True,
                )
            ],
        ),
        spec=V1PodSpec(
            node_name="n1",
            containers=[
                V1Container(
                    name="trainer",
                    resources=V1ResourceRequirements(
                        limits={"nvidia.com/gpu": "2", "cpu": "4"}, requests={"nvidia.com/gpu": "2"}
                    ),
                )
            ],
        ),
        status=V1PodStatus(phase="Running"),
    )
    rec = pod_record(pod, node="n1", ts_ms=5)
    assert (rec.uid, rec.namespace, rec.name) == ("uid-1", "ml", "train-7b9c6d5f4-x2k4q")
    assert rec.created_ms == int(created.timestamp() * 1000)
    assert rec.deletion_ts_ms == rec.created_ms
    assert rec.annotations == (("gpuattr.io/idle-window-s", "600"),)
    assert rec.workload == OwnerRef("Deployment", "train", inferred=True)


async def test_partial_pod_from_json_is_published_with_what_is_known() -> None:
    raw = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "uid": "u"}}
    api = ApiClient()
    pod = api._ApiClient__deserialize(raw, "V1Pod")
    await api.close()
    rec = pod_record(pod, node="n1", ts_ms=1)
    assert (rec.uid, rec.name, rec.namespace, rec.created_ms) == ("u", "x", "", None)
    assert (rec.annotations, rec.owner, rec.workload) == ((), None, None)
    empty = pod_record(V1Pod(metadata=V1ObjectMeta()), node="n1", ts_ms=1)
    assert empty.uid == ""


def test_node_keeps_gpu_labels_and_capacity_only() -> None:
    node = V1Node(
        metadata=V1ObjectMeta(
            name="n1",
            labels={
                "nvidia.com/gpu.sharing-strategy": "mps",
                "nvidia.com/gpu.replicas": "4",
                "kubernetes.io/hostname": "n1",
                "topology.kubernetes.io/zone": "a",
            },
        ),
        status=V1NodeStatus(allocatable={"nvidia.com/gpu": "16", "cpu": "64"}),
    )
    rec = node_record(node, ts_ms=1)
    assert dict(rec.labels) == {
        "nvidia.com/gpu.sharing-strategy": "mps",
        "nvidia.com/gpu.replicas": "4",
        "kubernetes.io/hostname": "n1",
    }
    assert rec.allocatable == (("nvidia.com/gpu", "16"),)
    assert node_record(V1Node(metadata=V1ObjectMeta(name="n2")), ts_ms=1).labels == ()
