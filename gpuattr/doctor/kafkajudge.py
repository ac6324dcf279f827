"""Judging what the Kafka checks found: connection, topics, ACLs and the clock. Pure.

The adapter (:mod:`gpuattr.doctor.kafka`) asks the broker as the role's own principal and hands
plain facts here; every sentence and fix the doctor prints about Kafka is made in this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from gpuattr.doctor.lines import Line, fail, ok, skipped, warn

CONNECT = "kafka.connect"
TOPICS = "kafka.topics"
ACLS = "kafka.acls"
CLOCK = "clock.skew"
#: the Kafka group's lines, in the order they print
CHECKS = (CONNECT, TOPICS, ACLS, CLOCK)

#: org.apache.kafka.common.acl.AclOperation: code → name, named as infra/acls.py and Strimzi
#: name them
OPERATIONS: Mapping[int, str] = {
    0: "Unknown",
    1: "Any",
    2: "All",
    3: "Read",
    4: "Write",
    5: "Create",
    6: "Delete",
    7: "Alter",
    8: "Describe",
    9: "ClusterAction",
    10: "DescribeConfigs",
    11: "AlterConfigs",
    12: "IdempotentWrite",
    13: "CreateTokens",
    14: "DescribeTokens",
    15: "TwoPhaseCommit",
}
#: what Kafka answers in an authorized-operations field it was not asked to fill
OMITTED = -(2**31)

#: an ACL that allows one operation implies these (org.apache.kafka.common.acl.AclOperation)
IMPLIED: Mapping[str, frozenset[str]] = {
    "Read": frozenset({"Describe"}),
    "Write": frozenset({"Describe"}),
    "Delete": frozenset({"Describe"}),
    "Alter": frozenset({"Describe"}),
    "AlterConfigs": frozenset({"DescribeConfigs"}),
}


def operations(bits: int) -> frozenset[str] | None:
    """The operations of an authorized-operations bitfield (bit ``n``: operation code ``n``);
    None when the broker left it out."""
    if bits == OMITTED:
        return None
    return frozenset(name for code, name in OPERATIONS.items() if bits & (1 << code))


def skip_after_connect() -> list[Line]:
    return [skipped(check, "Kafka is not reachable (kafka.connect)") for check in CHECKS[1:]]


# --- kafka.connect ------------------------------------------------------------------------------

Fault = Literal["no-bootstrap", "auth", "mechanism", "tls", "unreachable", "other"]


@dataclass(frozen=True, slots=True)
class Client:
    """How the role connects: its settings, never its password."""

    role: str
    bootstrap: str | None
    security_protocol: str
    sasl_mechanism: str | None
    user: str | None

    @property
    def secret(self) -> str:
        """Where the role's password comes from."""
        if self.role == "reader":
            return "GPUATTR_KAFKA_SASL_PASSWORD in the reader's environment"
        return f"the Secret gpuattr-{self.role}-secrets (GPUATTR_KAFKA_SASL_PASSWORD)"

    def facts(self) -> dict[str, object]:
        return {
            "bootstrap": self.bootstrap,
            "security_protocol": self.security_protocol,
            "sasl_mechanism": self.sasl_mechanism,
            "user": self.user,
        }


