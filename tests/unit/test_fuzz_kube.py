"""Fuzz the Kubernetes edge: V1Pod / V1Node (kubernetes_asyncio models) → our records.

Two ways in, as in the agent: models built directly with random and missing fields (``None``
metadata, spec or status, no owner references, several controllers, odd phases and
timestamps), and JSON objects deserialized by the client library exactly as the watch does.
:func:`agents.kube.translate.pod_record` / :func:`agents.kube.translate.node_record` have no
rejection path: they must turn every object the client library accepts into a record the codec
writes and reads back unchanged, with only the GPU resources, ``gpuattr.io/`` annotations and
GPU labels kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
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
from kubernetes_asyncio.client.api_client import ApiClient

from agents.kube.translate import ANNOTATION_PREFIX, GPU_PREFIX, node_record, pod_record
from agents.kube.watch import PodWatcher, make_api_client
from agents.selfmetrics import SOURCE_ERRORS
from agents.types import AgentRecord
from contract import codec
from contract.inputs import NodeRecord, OwnerRef, PodRecord
from infra.settings import KubeSettings
from sim.apiserver import ApiServerDouble
from tests.helpers import wait_for

text = st.text(max_size=16)
maybe_text = st.one_of(st.none(), text)
zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=14)), timezone(timedelta(hours=-12, minutes=-30))]
)
#: aware datetimes over the whole range; naive ones from year 2 (a naive year 1 is the regression
#: test_naive_year_one_timestamp_does_not_crash below)
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


# --- JSON, through the client library's deserializer (what the watch hands us) ----------------

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), text)
rfc3339 = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 1), timezones=st.just(UTC)).map(
        lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ")
    ),
    st.sampled_from(["0001-01-01T00:00:00Z", "2024-02-29T12:00:00.123456Z", "not a time", ""]),
)


def optional(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A JSON object with any subset of ``fields``, plus unknown ones."""
    return st.fixed_dictionaries(
        {}, optional={**fields, "someNewField": json_scalars, "x-unknown": json_scalars}
    )


raw_owner = st.fixed_dictionaries(
    {"apiVersion": st.just("apps/v1"), "kind": text, "name": text, "uid": text},
    optional={"controller": st.one_of(st.none(), st.booleans())},
)
raw_meta = optional(
    name=text,
    namespace=text,
    uid=text,
    labels=st.dictionaries(label_keys, text, max_size=3),
    annotations=st.dictionaries(annotation_keys, text, max_size=3),
    ownerReferences=st.lists(raw_owner, max_size=2),
    creationTimestamp=rfc3339,
    deletionTimestamp=rfc3339,
    deletionGracePeriodSeconds=st.integers(-(2**63), 2**63 - 1),
    resourceVersion=text,
)
raw_pods = optional(
    apiVersion=st.just("v1"),
    kind=st.just("Pod"),
    metadata=st.one_of(st.none(), raw_meta),
    spec=st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {
                "containers": st.lists(
                    optional(
                        resources=optional(
                            requests=quantities, limits=quantities, claims=st.just([])
                        )
                    ).map(lambda c: {"name": "c", **c}),
                    max_size=3,
                )
            },
            optional={"nodeName": text},
        ),
    ),
    status=st.one_of(st.none(), optional(phase=st.one_of(text, st.integers()), podIP=text)),
)
raw_nodes = optional(
    metadata=st.one_of(st.none(), raw_meta),
    status=st.one_of(st.none(), optional(allocatable=quantities, capacity=quantities)),
)


@pytest.fixture
async def api() -> AsyncIterator[ApiClient]:
    async with ApiClient() as client:
        yield client


def deserialize(api: ApiClient, raw: dict[str, Any], kind: str) -> Any:
    response: Any = SimpleNamespace(data=json.dumps(raw))  # all deserialize reads is .data
    return api.deserialize(response, kind)


JSON_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@JSON_SETTINGS
@given(raw=raw_pods, deleted=st.booleans())
async def test_any_pod_json_the_client_accepts_becomes_a_record(
    api: ApiClient, raw: dict[str, Any], deleted: bool
) -> None:
    try:
        pod = deserialize(api, raw, "V1Pod")
    except Exception as exc:  # the client library refused it (see the regression test below)
        event(f"client refused: {type(exc).__name__}")
        return
    event("client accepted")
    check_pod(pod, pod_record(pod, node="gpu-a", ts_ms=7, deleted=deleted), deleted=deleted)


@JSON_SETTINGS
@given(raw=raw_nodes)
async def test_any_node_json_the_client_accepts_becomes_a_record(
    api: ApiClient, raw: dict[str, Any]
) -> None:
    try:
        node = deserialize(api, raw, "V1Node")
    except Exception as exc:
        event(f"client refused: {type(exc).__name__}")
        return
    event("client accepted")
    rec = node_record(node, ts_ms=7)
    assert codec.decode(codec.encode(rec)) == rec


# --- found by fuzzing ------------------------------------------------------------------------


async def test_naive_year_one_timestamp_does_not_crash(api: ApiClient) -> None:
    raw = {"metadata": {"name": "p", "uid": "u", "creationTimestamp": "0001-01-01T00:00:00"}}
    pod = deserialize(api, raw, "V1Pod")
    rec = pod_record(pod, node="gpu-a", ts_ms=7)
    assert rec.uid == "u"


def apiserver_errors() -> float:
    return sum(
        s.value
        for s in next(iter(SOURCE_ERRORS.collect())).samples
        if s.labels.get("source") == "apiserver" and s.name.endswith("_total")
    )


async def test_an_object_the_client_refuses_does_not_end_the_pod_watcher() -> None:
    good = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": "good", "namespace": "ml", "uid": "u-good"},
        "spec": {"nodeName": "gpu-a", "containers": [{"name": "c"}]},
    }
    bad = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": "bad", "namespace": "ml", "uid": "u-bad"},
        "spec": {"nodeName": "gpu-a", "containers": [{"image": "no-name"}]},
    }
    out: list[AgentRecord] = []

    async def emit(record: AgentRecord) -> None:
        out.append(record)

    before = apiserver_errors()
    async with ApiServerDouble(lambda: ([good, bad], []), tick_s=0.02, bookmark_s=0.2) as server:
        settings_ = KubeSettings(api_url=server.url, watch_timeout_s=30, max_backoff_s=0.05)
        client = await make_api_client(settings_)
        watcher = PodWatcher(
            node="gpu-a", api=client, emit=emit, now_ms=lambda: 1, settings=settings_
        )
        task = asyncio.create_task(watcher.run())
        try:
            await wait_for(
                lambda: (
                    task.done() or server.lists >= 2 or any(isinstance(r, PodRecord) for r in out)
                ),
                timeout_s=5,
                what="the watcher to retry, skip the object, or die",
            )
            assert not task.done(), f"the pod watcher ended: {task.exception()!r}"
            await wait_for(lambda: apiserver_errors() > before, timeout_s=5, what="a counted error")
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            await client.close()
