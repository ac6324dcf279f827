"""``gpuattr doctor``'s Kafka lines against the embedded broker with its security on (TLS,
SASL/SCRAM-SHA-512, the KRaft ``StandardAuthorizer`` denying what no ACL allows).

Each case has its own topic prefix and its own SCRAM user, so what one user may see (the doctor
lists every topic its principal may describe) is that case's topics only. Topics come from
``infra/topics.py``'s specs, ACLs from ``infra/acls.py``'s rules, both created as the super
user, as ``gpuattr topics`` and ``gpuattr acls`` do.

The broker's clock cannot be moved from here: on one host the probe's offset is the broker's
clock against itself, so these tests only show that the line is green and that its figures are
a real measurement (a round trip, an offset within it); the skew verdicts are the judge's table
tests (tests/unit/test_doctor_kafka_judge.py).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from pydantic import SecretStr

from gpuattr.doctor import kafka as doctor_kafka
from gpuattr.doctor.kafkajudge import ACLS, CHECKS, CLOCK, CONNECT, TOPICS
from gpuattr.doctor.lines import Line
from gpuattr.doctor.settings import DoctorSettings
from gpuattr.localkafka import LocalKafka
from gpuattr.procs import kafka_env, settings_env
from infra.acls import DEFAULT_PRINCIPALS, Acl, Role, create_acls, role_acls
from infra.admin import create_topics
from infra.kafka import client_options
from infra.settings import (
    ClusterSettings,
    DcgmSettings,
    KafkaSettings,
    KubeletSettings,
    KubeSettings,
)
from infra.topics import topic_specs
from tests.doctor_cli import doctor
from tests.helpers import wait_for_async

pytestmark = pytest.mark.integration

PARTITIONS = 2
TIMEOUT_S = 20.0  # a bound on each question, never a wait for something to happen
GOOD = {role: f"doc-{role}" for role in DEFAULT_PRINCIPALS}


@pytest.fixture
def doctor_broker(secure_broker: LocalKafka) -> LocalKafka:
    """The session's secured broker (:func:`tests.kafka_fixture.secure_broker`)."""
    return secure_broker


@dataclass
class Install:
    """One role's install on its own prefix: its topics and (some) ACLs."""

    broker: LocalKafka
    role: Role
    user: str
    prefix: str

    @property
    def app_id(self) -> str:
        return f"{self.prefix}worker"

    @property
    def sink_group(self) -> str:
        return f"{self.prefix}sink"

    @property
    def admin(self) -> KafkaSettings:
        return self.broker.client_settings(topic_prefix=self.prefix, partitions=PARTITIONS)

    @property
    def kafka(self) -> KafkaSettings:
        return self.broker.client_settings(
            self.user, topic_prefix=self.prefix, partitions=PARTITIONS
        )

    def acls(self) -> tuple[Acl, ...]:
        principals = {**DEFAULT_PRINCIPALS, self.role: self.user}
        return role_acls(self.admin, self.app_id, self.sink_group, principals)[self.role]

    def settings(self, kafka: KafkaSettings | None = None) -> DoctorSettings:
        return DoctorSettings(
            role=self.role,
            kafka=kafka or self.kafka,
            kubelet=KubeletSettings(),
            dcgm=DcgmSettings(),
            kube=KubeSettings(),
            cluster=ClusterSettings(),
            worker_app_id=self.app_id,
            sink_group=self.sink_group,
            node="gpu-node-1" if self.role == "agent" else None,
            timeout_s=TIMEOUT_S,
        )


async def install(
    broker: LocalKafka, role: Role, user: str, acls: Any = None, extra: tuple[Acl, ...] = ()
) -> Install:
    """Topics by ``infra/topics.py``; the role's ACLs, ``acls`` (a filter) applied, plus
    ``extra``."""
    inst = Install(broker, role, user, f"d{uuid.uuid4().hex[:8]}.")
    await create_topics(
        broker.bootstrap,
        topic_specs(inst.admin, inst.app_id),
        **client_options(inst.admin),
    )
    rules = [a for a in inst.acls() if acls is None or acls(a)]
    await create_acls(broker.bootstrap, [*rules, *extra], **client_options(inst.admin))
    return inst


