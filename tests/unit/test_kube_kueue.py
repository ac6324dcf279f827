"""Kueue Workloads → ``QueuedWorkload`` (:mod:`agents.kube.kueue`), in both served versions:
what they ask for, where they stand, Kueue's own word, and what cannot be used."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.kube.kueue import (
    Queues,
    cluster_queue,
    local_queue,
    queued_workload,
    read_workload,
    resource_flavor,
)
from contract.codec import WIRE
from contract.inputs import GpuRequest, OwnerRef, QueuedWorkload
from tests.kueue_objects import (
    A100,
    GPU,
    H100,
    T0_MS,
    admitted,
    condition,
    evicted,
    finished,
    flavor,
    pending,
    pending_message,
    podset,
    workload,
)
from tests.kueue_objects import cluster_queue as cq
from tests.kueue_objects import (
    local_queue as lq,
)

VERSIONS = ("v1beta2", "v1beta1")
MINUTE = 60_000


def queues(version: str, **flavors: str | None) -> Queues:
    """A cluster of one LocalQueue on ``gpu-cq``, whose GPU group lists ``flavors``."""
    found = [resource_flavor(flavor(n, p, version)) for n, p in flavors.items()]
    cluster = cluster_queue(cq("gpu-cq", dict.fromkeys(flavors, 8), version))
    local = local_queue(lq("research", "user-queue", "gpu-cq", version))
    assert cluster is not None
    assert local is not None
    return Queues(
        local=dict([local]),
        cluster=dict([cluster]),
        flavors=dict(f for f in found if f is not None),
    )


def translate(wl: dict[str, Any], q: Queues) -> tuple[QueuedWorkload | None, list[str]]:
    facts = read_workload(wl)
    assert facts is not None
    record, problems = queued_workload(facts, q, ts_ms=T0_MS + 5 * MINUTE)
    return record, [p.reason for p in problems]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_queued_job_of_two_pods_of_four_gpus(version: str) -> None:
    message = pending_message("main", "a100", 4)
    wl = workload(
        "job-sample-job-7c4d8",
        [podset("main", 2, 4)],
        version=version,
        priority_class="high",
        priority=1000,
        status=pending(message),
    )
    record, problems = translate(wl, queues(version, a100=A100))
    assert problems == []
    assert record == QueuedWorkload(
        ts_ms=T0_MS + 5 * MINUTE,
        namespace="research",
        name="job-sample-job-7c4d8",
        uid="0b4f6a2e-1c9d-4e57-9a0b-3f2d1e6c8a71",
        created_ms=T0_MS,
        requests=(GpuRequest(GPU, 8, product=A100),),
        state="queued",
        queue="user-queue",
        cluster_queue="gpu-cq",
        priority=1000,
        priority_class="high",
        owner=OwnerRef("Job", "sample-job"),
        reason="Pending",
        message=message,
        since_ms=T0_MS,
        resource_version="4711",
    )


def gpus(record: QueuedWorkload | None) -> list[tuple[str, int, str]]:
    assert record is not None
    return [(r.resource, r.count, r.product) for r in record.requests]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("podsets", "asked"),
    [
        pytest.param([podset("main", 2, 4)], [(GPU, 8, A100)], id="one-podset"),
        pytest.param(
            [podset("launcher", 1, None), podset("worker", 3, 2)],
            [(GPU, 6, A100)],
            id="launcher-without-gpus-and-workers",
        ),
        pytest.param(
            [podset("driver", 1, 1), podset("worker", 4, 2)], [(GPU, 9, A100)], id="both-ask"
        ),
        pytest.param(
            [podset("main", 2, 1, init_gpus=3)], [(GPU, 6, A100)], id="init-container-peak"
        ),
        pytest.param([podset("main", 0, 4)], [], id="count-zero"),
    ],
)
def test_requests_are_count_times_the_pods_request_summed_over_podsets(
    version: str, podsets: list[dict[str, Any]], asked: list[tuple[str, int, str]]
) -> None:
    record, problems = translate(
        workload("wl", podsets, version=version), queues(version, a100=A100)
    )
    assert problems == []
    if asked:
        assert gpus(record) == asked
    else:
        assert record is None  # asks for no GPU: not published


@pytest.mark.parametrize("version", VERSIONS)
def test_partial_admission_counts_what_was_reserved(version: str) -> None:
    """Quota reserved for 3 of 5 workers, an admission check pending: queued, 3 of 2 GPUs."""
    status = admitted("gpu-cq", {"launcher": (1, "a100"), "worker": (3, "a100")})
    status["conditions"][1] = condition(
        "Admitted", "False", "UnsatisfiedAdmissionChecks", "The workload has not all checks ready"
    )
    wl = workload(
        "wl", [podset("launcher", 1, None), podset("worker", 5, 2)], version=version, status=status
    )
    record, _ = translate(wl, queues(version, a100=A100))
    assert record is not None
    assert (record.state, gpus(record)) == ("queued", [(GPU, 6, A100)])
    assert (record.reason, record.cluster_queue) == ("UnsatisfiedAdmissionChecks", "gpu-cq")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("status", "state", "reason", "since_ms"),
    [
        pytest.param(None, "queued", "", T0_MS, id="not-judged-yet"),
        pytest.param(
            pending(pending_message("main", "a100", 4)), "queued", "Pending", T0_MS, id="pending"
        ),
        pytest.param(
            admitted("gpu-cq", {"main": (2, "a100")}), "admitted", "", T0_MS, id="admitted"
        ),
        pytest.param(
            evicted(
                "Preempted to accommodate a workload",
                "2026-12-07T10:20:00Z",
                "2026-12-07T10:21:00Z",
            ),
            "queued",
            "Preempted",
            T0_MS + 21 * MINUTE,
            id="evicted-requeued",
        ),
        pytest.param(
            {
                **admitted("gpu-cq", {"main": (2, "a100")}),
                **finished("Succeeded", "Job finished successfully", "2026-12-07T11:00:00Z"),
            },
            "finished",
            "Succeeded",
            T0_MS,
            id="finished",
        ),
        pytest.param(
            {
                "conditions": [
                    condition("PodsReady", "False", "PodsReady", "Not all pods are ready")
                ]
            },
            "queued",
            "",
            T0_MS,
            id="an-unknown-condition-alone",
        ),
    ],
)
def test_where_it_stands_and_kueues_word(
    version: str, status: dict[str, Any] | None, state: str, reason: str, since_ms: int
) -> None:
    record, _ = translate(
        workload("wl", [podset("main", 2, 4)], version=version, status=status),
        queues(version, a100=A100),
    )
    assert record is not None
    assert (record.state, record.since_ms) == (state, since_ms)
    if state == "queued":
        assert record.reason == reason
    if state == "finished":
        assert record.reason == ""  # the wait's word: none once finished


def test_an_evicted_workload_says_the_eviction() -> None:
    """Evicted True without the QuotaReserved False (written in another patch): its word."""
    status = {
        "conditions": [
            condition(
                "Evicted",
                "True",
                "PodsReadyTimeout",
                "Exceeded the PodsReady timeout",
                "2026-12-07T10:10:00Z",
            )
        ]
    }
    record, _ = translate(
        workload("wl", [podset("main", 1, 1)], status=status), queues("v1beta2", a100=A100)
    )
    assert record is not None
    assert (record.reason, record.message) == ("PodsReadyTimeout", "Exceeded the PodsReady timeout")
    assert record.since_ms == T0_MS + 10 * MINUTE


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("flavors", "product", "problems"),
    [
        pytest.param({"a100": A100}, A100, [], id="one-flavor"),
        pytest.param({"a100": A100, "a100-spot": A100}, A100, [], id="two-flavors-one-product"),
        pytest.param({"a100": A100, "h100": H100}, "", [], id="two-products"),
        pytest.param({"gpu": None}, "", ["flavor_without_product"], id="flavor-without-product"),
    ],
)
def test_product_is_the_one_the_flavors_agree_on(
    version: str, flavors: dict[str, str | None], product: str, problems: list[str]
) -> None:
    record, said = translate(
        workload("wl", [podset("main", 1, 2)], version=version), queues(version, **flavors)
    )
    assert gpus(record) == [(GPU, 2, product)]
    assert said == problems


def test_the_templates_selector_names_the_product_when_the_flavors_do_not() -> None:
    wl = workload("wl", [podset("main", 1, 2, nodeSelector={"nvidia.com/gpu.product": H100})])
    record, _ = translate(wl, queues("v1beta2", a100=A100, h100=H100))
    assert gpus(record) == [(GPU, 2, H100)]


def test_the_admissions_cluster_queue_is_the_word_once_reserved() -> None:
    status = admitted("other-cq", {"main": (1, "a100")})
    record, problems = translate(
        workload("wl", [podset("main", 1, 2)], status=status), queues("v1beta2", a100=A100)
    )
    assert record is not None
    assert record.cluster_queue == "other-cq"
    assert problems == ["cluster_queue_unknown"]


@pytest.mark.parametrize(
    ("wl", "cluster_queue", "problems", "asked"),
    [
        pytest.param(
            workload("wl", [podset("main", 2, 4)], queue="nope"),
            "",
            ["queue_unknown"],
            [(GPU, 8, "")],
            id="queue-not-known",
        ),
        pytest.param(
            workload("wl", [podset("main", 2, 4)], queue=""),
            "",
            ["no_queue"],
            [(GPU, 8, "")],
            id="no-queue-name",
        ),
        pytest.param(
            workload("wl", [podset("main", 2, "four"), podset("b", 1, 1)]),
            "gpu-cq",
            ["bad_quantity"],
            [(GPU, 1, A100)],
            id="request-not-a-quantity",
        ),
        pytest.param(
            workload("wl", [podset("main", 2, "1500m"), podset("b", 1, 1)]),
            "gpu-cq",
            ["bad_quantity"],
            [(GPU, 1, A100)],
            id="request-not-whole",
        ),
        pytest.param(
            workload("wl", [{**podset("main", 1, 1), "count": "two"}, podset("b", 1, 1)]),
            "gpu-cq",
            ["bad_count"],
            [(GPU, 1, A100)],
            id="count-not-a-number",
        ),
        pytest.param(
            workload(
                "wl",
                [
                    podset(
                        "main",
                        1,
                        1,
                        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "t"}],
                    )
                ],
            ),
            "gpu-cq",
            ["dra_claims"],
            [(GPU, 1, A100)],
            id="dra-claims-not-counted",
        ),
    ],
)
def test_what_cannot_be_used_is_said_never_invented(
    wl: dict[str, Any], cluster_queue: str, problems: list[str], asked: list[tuple[str, int, str]]
) -> None:
    record, said = translate(wl, queues("v1beta2", a100=A100))
    assert record is not None
    assert record.cluster_queue == cluster_queue
    assert said == problems
    assert gpus(record) == asked


def test_a_flavor_not_known_yet_names_no_product() -> None:
    q = queues("v1beta2", a100=A100)
    q = Queues(q.local, q.cluster, {})
    record, said = translate(workload("wl", [podset("main", 1, 1)]), q)
    assert gpus(record) == [(GPU, 1, "")]
    assert said == ["flavor_unknown"]


@pytest.mark.parametrize(
    "wl",
    [
        pytest.param(workload("wl", []), id="no-podsets"),
        pytest.param({**workload("wl", [podset("main", 1, 1)]), "spec": {}}, id="no-spec"),
        pytest.param(workload("wl", [podset("main", 1, "x")]), id="only-a-bad-request"),
    ],
)
def test_nothing_usable_is_no_record(wl: dict[str, Any]) -> None:
    record, said = translate(wl, queues("v1beta2", a100=A100))
    assert record is None
    assert said
    assert set(said) <= {"no_podsets", "bad_quantity"}


def test_no_uid_is_no_workload() -> None:
    wl = workload("wl", [podset("main", 1, 1)])
    del wl["metadata"]["uid"]
    assert read_workload(wl) is None


def test_the_queue_objects() -> None:
    assert local_queue(lq("ns", "q", "cq")) == (("ns", "q"), "cq")
    assert resource_flavor(flavor("f", A100)) == ("f", A100)
    assert resource_flavor(flavor("default-flavor")) == ("default-flavor", "")
    assert cluster_queue(cq("cq", {"a": 1, "b": 2})) == (
        "cq",
        {"cpu": ("default-flavor",), "memory": ("default-flavor",), GPU: ("a", "b")},
    )
    assert cluster_queue({"metadata": {}}) is None


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


def anything_or(good: Any) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(good), json_values)


@settings(max_examples=300, deadline=None)
@given(
    count=anything_or(2),
    gpus=anything_or("4"),
    conditions=anything_or(pending("m")["conditions"]),
    admission=anything_or({"clusterQueue": "gpu-cq", "podSetAssignments": [{"count": 1}]}),
    queue=anything_or("user-queue"),
    priority=anything_or(10),
)
def test_any_shape_of_workload_is_a_record_or_nothing_never_a_crash(
    count: Any, gpus: Any, conditions: Any, admission: Any, queue: Any, priority: Any
) -> None:
    wl = workload("wl", [{**podset("main", 1, 1), "count": count}])
    wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["limits"] = {
        GPU: gpus
    }
    wl["spec"].update(queueName=queue, priority=priority)
    wl["status"] = {"conditions": conditions, "admission": admission}
    facts = read_workload(wl)
    assert facts is not None
    record, _ = queued_workload(facts, queues("v1beta2", a100=A100), ts_ms=1)
    if record is not None:
        assert WIRE.decode(WIRE.encode(record)) == record
        assert all(r.count > 0 for r in record.requests)


@pytest.mark.parametrize("version", ["v1beta2", "v1beta1"])
def test_a_workload_its_owner_deactivated_waits_for_nothing(version: str) -> None:
    """``spec.active: false``: Kueue evicts it and admits it only once active again."""
    wl = workload("wl", [podset("main", 2, 4)], version=version, status=pending("queued"))
    paused = {**wl, "spec": {**wl["spec"], "active": False}}
    record, _ = translate(paused, queues(version, a100=A100))
    assert record is not None
    assert record.state == "deactivated"
    resumed = {**wl, "spec": {**wl["spec"], "active": True}}
    again, _ = translate(resumed, queues(version, a100=A100))
    assert again is not None
    assert again.state == "queued"
