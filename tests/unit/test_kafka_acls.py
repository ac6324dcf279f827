"""Each role's Kafka ACLs (infra/acls.py) and the deploy's Strimzi KafkaUsers: the same rules.

The broker itself enforces them in tests/integration/test_kafka_security.py.
"""

from __future__ import annotations

from typing import Any

from infra.acls import DEFAULT_PRINCIPALS, ROLES, Acl, role_acls
from infra.settings import KafkaSettings, SinkSettings, WorkerSettings
from tests.kustomize_render import base_docs

PATTERNS = {"literal": "literal", "prefix": "prefix"}


def shipped() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in base_docs() if d["kind"] == "KafkaUser"}


def deploy_acls(user: dict[str, Any]) -> set[Acl]:
    assert user["spec"]["authentication"] == {"type": "scram-sha-512"}
    assert user["spec"]["authorization"]["type"] == "simple"
    name = user["metadata"]["name"]
    found = set()
    for rule in user["spec"]["authorization"]["acls"]:
        assert rule.get("type", "allow") == "allow"
        assert rule.get("host", "*") == "*"
        res = rule["resource"]
        for op in rule["operations"]:
            found.add(Acl(name, res["type"], res["name"], PATTERNS[res["patternType"]], op))
    return found


def defaults() -> dict[str, tuple[Acl, ...]]:
    return dict(role_acls(KafkaSettings(), WorkerSettings().app_id, SinkSettings().group_id))


def test_the_deploy_carries_exactly_the_rules_of_every_role() -> None:
    users = shipped()
    assert set(users) == set(DEFAULT_PRINCIPALS.values())  # one user per role, no other
    for role, acls in defaults().items():
        user = users[DEFAULT_PRINCIPALS[role]]
        assert deploy_acls(user) == set(acls), role
        assert user["metadata"]["labels"]["strimzi.io/cluster"] == "my-cluster"


def test_the_comparison_sees_a_difference() -> None:
    users = shipped()
    worker = users["gpuattr-worker"]
    worker["spec"]["authorization"]["acls"][0]["operations"].append("Describe")
    assert deploy_acls(worker) != set(defaults()["worker"])


def test_each_role_may_do_only_its_job() -> None:
    rules = defaults()
    assert set(rules) == set(ROLES)
    every = [a for acls in rules.values() for a in acls]
    assert not [a for a in every if a.operation == "All" or a.resource == "cluster"]
    assert not [
        a
        for a in every
        if a.name in ("*", "") or (a.pattern == "prefix" and a.name in ("gpuattr", "gpuattr."))
    ]

    def who(operation: str, name: str) -> set[str]:
        return {a.user for a in every if a.operation == operation and a.name == name}

    # the agents and the cluster role (Node deletions, the partitions' clock)
    assert who("Write", "gpuattr.node-events") == {"gpuattr-agent", "gpuattr-cluster"}
    assert who("Read", "gpuattr.node-events") == {"gpuattr-worker"}
    assert who("Write", "gpuattr.alerts") == {"gpuattr-worker"}
    assert who("Read", "gpuattr.alerts") == {"gpuattr-sink", "gpuattr-reader"}
    assert who("Write", "gpuattr.deadletter") == {"gpuattr-worker", "gpuattr-sink"}
    assert who("Read", "gpuattr-sink") == {"gpuattr-sink"}  # the sink's group
    assert who("Read", "gpuattr-worker") == {"gpuattr-worker"}  # the worker's group
    assert {a.user for a in every if a.operation == "Create"} == {"gpuattr-worker"}
    assert [a.name for a in every if a.pattern == "prefix"] == ["gpuattr-worker-"] * 3
    assert [(a.operation, a.name) for a in rules["agent"]] == [
        ("Write", "gpuattr.doctor"),
        ("Write", "gpuattr.node-events"),
    ]
    assert [(a.operation, a.name) for a in rules["cluster"]] == [
        ("Write", "gpuattr.demand-events"),
        ("Write", "gpuattr.doctor"),
        ("Write", "gpuattr.node-events"),
    ]
    # the doctor's clock probe: every role writes it, nobody reads it
    assert who("Write", "gpuattr.doctor") == set(DEFAULT_PRINCIPALS.values())
    assert who("Read", "gpuattr.doctor") == set()
    # demand: the cluster role's pending pods and the workers' supply in, the pools'
    # demand records out
    assert who("Write", "gpuattr.demand-events") == {"gpuattr-cluster", "gpuattr-worker"}
    assert who("Read", "gpuattr.demand-events") == {"gpuattr-worker", "gpuattr-reader"}
    assert who("Write", "gpuattr.demand") == {"gpuattr-worker"}
    assert who("Read", "gpuattr.demand") == {"gpuattr-reader"}