def judge_connect(client: Client, fault: Fault | None, detail: str = "", brokers: int = 0) -> Line:
    """The connection's line: ``fault`` is None when the role reached and authenticated."""
    facts = client.facts()
    who = f" as {client.user}" if client.user else ""
    if fault is None:
        return ok(
            CONNECT,
            f"connected to {client.bootstrap} over {client.security_protocol}{who} "
            f"({brokers} broker{'s' if brokers != 1 else ''})",
            brokers=brokers,
            **facts,
        )
    if fault == "no-bootstrap":
        return fail(
            CONNECT,
            "no Kafka bootstrap configured",
            "set GPUATTR_KAFKA_BOOTSTRAP to the brokers' host:port (the role's ConfigMap)",
            **facts,
        )
    said, fix = {
        "auth": (
            f"the broker refused {client.user}'s password ({client.sasl_mechanism})",
            f"the password in {client.secret} is not the KafkaUser {client.user}'s: copy it "
            f"from the Strimzi Secret {client.user} (key password) in the Kafka cluster's "
            "namespace",
        ),
        "mechanism": (
            f"the broker does not accept SASL mechanism {client.sasl_mechanism}",
            "set GPUATTR_KAFKA_SASL_MECHANISM to the listener's mechanism (Strimzi KafkaUsers "
            "with scram-sha-512: SCRAM-SHA-512)",
        ),
        "tls": (
            f"TLS to {client.bootstrap} failed",
            "set GPUATTR_KAFKA_SSL_CAFILE to the CA that signed the brokers' certificate "
            "(Strimzi: ca.crt of the Secret <cluster>-cluster-ca-cert) and use a bootstrap "
            "host named in that certificate",
        ),
        "unreachable": (
            f"no broker answers at {client.bootstrap}",
            "check GPUATTR_KAFKA_BOOTSTRAP: the host resolves from here, the port is the "
            "listener's, and no NetworkPolicy blocks it",
        ),
        "other": (
            f"connecting to {client.bootstrap} failed",
            "read the error in the facts; rerun with --log-level DEBUG",
        ),
    }[fault]
    return fail(CONNECT, f"{said}: {detail}" if detail else said, fix, fault=fault, **facts)


# --- kafka.topics -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicWant:
    """A topic the role reads or writes, as ``infra/topics.py`` specifies it."""

    name: str
    partitions: int
    compacted: bool


TopicState = Literal["present", "missing", "hidden"]


@dataclass(frozen=True, slots=True)
class TopicSeen:
    """What the role's metadata says of a topic: ``hidden`` when the role may not describe it
    (an ACL question); ``cleanup_policy`` None when the role may not read its configs."""

    name: str
    state: TopicState
    partitions: int = 0
    cleanup_policy: str | None = None


def _names(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))


def judge_topics(wants: Sequence[TopicWant], seen: Mapping[str, TopicSeen]) -> Line:
    """Every topic present, with its partition count and cleanup policy. A topic hidden from the
    role is not judged here (kafka.acls names the missing grant)."""
    missing = [w.name for w in wants if seen[w.name].state == "missing"]
    hidden = [w.name for w in wants if seen[w.name].state == "hidden"]
    present = [w for w in wants if seen[w.name].state == "present"]
    wrong_partitions = {
        w.name: (seen[w.name].partitions, w.partitions)
        for w in present
        if seen[w.name].partitions != w.partitions
    }
    unverified = [w.name for w in present if seen[w.name].cleanup_policy is None]
    wrong_policy = {
        w.name: (policy, "compact" if w.compacted else "delete")
        for w in present
        if (policy := seen[w.name].cleanup_policy) is not None
        and ("compact" in policy.split(",")) != w.compacted
    }
    facts = {
        "wanted": len(wants),
        "present": len(present),
        "missing": sorted(missing),
        "hidden": sorted(hidden),
        "partitions_wrong": {n: {"has": h, "want": w} for n, (h, w) in wrong_partitions.items()},
        "cleanup_policy_wrong": {n: {"has": h, "want": w} for n, (h, w) in wrong_policy.items()},
        "cleanup_policy_unverified": sorted(unverified),
    }
    faults: list[str] = []
    fixes: list[str] = []
    if missing:
        faults.append(f"missing: {_names(missing)}")
        fixes.append(
            "create them: `gpuattr topics` as a Kafka admin, or the Strimzi KafkaTopics "
            "(deploy/kustomize/base/topics.yaml)"
        )
    if wrong_partitions:
        faults.append(
            "partitions: "
            + ", ".join(f"{n} has {h}, wants {w}" for n, (h, w) in sorted(wrong_partitions.items()))
        )
        fixes.append(
            "GPUATTR_KAFKA_PARTITIONS must equal the topics' count (changelogs: their input's); "
            "a keyed topic cannot be re-partitioned in place: recreate it"
        )
    if wrong_policy:
        faults.append(
            "cleanup.policy: "
            + ", ".join(f"{n} is {h}, wants {w}" for n, (h, w) in sorted(wrong_policy.items()))
        )
        fixes.append("set cleanup.policy on the KafkaTopic (or kafka-configs.sh --alter)")
    if faults:
        return fail(TOPICS, "; ".join(faults), "; ".join(fixes), **facts)
    said = f"{len(present)} of {len(wants)} topics present with their partition counts"
    if unverified:
        said += (
            f"; cleanup policy not verified for {len(unverified)} "
            "(this role may not DescribeConfigs)"
        )
    else:
        said += " and cleanup policies"
    if hidden:
        said += f"; {len(hidden)} not visible to this role (kafka.acls): {_names(hidden)}"
    return ok(TOPICS, said, **facts)