async def delete_topic(inst: Install, name: str) -> None:
    """Delete ``name`` as the super user and wait until the broker no longer lists it."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=inst.broker.bootstrap, **client_options(inst.admin)
    )
    await admin.start()
    try:
        await admin.delete_topics([name])

        async def gone() -> bool:
            return name not in await admin.list_topics()

        await wait_for_async(gone, timeout_s=TIMEOUT_S, what=f"{name} deleted")
    finally:
        await admin.close()


def by_check(lines: list[Line]) -> dict[str, Line]:
    assert [line.check for line in lines] == list(CHECKS)
    return {line.check: line for line in lines}


def only_red(lines: list[Line]) -> list[str]:
    return [line.check for line in lines if line.status == "fail"]


@pytest.mark.parametrize("role", list(DEFAULT_PRINCIPALS))
async def test_a_good_install_is_green_for_every_role(
    doctor_broker: LocalKafka, role: Role
) -> None:
    inst = await install(doctor_broker, role, GOOD[role])
    lines = by_check(await doctor_kafka.check(inst.settings()))
    assert [line for line in lines.values() if line.status != "ok"] == []
    assert lines[CONNECT].facts["user"] == GOOD[role]
    assert lines[TOPICS].facts["missing"] == []
    # the roles have no DescribeConfigs: the line says the policies went unverified
    assert lines[TOPICS].facts["cleanup_policy_unverified"]
    assert "not verified" in lines[TOPICS].said
    assert lines[ACLS].facts["missing"] == []
    assert lines[ACLS].facts["more_than_needed"] == []
    checked = {"agent": 1, "cluster": 2, "sink": 2, "reader": 6}.get(role)
    if checked is not None:  # the role's topics and the probe's
        assert lines[ACLS].facts["topics_checked"] == checked + 1
    if role == "worker":  # its changelogs, and its group as well as its topics
        changelogs = [
            s.name for s in topic_specs(inst.admin, inst.app_id) if s.name.endswith("log")
        ]
        assert changelogs
        assert lines[TOPICS].facts["wanted"] == 8 + len(changelogs)
        assert lines[ACLS].facts["groups_checked"] == [inst.app_id]
    if role == "sink":
        assert lines[ACLS].facts["groups_checked"] == [inst.sink_group]
    clock = lines[CLOCK].facts
    assert 0 <= clock["rtt_s"] < TIMEOUT_S
    assert abs(clock["offset_s"]) <= clock["uncertainty_s"] + 0.002  # one clock, ms rounding


async def test_a_wrong_password_fails_connect_only_and_skips_the_rest(
    doctor_broker: LocalKafka,
) -> None:
    inst = await install(doctor_broker, "agent", GOOD["agent"])
    wrong = inst.kafka.model_copy(update={"sasl_password": SecretStr("not-the-password")})
    lines = by_check(await doctor_kafka.check(inst.settings(wrong)))
    assert only_red(list(lines.values())) == [CONNECT]
    assert [line.status for line in lines.values()] == ["fail", "skip", "skip", "skip"]
    assert lines[CONNECT].facts["fault"] == "auth"
    assert "gpuattr-agent-secrets" in lines[CONNECT].fix
    assert "not-the-password" not in repr(lines)


async def test_an_unreachable_bootstrap_and_an_unknown_ca_fail_connect_with_their_fixes(
    doctor_broker: LocalKafka, tmp_path: Any
) -> None:
    inst = await install(doctor_broker, "reader", GOOD["reader"])
    closed = inst.kafka.model_copy(update={"bootstrap": "127.0.0.1:1"})
    lines = by_check(await doctor_kafka.check(inst.settings(closed)))
    assert only_red(list(lines.values())) == [CONNECT]
    assert lines[CONNECT].facts["fault"] == "unreachable"
    # a CA that did not sign the broker's certificate
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_bytes(_other_ca())
    untrusted = inst.kafka.model_copy(update={"ssl_cafile": other_ca})
    lines = by_check(await doctor_kafka.check(inst.settings(untrusted)))
    assert only_red(list(lines.values())) == [CONNECT]
    assert lines[CONNECT].facts["fault"] == "tls"
    assert "GPUATTR_KAFKA_SSL_CAFILE" in lines[CONNECT].fix
    lines = by_check(
        await doctor_kafka.check(
            replace(inst.settings(), kafka=inst.kafka.model_copy(update={"bootstrap": None}))
        )
    )
    assert only_red(list(lines.values())) == [CONNECT]
    assert "GPUATTR_KAFKA_BOOTSTRAP" in lines[CONNECT].fix


def _other_ca() -> bytes:
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
                *("-subj", "/CN=not-the-brokers-ca"),
                *("-keyout", f"{tmp}/k.pem", "-out", f"{tmp}/c.pem"),
            ],
            check=True,
            capture_output=True,
        )
        with open(f"{tmp}/c.pem", "rb") as f:
            return f.read()


async def test_a_missing_topic_fails_topics_only(doctor_broker: LocalKafka) -> None:
    inst = await install(doctor_broker, "reader", "doc-missing")
    gone = inst.kafka.topic("alerts")  # one of the reader's, not the probe
    await delete_topic(inst, gone)
    lines = by_check(await doctor_kafka.check(inst.settings()))
    assert only_red(list(lines.values())) == [TOPICS], lines
    assert lines[TOPICS].facts["missing"] == [gone]
    assert gone in lines[TOPICS].said
    assert "gpuattr topics" in lines[TOPICS].fix


async def test_a_missing_probe_topic_fails_the_clock_only(doctor_broker: LocalKafka) -> None:
    inst = await install(doctor_broker, "cluster", "doc-probe")
    probe = inst.kafka.topic("doctor")
    await delete_topic(inst, probe)
    lines = by_check(await doctor_kafka.check(inst.settings()))
    assert only_red(list(lines.values())) == [CLOCK], lines
    assert lines[CLOCK].said == f"probe topic {probe} does not exist"
    assert "gpuattr topics" in lines[CLOCK].fix


async def test_an_acl_too_narrow_fails_acls_only_naming_the_grant(
    doctor_broker: LocalKafka,
) -> None:
    inst = await install(
        doctor_broker,
        "sink",
        "doc-narrow",
        acls=lambda a: not (a.resource == "group" and a.operation == "Read"),
    )
    lines = by_check(await doctor_kafka.check(inst.settings()))
    assert only_red(list(lines.values())) == [ACLS], lines
    assert lines[ACLS].facts["missing"] == [f"group {inst.sink_group} Describe/Read"]
    assert "doc-narrow" in lines[ACLS].fix


async def test_a_hidden_topic_is_an_acl_fault_not_a_topic_fault(
    doctor_broker: LocalKafka,
) -> None:
    """Without Read on ``alerts`` the sink cannot even see it: kafka.acls says so, and
    kafka.topics says the topic went unjudged rather than missing."""
    inst = await install(
        doctor_broker,
        "sink",
        "doc-narrow",
        acls=lambda a: not (a.resource == "topic" and a.operation == "Read"),
    )
    lines = by_check(await doctor_kafka.check(inst.settings()))
    assert only_red(list(lines.values())) == [ACLS], lines
    alerts = inst.kafka.topic("alerts")
    assert lines[ACLS].facts["missing"] == [f"topic {alerts} Describe/Read"]
    assert lines[TOPICS].facts["hidden"] == [alerts]


async def test_an_acl_too_broad_fails_acls_naming_the_extra(doctor_broker: LocalKafka) -> None:
    user = "doc-broad"
    inst = await install(doctor_broker, "agent", user)
    extra = (
        Acl(user, "topic", inst.kafka.topic("node-events"), "literal", "Read"),
        Acl(user, "topic", inst.kafka.topic("alerts"), "literal", "Write"),
    )
    await create_acls(doctor_broker.bootstrap, extra, **client_options(inst.admin))
    lines = by_check(await doctor_kafka.check(inst.settings()))
    assert only_red(list(lines.values())) == [ACLS], lines
    assert lines[ACLS].facts["more_than_needed"] == [
        f"topic {inst.kafka.topic('alerts')} Describe/Write",
        f"topic {inst.kafka.topic('node-events')} Read",
    ]
    assert lines[ACLS].facts["missing"] == []
    assert "more than needed" in lines[ACLS].said


async def test_gpuattr_doctor_prints_json_lines_and_exits_by_them(
    doctor_broker: LocalKafka,
) -> None:
    """The real command, as an operator runs it in the reader's environment: green, then red
    once a topic is gone."""
    inst = await install(doctor_broker, "reader", "doc-cli")

    env = {
        **kafka_env(inst.kafka),
        **settings_env(WORKER_APP_ID=inst.app_id, SINK_GROUP_ID=inst.sink_group),
    }
    good = await doctor("reader", env)
    assert good.code == 0, good.lines
    assert list(good.statuses().items()) == [(check, "ok") for check in CHECKS]

    await delete_topic(inst, inst.kafka.topic("flags"))
    gone = await doctor("reader", env)
    assert gone.code == 1, gone.lines
    assert list(gone.statuses().values()) == ["ok", "fail", "ok", "ok"]
    assert gone.lines[TOPICS]["fix"]
    assert inst.kafka.topic("flags") in str(gone.lines[TOPICS]["said"])
