"""Fuzz the Kubernetes edge, models first: V1Pod / V1Node (kubernetes_asyncio models) → our records.

Models built directly with random and missing fields (``None`` metadata, spec or status, no
owner references, several controllers, odd phases and timestamps).
:func:`agents.kube.translate.pod_record` / :func:`agents.kube.translate.node_record` have no
rejection path: they must turn every object into a record the codec writes and reads back
unchanged, with only the GPU resources, ``gpuattr.io/`` annotations and GPU labels kept.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes_asyncio.client import V1Node, V1Pod

from agents.kube.translate import GPU_PREFIX, node_record, pod_record
from contract import codec
from contract.inputs import NodeRecord
from tests.kube_objects import check_pod, v1_nodes, v1_pods


@settings(max_examples=200, deadline=None)
@given(pod=v1_pods, deleted=st.booleans())
def test_any_v1pod_becomes_a_record(pod: V1Pod, deleted: bool) -> None:
    check_pod(pod, pod_record(pod, node="gpu-a", ts_ms=7, deleted=deleted), deleted=deleted)


@settings(max_examples=150, deadline=None)
@given(node=v1_nodes, deleted=st.booleans())
def test_any_v1node_becomes_a_record(node: V1Node, deleted: bool) -> None:
    rec = node_record(node, ts_ms=7, deleted=deleted)
    assert isinstance(rec, NodeRecord)
    assert rec.deleted is deleted
    assert rec.node == ((node.metadata.name if node.metadata else None) or "")
    assert all(k.startswith(GPU_PREFIX) or k == "kubernetes.io/hostname" for k, _ in rec.labels)
    assert all(k.startswith(GPU_PREFIX) for k, _ in rec.allocatable)
    assert codec.decode(codec.encode(rec)) == rec
