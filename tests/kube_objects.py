"""Hypothesis strategies for Kubernetes objects (kubernetes_asyncio ``V1Pod`` / ``V1Node``
models), and the check every pod record made of one must pass.

Models built directly with random and missing fields (``None`` metadata, spec or status, no
owner references, several controllers, odd phases and timestamps); the key and quantity
strategies are shared with the JSON objects of ``tests/unit/test_fuzz_kube_json.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st
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

from agents.kube.translate import ANNOTATION_PREFIX
from contract import codec
from contract.inputs import OwnerRef, PodRecord

text = st.text(max_size=16)
maybe_text = st.one_of(st.none(), text)
zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=14)), timezone(timedelta(hours=-12, minutes=-30))]
)
#: aware datetimes over the whole range; naive ones from year 2 (a naive year 1 is the regression
#: test_naive_year_one_timestamp_does_not_crash in tests/unit/test_fuzz_kube_json.py)
datetimes = st.one_of(
    st.none(),
    st.datetimes(timezones=zones),
    st.datetimes(min_value=datetime(2, 1, 1)),
)
resource_keys = st.one_of(
    st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb", "cpu"]),
    text,
)
quantities = st.dictionaries(
    resource_keys, st.one_of(st.sampled_from(["1", "8", "0", "500m", "1Gi"]), text), max_size=4
)
label_keys = st.one_of(
    st.sampled_from(
        [
            "pod-template-hash",
            "nvidia.com/gpu.replicas",
            "nvidia.com/gpu.sharing-strategy",
            "kubernetes.io/hostname",
            "app",
        ]
    ),
    text,
)
annotation_keys = st.one_of(
    st.sampled_from(["gpuattr.io/idle-threshold-pct", "gpuattr.io/idle-window-s", "other"]), text
)
owner_refs = st.builds(
    V1OwnerReference,
    api_version=st.sampled_from(["apps/v1", "batch/v1", "v1", ""]),
    kind=st.one_of(
        st.sampled_from(["ReplicaSet", "Job", "StatefulSet", "DaemonSet", "Node", ""]), text
    ),
    name=st.one_of(
        st.sampled_from(["train-7b9c6d5f4", "nightly-28000000", "nightly-1", "-", ""]), text
    ),
    uid=text,
    controller=st.one_of(st.none(), st.booleans()),
)
metas = st.builds(
    V1ObjectMeta,
    name=maybe_text,
    namespace=maybe_text,
    uid=maybe_text,
    labels=st.one_of(st.none(), st.dictionaries(label_keys, text, max_size=4)),
    annotations=st.one_of(st.none(), st.dictionaries(annotation_keys, text, max_size=4)),
    owner_references=st.one_of(st.none(), st.lists(owner_refs, max_size=3)),
    creation_timestamp=datetimes,
    deletion_timestamp=datetimes,
    deletion_grace_period_seconds=st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    resource_version=maybe_text,
)
containers = st.builds(
    V1Container,
    name=text,
    resources=st.one_of(
        st.none(),
        st.builds(
            V1ResourceRequirements,
            requests=st.one_of(st.none(), quantities),
            limits=st.one_of(st.none(), quantities),
        ),
    ),
)
v1_pods = st.builds(
    V1Pod,
    metadata=st.one_of(st.none(), metas),
    spec=st.one_of(st.none(), st.builds(V1PodSpec, containers=st.lists(containers, max_size=3))),
    status=st.one_of(
        st.none(),
        st.builds(
            V1PodStatus,
            phase=st.one_of(
                st.none(),
                st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown"]),
                text,
            ),
        ),
    ),
)
v1_nodes = st.builds(
    V1Node,
    metadata=st.one_of(st.none(), metas),
    status=st.one_of(
        st.none(),
        st.builds(V1NodeStatus, allocatable=st.one_of(st.none(), quantities)),
    ),
)


def check_pod(pod: Any, rec: PodRecord, *, deleted: bool) -> None:
    meta = pod.metadata
    assert isinstance(rec, PodRecord)
    assert rec.node == "gpu-a"
    assert rec.ts_ms == 7
    assert rec.deleted is deleted
    assert rec.uid == ((meta.uid if meta else None) or "")
    assert rec.name == ((meta.name if meta else None) or "")
    assert all(k.startswith(ANNOTATION_PREFIX) for k, _ in rec.annotations)
    refs = (meta.owner_references if meta else None) or []
    if not refs:
        assert rec.owner is None
        assert rec.workload is None
    else:
        controllers = [r for r in refs if r.controller]
        chosen = (controllers or refs)[0]
        assert rec.owner == OwnerRef(chosen.kind, chosen.name)
        assert rec.workload is not None
    assert codec.decode(codec.encode(rec)) == rec  # valid on the wire
