"""The Kafka checks' I/O: connect, read metadata and authorized operations, send the clock probe,
all as the role's own principal with its own settings (:func:`infra.kafka.client_options`).

aiokafka has neither MetadataRequest v8 (the topics' and the cluster's authorized operations)
nor a public way to ask for them, so the request is defined here from Kafka's
``MetadataRequest.json``/``MetadataResponse.json`` (v8: the last non-flexible version that also
carries the cluster's operations; Kafka 4.1 serves 4 to 13). Judging is
:mod:`gpuattr.doctor.kafkajudge`'s.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.conn import collect_hosts, create_conn
from aiokafka.errors import (
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.protocol.admin import DescribeGroupsResponse_v3
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Int16, Int32, Schema, String
from aiokafka.structs import TopicPartition

from contract.codec import encode
from contract.probe import DoctorProbe
from gpuattr.doctor.kafkajudge import (
    Access,
    Client,
    Fault,
    Grant,
    Probe,
    TopicSeen,
    TopicWant,
    judge_acls,
    judge_clock,
    judge_connect,
    judge_probe_fault,
    judge_topics,
    operations,
    skip_after_connect,
)
from gpuattr.doctor.lines import Line
from gpuattr.doctor.settings import DoctorSettings
from infra.acls import DEFAULT_PRINCIPALS, role_acls
from infra.kafka import client_options
from infra.topics import topic_specs

# the protocol's error codes the checks tell apart
UNKNOWN_TOPIC = 3
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
LOG_APPEND_TIME = 1  # a record's timestamp type
#: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
COORDINATOR_NOT_READY = frozenset({14, 15, 16})
RETRY_S = 0.2  # between askings of a question the broker answers "not yet"


class MetadataResponse_v8(Response):  # type: ignore[misc]
    API_KEY = 3
    API_VERSION = 8
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "brokers",
            Array(
                ("node_id", Int32),
                ("host", String("utf-8")),
                ("port", Int32),
                ("rack", String("utf-8")),
            ),
        ),
        ("cluster_id", String("utf-8")),
        ("controller_id", Int32),
        (
            "topics",
            Array(
                ("error_code", Int16),
                ("name", String("utf-8")),
                ("is_internal", Boolean),
                (
                    "partitions",
                    Array(
                        ("error_code", Int16),
                        ("partition_index", Int32),
                        ("leader_id", Int32),
                        ("leader_epoch", Int32),
                        ("replica_nodes", Array(Int32)),
                        ("isr_nodes", Array(Int32)),
                        ("offline_replicas", Array(Int32)),
                    ),
                ),
                ("topic_authorized_operations", Int32),
            ),
        ),
        ("cluster_authorized_operations", Int32),
    )


class MetadataRequest_v8(RequestStruct):  # type: ignore[misc]
    API_KEY = 3
    API_VERSION = 8
    RESPONSE_TYPE = MetadataResponse_v8
    SCHEMA = Schema(
        ("topics", Array(String("utf-8"))),  # null: every topic the principal may describe
        ("allow_auto_topic_creation", Boolean),
        ("include_cluster_authorized_operations", Boolean),
        ("include_topic_authorized_operations", Boolean),
    )


class AuthorizedMetadataRequest(Request[MetadataRequest_v8]):  # type: ignore[misc]
    """Metadata with the principal's authorized operations, never creating a topic."""

    API_KEY: ClassVar[int] = 3

    def __init__(self, topics: Sequence[str] | None) -> None:
        self._topics = None if topics is None else list(topics)

    def build(self, request_struct_class: type[MetadataRequest_v8]) -> MetadataRequest_v8:
        return request_struct_class(self._topics, False, True, True)


class DescribeGroupsRequest_v3(RequestStruct):  # type: ignore[misc]
    # aiokafka 0.14's own v3 request parses its answer as v2, dropping the operations
    API_KEY = 15
    API_VERSION = 3
    RESPONSE_TYPE = DescribeGroupsResponse_v3
    SCHEMA = Schema(
        ("groups", Array(String("utf-8"))),
        ("include_authorized_operations", Boolean),
    )


class AuthorizedDescribeGroupsRequest(Request[DescribeGroupsRequest_v3]):  # type: ignore[misc]
    """DescribeGroups with the principal's authorized operations on each group."""

    API_KEY: ClassVar[int] = 15

    def __init__(self, groups: Sequence[str]) -> None:
        self._groups = list(groups)

    def build(
        self, request_struct_class: type[DescribeGroupsRequest_v3]
    ) -> DescribeGroupsRequest_v3:
        return request_struct_class(self._groups, True)


