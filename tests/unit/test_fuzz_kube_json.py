"""Fuzz the Kubernetes edge as the watch sees it: JSON objects → V1Pod / V1Node → our records.

JSON objects (any subset of the known fields, plus unknown ones) deserialized by the client
library exactly as the watch does. Every object the client library accepts must become a record
the codec writes and reads back unchanged; the cases found by fuzzing are kept as regression
tests, including a pod watcher that must survive an object the client refuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kubernetes_asyncio.client.api_client import ApiClient

from agents.kube.translate import node_record, pod_record
from agents.kube.watch import PodWatcher, make_api_client
from agents.selfmetrics import SOURCE_ERRORS
from agents.types import AgentRecord
from contract import codec
from contract.inputs import PodRecord
from infra.settings import KubeSettings
from sim.apiserver import ApiServerDouble
from tests.helpers import wait_for
from tests.kube_objects import annotation_keys, check_pod, label_keys, quantities, text

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
        "spec": {
            "nodeName": "gpu-a",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
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
