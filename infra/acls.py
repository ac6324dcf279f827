"""Kafka ACLs: one principal per role, each allowed only what its role does.

The one owner of the rule. ``gpuattr acls`` creates them on a cluster (as an admin principal),
the embedded broker's tests create them the same way, and ``deploy/kustomize/base/kafka-users.yaml``
(Strimzi ``KafkaUser`` objects) carries the same rules — ``tests/unit/test_kafka_acls.py`` shows
that the two agree.

- agent: writes ``node-events``.
- cluster (the cluster role): writes ``node-events`` (Node deletions, the ClusterPolicy, the
  partitions' clock ticks) and ``demand-events`` (pending pods, their lists, clock ticks).
- worker: reads ``node-events`` and ``demand-events`` in its group (the app id), writes
  ``attribution``, ``alerts``, ``flags``, ``node-status``, ``demand-events`` (each node's
  supply, for the demand stage), ``demand`` and ``deadletter``, and owns every topic named
  ``<app id>-…`` (its changelogs and Faust's internal topics: create, read, write).
- sink: reads ``alerts`` in its group, writes ``deadletter``.
- reader (``gpuattr report``, the demo's view, dashboards): reads ``attribution``, ``alerts``,
  ``flags``, ``node-status``, ``demand`` and ``demand-events``, without a group.

- every role (reader too): writes ``doctor``, the probe ``gpuattr doctor`` times the broker's
  clock with.

Nothing else: with ``allow.everyone.if.no.acl.found=false`` every other request is denied.
An ACL grants a topic, not a record kind: what only the cluster role may send (its ticks,
ClusterPolicies, pending-pod lists) carries its signature instead (:mod:`contract.signature`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import for_code
from aiokafka.protocol.admin import CreateAclsRequest, DescribeAclsRequest

from contract.topics import TopicRole
from infra.settings import KafkaSettings

Role = Literal["agent", "cluster", "worker", "sink", "reader"]
ROLES: tuple[Role, ...] = ("agent", "cluster", "worker", "sink", "reader")
Resource = Literal["topic", "group", "cluster", "transactionalId"]
Pattern = Literal["literal", "prefix"]
Operation = Literal[
    "All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "DescribeConfigs"
]

Grant = tuple[Resource, str, Pattern, Operation]
PREFIX_OPS: tuple[Operation, ...] = ("Create", "Read", "Write")

#: the users' default names (each role's GPUATTR_KAFKA_SASL_USERNAME)
DEFAULT_PRINCIPALS: Mapping[Role, str] = {
    "agent": "gpuattr-agent",
    "cluster": "gpuattr-cluster",
    "worker": "gpuattr-worker",
    "sink": "gpuattr-sink",
    "reader": "gpuattr-reader",
}


@dataclass(frozen=True, order=True, slots=True)
class Acl:
    """One allow rule: ``user`` may do ``operation`` on the resource (from any host)."""

    user: str
    resource: Resource
    name: str
    pattern: Pattern
    operation: Operation


def role_acls(
    kafka: KafkaSettings,
    worker_app_id: str,
    sink_group: str,
    principals: Mapping[Role, str] = DEFAULT_PRINCIPALS,
) -> dict[Role, tuple[Acl, ...]]:
    """Every role's rules, for topics under ``kafka.topic_prefix``. Pure."""

    def topic(role: TopicRole, op: Operation) -> Grant:
        return ("topic", kafka.topic(role), "literal", op)

    grants: dict[Role, list[Grant]] = {
        "agent": [topic("node-events", "Write")],
        "cluster": [topic("node-events", "Write"), topic("demand-events", "Write")],
        "worker": [
            topic("node-events", "Read"),
            ("group", worker_app_id, "literal", "Read"),
            topic("attribution", "Write"),
            topic("alerts", "Write"),
            topic("flags", "Write"),
            topic("node-status", "Write"),
            topic("demand-events", "Read"),
            topic("demand-events", "Write"),
            topic("demand", "Write"),
            topic("deadletter", "Write"),
            # changelogs and Faust's own topics (its leader topic is created at start)
            *(("topic", f"{worker_app_id}-", "prefix", op) for op in PREFIX_OPS),
        ],
        "sink": [
            topic("alerts", "Read"),
            ("group", sink_group, "literal", "Read"),
            topic("deadletter", "Write"),
        ],
        "reader": [
            topic("attribution", "Read"),
            topic("alerts", "Read"),
            topic("flags", "Read"),
            topic("node-status", "Read"),
            topic("demand", "Read"),
            topic("demand-events", "Read"),
        ],
    }
    for role_grants in grants.values():
        role_grants.append(topic("doctor", "Write"))
    return {
        role: tuple(sorted(Acl(principals[role], *grant) for grant in role_grants))
        for role, role_grants in grants.items()
    }


# --- the Kafka protocol's codes (org.apache.kafka.common.acl / resource) ------------------------

RESOURCE_CODES: dict[Resource, int] = {"topic": 2, "group": 3, "cluster": 4, "transactionalId": 5}
PATTERN_CODES: dict[Pattern, int] = {"literal": 3, "prefix": 4}
OPERATION_CODES: dict[Operation, int] = {
    "All": 2,
    "Read": 3,
    "Write": 4,
    "Create": 5,
    "Delete": 6,
    "Alter": 7,
    "Describe": 8,
    "DescribeConfigs": 10,
}
ALLOW = 3
ANY = 1


def _decode(codes: Mapping[Any, int], code: int) -> Any:
    return next(name for name, c in codes.items() if c == code)


async def create_acls(bootstrap: str, acls: Iterable[Acl], **client_options: Any) -> None:
    """Create ``acls`` (as a principal allowed to: the super user). Creating one that exists
    is a no-op for Kafka."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options)
    await admin.start()
    try:
        for acl in acls:
            request = CreateAclsRequest(
                RESOURCE_CODES[acl.resource],
                acl.name,
                PATTERN_CODES[acl.pattern],
                f"User:{acl.user}",
                "*",
                OPERATION_CODES[acl.operation],
                ALLOW,
            )
            response = await admin._send_request(request)  # no public ACL API in aiokafka
            for code, message in response.creation_responses:
                if code:
                    raise for_code(code)(f"creating {acl}: {message}")
    finally:
        await admin.close()


async def describe_acls(bootstrap: str, **client_options: Any) -> set[Acl]:
    """Every allow rule on the cluster (as a principal allowed to describe them)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options)
    await admin.start()
    try:
        response = await admin._send_request(
            DescribeAclsRequest(ANY, None, ANY, None, None, ANY, ANY)
        )
    finally:
        await admin.close()
    if response.error_code:
        raise for_code(response.error_code)(response.error_message)
    found: set[Acl] = set()
    for resource, name, pattern, entries in response.resources:
        for principal, _host, operation, permission in entries:
            if permission == ALLOW and principal.startswith("User:"):
                found.add(
                    Acl(
                        principal.removeprefix("User:"),
                        _decode(RESOURCE_CODES, resource),
                        name,
                        _decode(PATTERN_CODES, pattern),
                        _decode(OPERATION_CODES, operation),
                    )
                )
    return found
