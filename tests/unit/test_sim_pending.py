"""Pods that wait for the scheduler in a scenario: parsing, the objects the API double serves
before and after binding, kube-scheduler's message, and the ``demand`` scenario's consistency."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from sim.cluster import Cluster, allocatable_counts, holds_at
from sim.kube_objects import pod_objects
from sim.scenario import PodSpec, Scenario, load, parse
from sim.scheduling import fitting_nodes, free_at, requests_of, unschedulable_message

CLUSTER = """
name = "t"
[[nodes]]
name = "a100-a"
model = "NVIDIA A100-SXM4-80GB"
gpus = 2
labels = { "nvidia.com/gpu.product" = "NVIDIA-A100-SXM4-80GB" }
[[nodes]]
name = "a100-b"
model = "NVIDIA A100-SXM4-80GB"
gpus = 1
labels = { "nvidia.com/gpu.product" = "NVIDIA-A100-SXM4-80GB" }
[[nodes]]
name = "l4-ts"
model = "NVIDIA L4"
gpus = 1
sharing = "time-slicing"
replicas = 2
rename_shared = true
labels = { "nvidia.com/gpu.product" = "NVIDIA-L4-SHARED" }
[[pods]]
namespace = "ml"
name = "train-0"
node = "a100-a"
slots = ["0", "1"]
[[pods]]
namespace = "ml"
name = "eval-x1"
workload = "Job/eval"
node = "a100-b"
slots = ["0"]
stop_s = 30
grace_s = 5
[[pods]]
namespace = "chat"
name = "chat-6c8d9f7b5-aaaaa"
workload = "Deployment/chat"
node = "l4-ts"
slots = ["0::0", "0::1"]
"""

WAITERS = """
[[pods]]
namespace = "inference"
name = "serve-5d8f7c9b6-x7k2p"
workload = "Deployment/serve"
pending_s = 5
start_s = 35
node = "a100-b"
slots = ["0"]
container = "server"
priority = 100
[[pods]]
namespace = "chat"
name = "chat-6c8d9f7b5-z7x4c"
workload = "Deployment/chat"
pending_s = 10
stop_s = 50
requests = { "nvidia.com/gpu.shared" = 1 }
node_selector = { "nvidia.com/gpu.product" = "NVIDIA-L4-SHARED" }
"""

SCENARIO = parse(tomllib.loads(CLUSTER + WAITERS))
EPOCH = 1_700_000_000.0


def pod(name: str, scenario: Scenario = SCENARIO) -> PodSpec:
    return next(p for p in scenario.pods if p.name == name)


def objects(t: float) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in pod_objects(SCENARIO, t, EPOCH)}


def test_a_pending_pod_is_parsed_with_its_wait_and_its_ask() -> None:
    serve = pod("serve-5d8f7c9b6-x7k2p")
    assert (serve.pending_s, serve.start_s, serve.node, serve.priority) == (5, 35, "a100-b", 100)
    assert serve.created_s == 5
    assert requests_of(SCENARIO, serve) == {"nvidia.com/gpu": 1}  # what its slots are
    chat = pod("chat-6c8d9f7b5-z7x4c")
    assert (chat.node, chat.slots, chat.requests) == ("", (), (("nvidia.com/gpu.shared", 1),))
    assert chat.node_selector == (("nvidia.com/gpu.product", "NVIDIA-L4-SHARED"),)
    assert pod("train-0").pending_s is None  # created bound, as before
    assert pod("train-0").created_s == 0


@pytest.mark.parametrize(
    ("name", "t", "pending", "holds"),
    [
        ("serve-5d8f7c9b6-x7k2p", 4.9, False, False),  # not created yet
        ("serve-5d8f7c9b6-x7k2p", 5, True, False),
        ("serve-5d8f7c9b6-x7k2p", 34.9, True, False),
        ("serve-5d8f7c9b6-x7k2p", 35, False, True),  # bound, holds its GPU
        ("chat-6c8d9f7b5-z7x4c", 10, True, False),
        ("chat-6c8d9f7b5-z7x4c", 49.9, True, False),
        ("chat-6c8d9f7b5-z7x4c", 50, False, False),  # deleted while waiting, never held
        ("train-0", 0, False, True),
    ],
    ids=lambda v: str(v),
)
def test_pending_then_bound_then_holding(name: str, t: float, pending: bool, holds: bool) -> None:
    p = pod(name)
    assert (p.pending_at(t), holds_at(p, t)) == (pending, holds)


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ('[[pods]]\nnamespace = "x"\nname = "p"\npending_s = 1\n', "needs pending_s and requests"),
        ('[[pods]]\nnamespace = "x"\nname = "p"\nrequests = { "nvidia.com/gpu" = 1 }\n', "needs"),
        (
            '[[pods]]\nnamespace = "x"\nname = "p"\nnode = "a100-b"\nslots = ["0"]\n'
            "pending_s = 9\nstart_s = 9\n",
            "before start_s",
        ),
        (
            '[[pods]]\nnamespace = "x"\nname = "p"\npending_s = 1\n'
            'requests = { "nvidia.com/gpu" = 0 }\n',
            "at least 1",
        ),
    ],
    ids=["no-requests", "no-pending-s", "waits-after-start", "asks-for-none"],
)
def test_inconsistent_pending_pods_are_refused(extra: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse(tomllib.loads(CLUSTER + extra))


def test_a_waiting_pod_is_unbound_with_the_schedulers_word() -> None:
    obj = objects(20)["serve-5d8f7c9b6-x7k2p"]
    assert "nodeName" not in obj["spec"]
    assert obj["spec"]["schedulerName"] == "default-scheduler"
    assert obj["spec"]["priority"] == 100
    assert obj["metadata"]["creationTimestamp"] == "2023-11-14T22:13:25Z"  # EPOCH + 5 s
    assert obj["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert obj["status"]["phase"] == "Pending"
    (cond,) = obj["status"]["conditions"]
    assert cond == {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 "
        "nodes are available: 3 No preemption victims found for incoming pod..",
        "lastProbeTime": None,
        "lastTransitionTime": "2023-11-14T22:13:25Z",
    }
    limits = obj["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "1"}


def test_the_bound_pod_is_the_same_pod_on_its_node() -> None:
    waiting, bound = objects(20)["serve-5d8f7c9b6-x7k2p"], objects(40)["serve-5d8f7c9b6-x7k2p"]
    assert bound["metadata"]["uid"] == waiting["metadata"]["uid"]
    assert bound["metadata"]["creationTimestamp"] == waiting["metadata"]["creationTimestamp"]
    assert bound["spec"]["containers"] == waiting["spec"]["containers"]
    assert bound["spec"]["nodeName"] == "a100-b"
    assert bound["status"]["phase"] == "Running"
    (cond,) = bound["status"]["conditions"]
    assert (cond["type"], cond["status"]) == ("PodScheduled", "True")
    assert cond["lastTransitionTime"] == "2023-11-14T22:13:55Z"  # EPOCH + 35 s


def test_a_pod_never_scheduled_says_what_it_asks_for_and_where() -> None:
    obj = objects(20)["chat-6c8d9f7b5-z7x4c"]
    assert "nodeName" not in obj["spec"]
    assert obj["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L4-SHARED"}
    assert obj["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu.shared": "1"}
    assert obj["status"]["conditions"][0]["message"] == (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu.shared, 2 node(s) didn't match "
        "Pod's node affinity/selector. preemption: 0/3 nodes are available: 1 No preemption "
        "victims found for incoming pod, 2 Preemption is not helpful for scheduling.."
    )
    assert "chat-6c8d9f7b5-z7x4c" not in objects(50)  # deleted at 50 s


def test_the_message_follows_the_cluster() -> None:
    """A terminating pod still holds its GPU (the scheduler counts it) until its grace ends,
    and the count of nodes is the nodes there at the time."""
    serve = pod("serve-5d8f7c9b6-x7k2p")
    a100_b = SCENARIO.node("a100-b")
    assert free_at(SCENARIO, a100_b, 32) == {"nvidia.com/gpu": 0}  # eval-x1 terminating
    assert fitting_nodes(SCENARIO, serve, 34.9) == []
    assert free_at(SCENARIO, a100_b, 35) == {"nvidia.com/gpu": 0}  # now serve holds it
    gone = CLUSTER.replace('name = "l4-ts"', 'name = "l4-ts"\ndeleted_s = 15')
    shrunk = parse(tomllib.loads(gone + WAITERS))
    assert unschedulable_message(shrunk, pod(serve.name, shrunk), 20) == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are "
        "available: 2 No preemption victims found for incoming pod.."
    )


def test_kubelets_never_see_a_waiting_pod() -> None:
    t = 20.0
    cluster = Cluster(SCENARIO, lambda: t)
    held = {row.pod for row in cluster.podresources("a100-b")[0]}
    assert held == {"eval-x1"}
    assert cluster.holders("") == []


def test_the_demand_scenario_is_what_the_scheduler_would_do() -> None:
    """While a pod of ``demand`` waits, no node could take it; no node holds more than it has;
    every waiting pod asks for GPUs; the two pools are there."""
    scenario = load("demand")
    waiters = [p for p in scenario.pods if p.pending_s is not None]
    assert {tuple(requests_of(scenario, p)) for p in waiters} == {
        ("nvidia.com/gpu",),
        ("nvidia.com/gpu.shared",),
    }
    for step in range(0, 1500):
        t = step / 10
        for p in waiters:
            if p.pending_at(t):
                assert fitting_nodes(scenario, p, t) == [], (p.name, t)
        for node in scenario.nodes:
            assert all(v >= 0 for v in free_at(scenario, node, t).values()), (node.name, t)
    assert allocatable_counts(scenario.node("dem-c")) == {"nvidia.com/gpu.shared": "4"}
    bound_later = [p for p in waiters if p.node]
    assert [p.start_s for p in bound_later] == [65, 95]