# --- kafka.acls ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Grant:
    """One of the role's rules in ``infra/acls.py``."""

    resource: str
    name: str
    pattern: Literal["literal", "prefix"]
    operation: str

    def matches(self, resource: str, name: str) -> bool:
        if resource != self.resource:
            return False
        return name.startswith(self.name) if self.pattern == "prefix" else name == self.name


@dataclass(frozen=True, slots=True)
class Access:
    """What the broker says the role's principal may do, resource by resource.

    ``topics``: every topic the role asked about or may see → its operations, None when the
    role may not describe it; ``absent``: topics that do not exist (not an ACL question);
    ``groups``: the role's groups → operations, None when it may not describe the group."""

    topics: Mapping[str, frozenset[str] | None]
    absent: frozenset[str] = frozenset()
    groups: Mapping[str, frozenset[str] | None] = field(default_factory=dict)
    cluster: frozenset[str] = frozenset()


def allowed(grants: Iterable[Grant], resource: str, name: str) -> frozenset[str]:
    """The operations the role's rules allow on one resource, with what they imply."""
    ops: set[str] = set()
    for grant in grants:
        if grant.matches(resource, name):
            ops.add(grant.operation)
            ops |= IMPLIED.get(grant.operation, frozenset())
    return frozenset(ops)


def _literal_names(grants: Iterable[Grant], resource: str) -> set[str]:
    return {g.name for g in grants if g.resource == resource and g.pattern == "literal"}


def judge_acls(user: str | None, grants: Sequence[Grant], access: Access) -> Line:
    """The role's ACLs against ``infra/acls.py``: nothing missing, nothing more."""
    missing: list[str] = []
    extra: list[str] = []
    topics = (_literal_names(grants, "topic") | set(access.topics)) - access.absent
    for topic in sorted(topics):
        want = allowed(grants, "topic", topic)
        has = access.topics.get(topic) or frozenset()
        if not want:
            if has:
                extra.append(f"topic {topic} {'/'.join(sorted(has))}")
            continue
        if lacking := want - has:
            missing.append(f"topic {topic} {'/'.join(sorted(lacking))}")
        if beyond := has - want:
            extra.append(f"topic {topic} {'/'.join(sorted(beyond))}")
    groups = sorted(_literal_names(grants, "group") | set(access.groups))
    for group in groups:
        want = allowed(grants, "group", group)
        has = access.groups.get(group) or frozenset()
        if lacking := want - has:
            missing.append(f"group {group} {'/'.join(sorted(lacking))}")
        if beyond := has - want:
            extra.append(f"group {group} {'/'.join(sorted(beyond))}")
    if beyond := access.cluster - allowed(grants, "cluster", "kafka-cluster"):
        extra.append(f"cluster {'/'.join(sorted(beyond))}")
    facts = {
        "user": user,
        "missing": missing,
        "more_than_needed": extra,
        "topics_checked": len(topics),
        "groups_checked": groups,
    }
    who = f"KafkaUser {user}" if user else "this principal"
    faults, fixes = [], []
    if missing:
        faults.append(f"missing: {'; '.join(missing)}")
        fixes.append(
            f"grant them to {who} (deploy/kustomize/base/kafka-users.yaml), or run "
            "`gpuattr acls` as a Kafka admin"
        )
    if extra:
        faults.append(f"more than needed: {'; '.join(extra)}")
        fixes.append(
            f"remove them from {who}'s ACLs: the role needs only what infra/acls.py grants it"
        )
    if faults:
        return fail(ACLS, "; ".join(faults), "; ".join(fixes), **facts)
    return ok(
        ACLS,
        f"{who} may do what the role needs on {len(topics)} topics"
        + (f" and group {', '.join(groups)}" if groups else "")
        + ", and nothing more that this principal can see",
        **facts,
    )