async def check(settings: DoctorSettings, now: Callable[[], float] = time.time) -> list[Line]:
    """The Kafka lines: connect, topics, ACLs, clock. ``now``: this host's clock, in s."""
    kafka = settings.kafka
    client = Client(
        settings.role,
        kafka.bootstrap,
        kafka.security_protocol,
        kafka.sasl_mechanism if kafka.security_protocol.startswith("SASL") else None,
        kafka.sasl_username,
    )
    if kafka.bootstrap is None:
        return [judge_connect(client, "no-bootstrap"), *skip_after_connect()]
    try:
        options = client_options(kafka)
    except (OSError, ssl.SSLError) as exc:  # an unreadable CA file or client certificate
        return [judge_connect(client, "tls", str(exc)), *skip_after_connect()]
    fault, detail = await _reach(kafka.bootstrap, options, settings.timeout_s)
    if fault is not None:
        return [judge_connect(client, fault, detail), *skip_after_connect()]

    principals = {**DEFAULT_PRINCIPALS, settings.role: kafka.sasl_username or ""}
    acls = role_acls(kafka, settings.worker_app_id, settings.sink_group, principals)
    grants = [Grant(a.resource, a.name, a.pattern, a.operation) for a in acls[settings.role]]
    probe_topic = kafka.topic("doctor")
    wants = [
        TopicWant(spec.name, spec.partitions, spec.config.get("cleanup.policy") == "compact")
        for spec in topic_specs(kafka, settings.worker_app_id)
        if spec.name != probe_topic and any(g.matches("topic", spec.name) for g in grants)
    ]
    try:
        asked, visible, seen, groups = await _ask(settings, options, wants, grants, probe_topic)
    except (KafkaError, TimeoutError) as exc:  # connected, then the broker stopped answering
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return [judge_connect(client, "other", detail), *skip_after_connect()]
    access = Access(
        topics={
            **{t.name: _ops(t) for t in visible.topics if not t.error_code},
            **{t.name: _ops(t) for t in asked.topics if t.error_code != UNKNOWN_TOPIC},
        },
        absent=frozenset(t.name for t in asked.topics if t.error_code == UNKNOWN_TOPIC),
        groups=groups,
        cluster=operations(asked.cluster_authorized) or frozenset(),
    )
    return [
        judge_connect(client, None, brokers=asked.brokers),
        judge_topics(wants, seen),
        judge_acls(kafka.sasl_username, grants, access),
        await _clock(settings, options, probe_topic, _seen(asked, probe_topic), access, now),
    ]


