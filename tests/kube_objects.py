"""Hypothesis strategies for Kubernetes objects (kubernetes_asyncio ``V1Pod`` / ``V1Node``
models), and the check every pod record made of one must pass.

Models built directly with random and missing fields (``None`` metadata, spec or status, no
owner references, several controllers, odd phases and timestamps, device health with odd or
missing values); the key and quantity strategies are shared with the JSON objects of
``tests/unit/test_fuzz_kube_json.py``. :func:`from_json` makes a model of an object's JSON the
way the watch does (the client library's deserializer, its validation included).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any, get_args

from hypothesis import strategies as st
from kubernetes_asyncio.client import (
    V1Container,
    V1ContainerStatus,
    V1Node,
    V1NodeStatus,
    V1ObjectMeta,
    V1OwnerReference,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
    V1ResourceHealth,
    V1ResourceRequirements,
    V1ResourceStatus,
)
from kubernetes_asyncio.client.api_client import ApiClient

from agents.kube.translate import ANNOTATION_PREFIX
from contract import codec
from contract.inputs import OwnerRef, PodRecord, ResourceHealthState


def from_json(api: ApiClient, raw: dict[str, Any], kind: str) -> Any:
    """``raw`` (an object as the API server sends it) as the client library's model ``kind``."""
    response: Any = SimpleNamespace(data=json.dumps(raw))  # all deserialize reads is .data
    return api.deserialize(response, kind)


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
device_health = st.builds(
    V1ResourceHealth,
    resource_id=st.one_of(st.sampled_from(["GPU-0::1", "MIG-0", "dra/pool/gpu-0", ""]), text),
    health=st.one_of(
        st.none(), st.sampled_from([*get_args(ResourceHealthState), "Degraded", ""]), text
    ),
    message=maybe_text,
)
resource_statuses = st.builds(
    V1ResourceStatus,
    name=st.one_of(st.sampled_from(["nvidia.com/gpu", "claim:gpu/req-0"]), text),
    resources=st.one_of(st.none(), st.lists(device_health, max_size=3)),
)
container_statuses = st.builds(
    V1ContainerStatus,
    name=st.one_of(st.sampled_from(["trainer", "sidecar"]), text),
    image=st.just("img"),
    image_id=st.just(""),
    ready=st.booleans(),
    restart_count=st.just(0),
    allocated_resources_status=st.one_of(st.none(), st.lists(resource_statuses, max_size=2)),
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
            container_statuses=st.one_of(st.none(), st.lists(container_statuses, max_size=3)),
            init_container_statuses=st.one_of(st.none(), st.lists(container_statuses, max_size=1)),
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
    status = pod.status
    read = [
        (c.name, r.name, h.resource_id)
        for c in (status.container_statuses if status else None) or []
        for r in c.allocated_resources_status or []
        for h in r.resources or []
        if h.resource_id
    ]
    keys = [(h.container, h.resource, h.resource_id) for h in rec.resource_health]
    assert keys == sorted(set(read))  # one per device, sorted; init containers not read
    assert all(h.health in get_args(ResourceHealthState) for h in rec.resource_health)
    assert codec.decode(codec.encode(rec)) == rec  # valid on the wire