# --- clock.skew ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Probe:
    """One probe record: this host's clock at send and at acknowledgement, and the broker's
    append time the acknowledgement carried (ms since the epoch)."""

    sent_ms: float
    acked_ms: float
    append_ms: int


ProbeFault = Literal["missing", "denied", "create-time", "error"]


def judge_clock(probe: Probe, max_skew_s: float) -> Line:
    """Offset = the broker's append time minus the midpoint of send and acknowledgement; the append
    happened somewhere in that round trip, so the offset is known to ± half of it."""
    rtt_s = (probe.acked_ms - probe.sent_ms) / 1000
    offset_s = (probe.append_ms - (probe.sent_ms + probe.acked_ms) / 2) / 1000
    uncertainty_s = rtt_s / 2
    facts = {
        "offset_s": round(offset_s, 3),
        "uncertainty_s": round(uncertainty_s, 3),
        "rtt_s": round(rtt_s, 3),
        "max_skew_s": max_skew_s,
    }
    ahead = "ahead of" if offset_s > 0 else "behind"
    said = (
        f"the broker's clock is {abs(offset_s):.3f} s ± {uncertainty_s:.3f} s {ahead} this host's"
    )
    ntp = "synchronise the node's clock (NTP: chronyd or systemd-timesyncd) and the brokers'"
    if abs(offset_s) - uncertainty_s > max_skew_s:
        return fail(CLOCK, f"{said}, beyond {max_skew_s} s", ntp, **facts)
    if abs(offset_s) + uncertainty_s > max_skew_s:
        return warn(
            CLOCK,
            f"{said}: the round trip is too long to tell whether it is within {max_skew_s} s",
            f"rerun closer to the brokers; if it persists, {ntp}",
            **facts,
        )
    return ok(CLOCK, f"{said}, within {max_skew_s} s", **facts)


def judge_probe_fault(topic: str, user: str | None, fault: ProbeFault, detail: str = "") -> Line:
    """The clock line when no append time could be had."""
    who = f"KafkaUser {user}" if user else "this principal"
    said, fix = {
        "missing": (
            f"probe topic {topic} does not exist",
            "create it: `gpuattr topics` as a Kafka admin, or the Strimzi KafkaTopic "
            "gpuattr-doctor (deploy/kustomize/base/topics.yaml)",
        ),
        "denied": (
            f"this role may not write probe topic {topic}",
            f"grant Write on topic {topic} to {who} (kafka-users.yaml), or run `gpuattr acls`",
        ),
        "create-time": (
            f"probe topic {topic} keeps the producer's timestamps, not the broker's",
            f"set message.timestamp.type=LogAppendTime on {topic} (its KafkaTopic config)",
        ),
        "error": (
            f"the probe record to {topic} failed",
            "read the error in the facts; rerun with --log-level DEBUG",
        ),
    }[fault]
    return fail(CLOCK, f"{said}: {detail}" if detail else said, fix, topic=topic, fault=fault)
