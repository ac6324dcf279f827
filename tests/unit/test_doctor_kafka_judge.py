"""The Kafka checks' judging (gpuattr/doctor/kafkajudge.py): tables of facts → lines.

The clock's verdicts are only tested here: the real broker's clock is this host's, so the
integration test can show a measured offset, never a skewed one."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from gpuattr.doctor.kafkajudge import (
    ACLS,
    CHECKS,
    CLOCK,
    CONNECT,
    OMITTED,
    TOPICS,
    Access,
    Client,
    Fault,
    Grant,
    Probe,
    ProbeFault,
    TopicSeen,
    TopicWant,
    allowed,
    judge_acls,
    judge_clock,
    judge_connect,
    judge_probe_fault,
    judge_topics,
    operations,
    skip_after_connect,
)
from gpuattr.doctor.lines import render_text

# --- operations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bits", "names"),
    [
        pytest.param(0, frozenset(), id="none"),
        pytest.param((1 << 4) | (1 << 8), {"Write", "Describe"}, id="write-describe"),
        pytest.param(
            (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11),
            {"Read", "Delete", "Describe", "DescribeConfigs", "AlterConfigs"},
            id="topic-ops",
        ),
        pytest.param(1 << 12, {"IdempotentWrite"}, id="cluster-idempotent"),
        pytest.param(1 << 15, {"TwoPhaseCommit"}, id="highest-code"),
        pytest.param(OMITTED, None, id="left-out"),
    ],
)
def test_operations_decode_the_bitfield(bits: int, names: set[str] | None) -> None:
    assert operations(bits) == (None if names is None else frozenset(names))


# --- kafka.connect ------------------------------------------------------------------------------

AGENT = Client("agent", "kafka:9093", "SASL_SSL", "SCRAM-SHA-512", "gpuattr-agent")
READER = Client("reader", "kafka:9093", "SASL_SSL", "SCRAM-SHA-512", "gpuattr-reader")


@pytest.mark.parametrize(
    ("client", "fault", "status", "said", "fix"),
    [
        pytest.param(
            AGENT, None, "ok", "connected to kafka:9093 over SASL_SSL as gpuattr-agent", "", id="ok"
        ),
        pytest.param(
            AGENT.__class__("agent", None, "PLAINTEXT", None, None),
            "no-bootstrap",
            "fail",
            "no Kafka bootstrap configured",
            "set GPUATTR_KAFKA_BOOTSTRAP",
            id="no-bootstrap",
        ),
        pytest.param(
            AGENT,
            "auth",
            "fail",
            "the broker refused gpuattr-agent's password (SCRAM-SHA-512)",
            "the password in the Secret gpuattr-agent-secrets (GPUATTR_KAFKA_SASL_PASSWORD) is "
            "not the KafkaUser gpuattr-agent's: copy it from the Strimzi Secret gpuattr-agent",
            id="wrong-password",
        ),
        pytest.param(
            READER,
            "auth",
            "fail",
            "the broker refused gpuattr-reader's password",
            "the password in GPUATTR_KAFKA_SASL_PASSWORD in the reader's environment",
            id="wrong-password-reader",
        ),
        pytest.param(
            AGENT,
            "mechanism",
            "fail",
            "SASL mechanism SCRAM-SHA-512",
            "GPUATTR_KAFKA_SASL_MECHANISM",
            id="mechanism",
        ),
        pytest.param(
            AGENT,
            "tls",
            "fail",
            "TLS to kafka:9093 failed",
            "GPUATTR_KAFKA_SSL_CAFILE",
            id="unknown-ca",
        ),
        pytest.param(
            AGENT,
            "unreachable",
            "fail",
            "no broker answers at kafka:9093",
            "NetworkPolicy",
            id="unreachable",
        ),
        pytest.param(
            AGENT,
            "other",
            "fail",
            "connecting to kafka:9093 failed",
            "--log-level DEBUG",
            id="other",
        ),
    ],
)
def test_connect_lines(
    client: Client, fault: Fault | None, status: str, said: str, fix: str
) -> None:
    line = judge_connect(client, fault, brokers=3)
    assert line.check == CONNECT
    assert line.status == status
    assert said in line.said
    assert fix in line.fix
    assert line.facts["user"] == client.user
    assert "password" not in {str(k) for k in line.facts}


def test_connect_carries_the_error_detail_and_the_fault() -> None:
    line = judge_connect(AGENT, "unreachable", "kafka:9093: Connection refused")
    assert line.said == "no broker answers at kafka:9093: kafka:9093: Connection refused"
    assert line.facts["fault"] == "unreachable"


def test_after_a_failed_connect_the_other_lines_are_skipped_not_failed() -> None:
    lines = skip_after_connect()
    assert [line.check for line in lines] == list(CHECKS[1:])
    assert {line.status for line in lines} == {"skip"}


# --- kafka.topics -------------------------------------------------------------------------------

WANTS = (
    TopicWant("g.node-events", 8, compacted=False),
    TopicWant("g.node-status", 8, compacted=True),
    TopicWant("w-pods-changelog", 8, compacted=True),
)


def seen(**states: TopicSeen) -> dict[str, TopicSeen]:
    base = {
        "g.node-events": TopicSeen("g.node-events", "present", 8),
        "g.node-status": TopicSeen("g.node-status", "present", 8),
        "w-pods-changelog": TopicSeen("w-pods-changelog", "present", 8),
    }
    return base | {s.name: s for s in states.values()}


@pytest.mark.parametrize(
    ("found", "status", "said", "fix"),
    [
        pytest.param(
            seen(),
            "ok",
            "3 of 3 topics present with their partition counts; cleanup policy not verified "
            "for 3 (this role may not DescribeConfigs)",
            "",
            id="present-policies-unreadable",
        ),
        pytest.param(
            seen(
                a=TopicSeen("g.node-events", "present", 8, "delete"),
                b=TopicSeen("g.node-status", "present", 8, "compact"),
                c=TopicSeen("w-pods-changelog", "present", 8, "compact,delete"),
            ),
            "ok",
            "3 of 3 topics present with their partition counts and cleanup policies",
            "",
            id="present-policies-read",
        ),
        pytest.param(
            seen(a=TopicSeen("g.node-status", "missing")),
            "fail",
            "missing: g.node-status",
            "`gpuattr topics` as a Kafka admin, or the Strimzi KafkaTopics",
            id="missing",
        ),
        pytest.param(
            seen(a=TopicSeen("w-pods-changelog", "present", 3)),
            "fail",
            "partitions: w-pods-changelog has 3, wants 8",
            "GPUATTR_KAFKA_PARTITIONS must equal the topics' count (changelogs: their input's)",
            id="changelog-partitions",
        ),
        pytest.param(
            seen(a=TopicSeen("g.node-status", "present", 8, "delete")),
            "fail",
            "cleanup.policy: g.node-status is delete, wants compact",
            "set cleanup.policy on the KafkaTopic",
            id="not-compacted",
        ),
        pytest.param(
            seen(a=TopicSeen("g.node-events", "present", 8, "compact")),
            "fail",
            "cleanup.policy: g.node-events is compact, wants delete",
            "set cleanup.policy",
            id="compacted-by-mistake",
        ),
        pytest.param(
            seen(a=TopicSeen("g.node-events", "hidden")),
            "ok",
            "2 of 3 topics present with their partition counts; cleanup policy not verified "
            "for 2 (this role may not DescribeConfigs); 1 not visible to this role (kafka.acls): "
            "g.node-events",
            "",
            id="hidden-is-an-acl-question",
        ),
        pytest.param(
            seen(
                a=TopicSeen("g.node-events", "missing"), b=TopicSeen("g.node-status", "present", 2)
            ),
            "fail",
            "missing: g.node-events; partitions: g.node-status has 2, wants 8",
            "create them",
            id="missing-and-partitions",
        ),
    ],
)
def test_topic_lines(found: Mapping[str, TopicSeen], status: str, said: str, fix: str) -> None:
    line = judge_topics(WANTS, found)
    assert line.check == TOPICS
    assert line.status == status
    assert line.said == said
    assert fix in line.fix


# --- kafka.acls ---------------------------------------------------------------------------------

SINK = (
    Grant("topic", "g.alerts", "literal", "Read"),
    Grant("group", "gpuattr-sink", "literal", "Read"),
    Grant("topic", "g.deadletter", "literal", "Write"),
    Grant("topic", "g.doctor", "literal", "Write"),
)
WORKER_PREFIX = tuple(Grant("topic", "w-", "prefix", op) for op in ("Create", "Read", "Write"))
R, W, D = "Read", "Write", "Describe"
SINK_ACCESS = Access(
    topics={
        "g.alerts": frozenset({R, D}),
        "g.deadletter": frozenset({W, D}),
        "g.doctor": frozenset({W, D}),
    },
    groups={"gpuattr-sink": frozenset({R, D})},
)


def sink_access(**changes: object) -> Access:
    fields = {
        "topics": SINK_ACCESS.topics,
        "absent": SINK_ACCESS.absent,
        "groups": SINK_ACCESS.groups,
        "cluster": SINK_ACCESS.cluster,
    }
    return Access(**(fields | changes))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("grants", "access", "missing", "extra"),
    [
        pytest.param(SINK, SINK_ACCESS, [], [], id="exactly"),
        pytest.param(
            SINK,
            sink_access(topics={**SINK_ACCESS.topics, "g.alerts": None}),
            ["topic g.alerts Describe/Read"],
            [],
            id="topic-hidden",
        ),
        pytest.param(
            SINK,
            sink_access(topics={**SINK_ACCESS.topics, "g.deadletter": frozenset({D})}),
            ["topic g.deadletter Write"],
            [],
            id="topic-op-missing",
        ),
        pytest.param(
            SINK,
            sink_access(groups={"gpuattr-sink": None}),
            ["group gpuattr-sink Describe/Read"],
            [],
            id="group-denied",
        ),
        pytest.param(
            SINK,
            sink_access(topics={**SINK_ACCESS.topics, "g.alerts": frozenset({R, W, D})}),
            [],
            ["topic g.alerts Write"],
            id="extra-op",
        ),
        pytest.param(
            SINK,
            sink_access(topics={**SINK_ACCESS.topics, "g.attribution": frozenset({R, D})}),
            [],
            ["topic g.attribution Describe/Read"],
            id="extra-topic",
        ),
        pytest.param(
            SINK,
            sink_access(groups={"gpuattr-sink": frozenset({R, D, "Delete"})}),
            [],
            ["group gpuattr-sink Delete"],
            id="extra-group-op",
        ),
        pytest.param(
            SINK,
            sink_access(cluster=frozenset({"IdempotentWrite", "Create"})),
            [],
            ["cluster Create/IdempotentWrite"],
            id="extra-cluster",
        ),
        pytest.param(
            SINK,
            sink_access(
                topics={k: v for k, v in SINK_ACCESS.topics.items() if k != "g.deadletter"},
                absent=frozenset({"g.deadletter"}),
            ),
            [],
            [],
            id="absent-topic-is-no-acl-fault",
        ),
        pytest.param(
            WORKER_PREFIX,
            Access(topics={"w-pods-changelog": frozenset({"Create", R, W, D})}),
            [],
            [],
            id="prefix-covers-changelogs",
        ),
        pytest.param(
            WORKER_PREFIX,
            Access(topics={"w-pods-changelog": frozenset({R, W, D})}),
            ["topic w-pods-changelog Create"],
            [],
            id="prefix-create-missing",
        ),
    ],
)
def test_acl_verdicts(
    grants: tuple[Grant, ...], access: Access, missing: list[str], extra: list[str]
) -> None:
    line = judge_acls("gpuattr-sink", grants, access)
    assert line.check == ACLS
    assert line.facts["missing"] == missing
    assert line.facts["more_than_needed"] == extra
    assert line.status == ("fail" if missing or extra else "ok")


def test_acl_lines_name_the_fault_and_the_fix() -> None:
    narrow = judge_acls("gpuattr-sink", SINK, sink_access(groups={"gpuattr-sink": None}))
    assert narrow.said == "missing: group gpuattr-sink Describe/Read"
    assert narrow.fix == (
        "grant them to KafkaUser gpuattr-sink (deploy/kustomize/base/kafka-users.yaml), or run "
        "`gpuattr acls` as a Kafka admin"
    )
    broad = judge_acls("gpuattr-sink", SINK, sink_access(cluster=frozenset({"Alter"})))
    assert broad.said == "more than needed: cluster Alter"
    assert "remove them from KafkaUser gpuattr-sink's ACLs" in broad.fix
    good = judge_acls("gpuattr-sink", SINK, SINK_ACCESS)
    assert good.said == (
        "KafkaUser gpuattr-sink may do what the role needs on 3 topics and group gpuattr-sink, "
        "and nothing more that this principal can see"
    )


@pytest.mark.parametrize(
    ("grants", "ops"),
    [
        pytest.param([Grant("topic", "t", "literal", "Read")], {R, D}, id="read-implies-describe"),
        pytest.param(
            [Grant("topic", "t", "literal", "Write")], {W, D}, id="write-implies-describe"
        ),
        pytest.param(
            [Grant("topic", "t", "literal", "AlterConfigs")],
            {"AlterConfigs", "DescribeConfigs"},
            id="alterconfigs-implies-describeconfigs",
        ),
        pytest.param([Grant("topic", "u", "literal", "Read")], set(), id="other-name"),
        pytest.param([Grant("group", "t", "literal", "Read")], set(), id="other-resource"),
        pytest.param([Grant("topic", "t-", "prefix", "Read")], set(), id="prefix-not-matching"),
    ],
)
def test_allowed_follows_kafkas_implications(grants: list[Grant], ops: set[str]) -> None:
    assert allowed(grants, "topic", "t") == ops


# --- clock.skew ---------------------------------------------------------------------------------

T0 = 1_700_000_000_000.0


@pytest.mark.parametrize(
    ("probe", "status", "offset_s", "uncertainty_s"),
    [
        pytest.param(Probe(T0, T0 + 20, int(T0 + 10)), "ok", 0.0, 0.01, id="in-sync"),
        pytest.param(Probe(T0, T0 + 20, int(T0 + 1_510)), "ok", 1.5, 0.01, id="ahead-within"),
        pytest.param(Probe(T0, T0 + 20, int(T0 - 1_490)), "ok", -1.5, 0.01, id="behind-within"),
        pytest.param(Probe(T0, T0 + 20, int(T0 + 5_010)), "fail", 5.0, 0.01, id="broker-ahead"),
        pytest.param(Probe(T0, T0 + 20, int(T0 - 4_990)), "fail", -5.0, 0.01, id="broker-behind"),
        # 1.9 s off, but the round trip (1 s) could put it either side of 2 s
        pytest.param(Probe(T0, T0 + 1_000, int(T0 + 2_400)), "warn", 1.9, 0.5, id="cannot-tell"),
        # 2.6 s off ± 0.5: beyond 2 s even at the edge of the round trip
        pytest.param(Probe(T0, T0 + 1_000, int(T0 + 3_100)), "fail", 2.6, 0.5, id="beyond-even-so"),
    ],
)
def test_clock_verdicts(probe: Probe, status: str, offset_s: float, uncertainty_s: float) -> None:
    line = judge_clock(probe, max_skew_s=2.0)
    assert line.check == CLOCK
    assert line.status == status
    assert line.facts["offset_s"] == pytest.approx(offset_s)
    assert line.facts["uncertainty_s"] == pytest.approx(uncertainty_s)
    assert line.facts["rtt_s"] == pytest.approx(2 * uncertainty_s)
    if status != "ok":
        assert "NTP" in line.fix


def test_clock_line_text() -> None:
    assert judge_clock(Probe(T0, T0 + 20, int(T0 + 5_010)), 2.0).said == (
        "the broker's clock is 5.000 s ± 0.010 s ahead of this host's, beyond 2.0 s"
    )
    assert judge_clock(Probe(T0, T0 + 20, int(T0 - 1_490)), 2.0).said == (
        "the broker's clock is 1.500 s ± 0.010 s behind this host's, within 2.0 s"
    )


@pytest.mark.parametrize(
    ("fault", "said", "fix"),
    [
        ("missing", "probe topic g.doctor does not exist", "Strimzi KafkaTopic gpuattr-doctor"),
        (
            "denied",
            "this role may not write probe topic g.doctor",
            "grant Write on topic g.doctor to KafkaUser u",
        ),
        ("create-time", "keeps the producer's timestamps", "message.timestamp.type=LogAppendTime"),
        ("error", "the probe record to g.doctor failed", "--log-level DEBUG"),
    ],
)
def test_probe_faults(fault: ProbeFault, said: str, fix: str) -> None:
    line = judge_probe_fault("g.doctor", "u", fault)
    assert line.check == CLOCK
    assert line.status == "fail"
    assert said in line.said
    assert fix in line.fix


def test_the_text_lines_of_a_broken_install() -> None:
    lines = [
        judge_connect(AGENT, None, brokers=3),
        judge_topics(WANTS, seen(a=TopicSeen("g.node-status", "missing"))),
        judge_acls("gpuattr-sink", SINK, SINK_ACCESS),
        judge_clock(Probe(T0, T0 + 20, int(T0 + 10)), 2.0),
    ]
    assert render_text(lines).splitlines() == [
        "✓ kafka.connect  connected to kafka:9093 over SASL_SSL as gpuattr-agent (3 brokers)",
        "✗ kafka.topics   missing: g.node-status → fix: create them: `gpuattr topics` as a Kafka "
        "admin, or the Strimzi KafkaTopics (deploy/kustomize/base/topics.yaml)",
        "✓ kafka.acls     KafkaUser gpuattr-sink may do what the role needs on 3 topics and group "
        "gpuattr-sink, and nothing more that this principal can see",
        "✓ clock.skew     the broker's clock is 0.000 s ± 0.010 s behind this host's, within 2.0 s",
        "4 checks: 1 failed, 0 warnings",
    ]
