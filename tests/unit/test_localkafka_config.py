"""The local broker's rendered config, settings defaults and pinned version (no JVM needed)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path

import pytest
from aiokafka.errors import InvalidReplicationFactorError

from gpuattr.localkafka import (
    KAFKA_VERSION,
    LocalKafkaConfig,
    LocalKafkaError,
    render_properties,
    resolve_jars,
)
from gpuattr.localkafka.config import new_cluster_id
from infra.admin import _check


def _parse(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and line[0] != "#")
    return {key.strip(): value.strip() for key, value in pairs}


def test_properties_fill_ports_and_data_dir(tmp_path: Path) -> None:
    text = render_properties(tmp_path / "logs", 19092, 19093)
    props = _parse(text)
    assert "$" not in text
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["log.dirs"] == str(tmp_path / "logs")


def test_properties_are_single_node_kraft_with_fast_group_join(tmp_path: Path) -> None:
    props = _parse(render_properties(tmp_path, 1, 2))
    assert props["process.roles"] == "broker,controller"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["group.initial.rebalance.delay.ms"] == "0"  # local broker only
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["num.partitions"] == "4"
    assert props["auto.create.topics.enable"] == "true"


def test_pom_pins_the_same_kafka_version() -> None:
    pom = (resources.files("gpuattr.localkafka") / "pom.xml").read_text()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    version = ET.fromstring(pom).find("m:properties/m:kafka.version", ns)
    assert version is not None
    assert version.text == KAFKA_VERSION


def test_cache_dir_defaults_to_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUATTR_CACHE_DIR", str(tmp_path))
    assert LocalKafkaConfig(data_dir=tmp_path / "d").cache_dir == tmp_path
    monkeypatch.delenv("GPUATTR_CACHE_DIR")
    assert LocalKafkaConfig(data_dir=tmp_path / "d").cache_dir == Path.home() / ".cache/gpuattr"


def test_cluster_id_is_16_bytes_base64url() -> None:
    cid = new_cluster_id()
    assert len(cid) == 22
    assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_missing_maven_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(LocalKafkaError, match="mvn"):
        resolve_jars(tmp_path / "cache")


def test_topic_errors_other_than_already_exists_raise() -> None:
    assert _check([("a", 0, None), ("b", 36, "Topic 'b' already exists.")]) == ["a"]
    assert _check([("v0", 0)]) == ["v0"]
    with pytest.raises(InvalidReplicationFactorError, match="'c'"):
        _check([("c", 38, "only 1 broker(s) are registered")])


def test_cluster_id_never_reads_as_an_option() -> None:
    """One random id in ~65 starts with '-', which the storage tool's parser takes for an
    option (``-t -Ab3...``: "expected one argument"): those are drawn again, as Kafka does."""
    ids = [new_cluster_id() for _ in range(20_000)]
    assert not [cid for cid in ids if cid.startswith("-")]
    assert len(set(ids)) == len(ids)


# --- with security on ---------------------------------------------------------------------------


def test_secured_properties_leave_no_unauthenticated_door(tmp_path: Path) -> None:
    from gpuattr.localkafka import LocalKafkaSecurity
    from gpuattr.localkafka.security import overrides

    security = LocalKafkaSecurity({"admin": "a" * 32, "gpuattr-agent": "b" * 32})
    props = _parse(
        render_properties(
            tmp_path, 19092, 19093, overrides(security, tmp_path / "tls", 19092, 19093)
        )
    )
    assert props["listeners"] == "SASL_SSL://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "SASL_SSL://127.0.0.1:19092"
    protocols = dict(p.split(":") for p in props["listener.security.protocol.map"].split(","))
    assert protocols == {"SASL_SSL": "SASL_SSL", "CONTROLLER": "SASL_PLAINTEXT"}  # no PLAINTEXT
    assert (
        props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    )
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:admin"
    assert props["listener.name.sasl_ssl.sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["ssl.keystore.location"] == str(tmp_path / "tls" / "broker.pem")
    assert props["auto.create.topics.enable"] == "false"
    assert "b" * 32 not in "".join(props.values())  # only the super user's secret is in the file
    assert (
        sum(
            1
            for line in render_properties(tmp_path, 1, 2, {"listeners": "x"}).splitlines()
            if line.startswith("listeners=")
        )
        == 1
    )


def test_scram_users_are_added_when_storage_is_formatted() -> None:
    from gpuattr.localkafka import LocalKafkaSecurity
    from gpuattr.localkafka.security import scram_arguments

    security = LocalKafkaSecurity({"admin": "pw1", "gpuattr-sink": "pw2"})
    assert scram_arguments(security) == [
        "--add-scram",
        "SCRAM-SHA-512=[name=admin,password=pw1]",
        "--add-scram",
        "SCRAM-SHA-512=[name=gpuattr-sink,password=pw2]",
    ]
    assert "pw1" not in repr(security)
    generated = LocalKafkaSecurity.generate(["gpuattr-agent", "gpuattr-worker"])
    assert set(generated.users) == {"admin", "gpuattr-agent", "gpuattr-worker"}
    assert len(set(generated.users.values())) == 3  # each its own password
    with pytest.raises(ValueError, match="super user"):
        LocalKafkaSecurity({"gpuattr-agent": "pw"})
    with pytest.raises(ValueError, match="A-Za-z0-9"):
        LocalKafkaSecurity({"admin": 'pw" user_x="y'})  # nothing that could escape the JAAS line