async def _ask(
    settings: DoctorSettings,
    options: dict[str, Any],
    wants: Sequence[TopicWant],
    grants: Sequence[Grant],
    probe_topic: str,
) -> tuple[Metadata, Metadata, dict[str, TopicSeen], dict[str, frozenset[str] | None]]:
    """Metadata of the role's topics and of every topic it may see, their cleanup policies
    where it may read them, and its operations on its groups."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.kafka.bootstrap,
        request_timeout_ms=int(settings.timeout_s * 1000),
        **options,
    )
    try:
        async with asyncio.timeout(settings.timeout_s):
            await admin.start()
        asked = await _metadata(admin, [*(w.name for w in wants), probe_topic], settings)
        visible = await _metadata(admin, None, settings)
        described = await _cleanup_policies(admin, asked, [w.name for w in wants], settings)
        seen = {
            w.name: replace(_seen(asked, w.name), cleanup_policy=described.get(w.name))
            for w in wants
        }
        groups = {
            g.name: await _group_operations(admin, g.name, settings)
            for g in grants
            if g.resource == "group"
        }
    finally:
        await admin.close()
    return asked, visible, seen, groups


async def _reach(
    bootstrap: str, options: dict[str, Any], timeout_s: float
) -> tuple[Fault | None, str]:
    """Connect and authenticate to a bootstrap broker, telling apart why it failed."""
    last = ""
    for host, port, _family in collect_hosts(bootstrap):
        try:
            async with asyncio.timeout(timeout_s):
                conn = await create_conn(
                    host, port, request_timeout_ms=int(timeout_s * 1000), **options
                )
        except ssl.SSLError as exc:  # before OSError: it is one
            return "tls", f"{host}:{port}: {exc}"
        except SaslAuthenticationFailed as exc:
            return "auth", str(exc)
        except UnsupportedSaslMechanismError as exc:
            return "mechanism", str(exc)
        except (OSError, TimeoutError) as exc:
            last = f"{host}:{port}: {exc or type(exc).__name__}"
            continue
        except KafkaError as exc:
            return "other", f"{host}:{port}: {exc}"
        conn.close()
        return None, ""
    return "unreachable", last


@dataclass(frozen=True, slots=True)
class TopicMeta:
    name: str
    error_code: int
    partitions: int
    authorized: int  # the operations' bitfield


@dataclass(frozen=True, slots=True)
class Metadata:
    brokers: int
    topics: tuple[TopicMeta, ...]
    cluster_authorized: int


async def _metadata(
    admin: AIOKafkaAdminClient, topics: Sequence[str] | None, settings: DoctorSettings
) -> Metadata:
    async with asyncio.timeout(settings.timeout_s):
        response = await admin._send_request(AuthorizedMetadataRequest(topics))  # no public API
    return Metadata(
        brokers=len(response.brokers),
        topics=tuple(
            TopicMeta(name, error_code, len(partitions), authorized)
            for error_code, name, _internal, partitions, authorized in response.topics
        ),
        cluster_authorized=response.cluster_authorized_operations,
    )


def _seen(metadata: Metadata, name: str) -> TopicSeen:
    for topic in metadata.topics:
        if topic.name == name:
            if topic.error_code == UNKNOWN_TOPIC:
                return TopicSeen(name, "missing")
            if topic.error_code == TOPIC_AUTHORIZATION_FAILED:
                return TopicSeen(name, "hidden")
            return TopicSeen(name, "present", topic.partitions)
    return TopicSeen(name, "missing")


def _ops(topic: TopicMeta) -> frozenset[str] | None:
    if topic.error_code == TOPIC_AUTHORIZATION_FAILED:
        return None
    return operations(topic.authorized)


async def _cleanup_policies(
    admin: AIOKafkaAdminClient, metadata: Metadata, names: Sequence[str], settings: DoctorSettings
) -> dict[str, str]:
    """Each topic's cleanup.policy, for the topics the role may DescribeConfigs (asking for the
    others would only be denied)."""
    readable = [
        t.name
        for t in metadata.topics
        if t.name in names
        and not t.error_code
        and "DescribeConfigs" in (operations(t.authorized) or ())
    ]
    if not readable:
        return {}
    async with asyncio.timeout(settings.timeout_s):
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, n, ["cleanup.policy"]) for n in readable]
        )
    policies: dict[str, str] = {}
    for response in responses:
        for error_code, _message, _type, name, entries in response.resources:
            if not error_code:
                for key, value, *_ in entries:
                    if key == "cleanup.policy":
                        policies[name] = value
    return policies


async def _group_operations(
    admin: AIOKafkaAdminClient, group: str, settings: DoctorSettings
) -> frozenset[str] | None:
    """The principal's operations on its group (DescribeGroups v3), None when it may not
    describe the group. A fresh cluster makes its offsets topic at the first asking and answers
    "not available" or "loading" until it is there: asked again until the bound."""
    async with asyncio.timeout(settings.timeout_s):
        while True:
            try:
                node = await admin.find_coordinator(group)
            except KafkaError as exc:
                if getattr(exc, "errno", None) == GROUP_AUTHORIZATION_FAILED:
                    return None
                if not exc.retriable:
                    raise
            else:
                response = await admin._send_request(AuthorizedDescribeGroupsRequest([group]), node)
                (described,) = response.groups
                error_code, authorized = described[0], described[-1]
                if error_code == GROUP_AUTHORIZATION_FAILED:
                    return None
                if error_code not in COORDINATOR_NOT_READY:
                    return operations(authorized)
            await asyncio.sleep(RETRY_S)


async def _clock(
    settings: DoctorSettings,
    options: dict[str, Any],
    topic: str,
    seen: TopicSeen,
    access: Access,
    now: Callable[[], float],
) -> Line:
    """One probe record; the broker stamps it (LogAppendTime) and says when in its answer."""
    user = settings.kafka.sasl_username
    if seen.state == "missing":
        return judge_probe_fault(topic, user, "missing")
    if "Write" not in (access.topics.get(topic) or ()):
        return judge_probe_fault(topic, user, "denied")
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka.bootstrap,
        acks=1,
        enable_idempotence=False,  # IdempotentWrite is no role's
        request_timeout_ms=int(settings.timeout_s * 1000),
        **options,
    )
    try:
        async with asyncio.timeout(settings.timeout_s * 2):
            await producer.start()
            await producer.partitions_for(topic)
            # connected to the leader before the clock starts: the round trip is one request
            leader = producer.client.cluster.leader_for_partition(TopicPartition(topic, 0))
            if leader is not None and leader >= 0:
                await producer.client.ready(leader)
            sent = now() * 1000
            record = encode(DoctorProbe(settings.role, int(sent)))
            metadata = await producer.send_and_wait(topic, record, partition=0)
            acked = now() * 1000
    except KafkaError as exc:
        return judge_probe_fault(topic, user, "error", f"{type(exc).__name__}: {exc}")
    except TimeoutError:
        return judge_probe_fault(
            topic, user, "error", f"no acknowledgement within {settings.timeout_s * 2:.0f} s"
        )
    finally:
        await producer.stop()
    if metadata.timestamp_type != LOG_APPEND_TIME:
        return judge_probe_fault(topic, user, "create-time")
    return judge_clock(Probe(sent, acked, metadata.timestamp), settings.max_skew_s)
