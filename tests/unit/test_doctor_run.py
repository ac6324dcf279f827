"""``gpuattr doctor``'s runner: settings the role would refuse are a red line of their group (the
role would not start: nothing of that group is asked), never the doctor's end; a secret is never
printed; the role's own secrets have their lines."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

import orjson
import pytest

from gpuattr.cli import main
from gpuattr.doctor.run import GROUPS, run_doctor, settings_fix
from gpuattr.doctor.settings import DoctorSettings
from infra.settings import (
    ClusterSettings,
    DcgmSettings,
    KafkaSettings,
    KubeletSettings,
    KubeSettings,
)

# nothing listens on port 1: a connect fails at once, so no test waits on a timeout
UNREACHABLE = "127.0.0.1:1"


@pytest.fixture
def clean_env() -> Iterator[None]:
    saved = dict(os.environ)
    for name in list(os.environ):
        if name.startswith("GPUATTR_") or name == "NODE_NAME":
            del os.environ[name]
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def doctor_json(
    capsys: pytest.CaptureFixture[str], role: str, env: Mapping[str, str]
) -> tuple[int, dict[str, dict[str, object]]]:
    os.environ.update(env)
    code = main(["doctor", "--role", role, "--json", "--timeout", "2"])
    doc = orjson.loads(capsys.readouterr().out)
    return code, {c["check"]: c for c in doc["checks"]}


def test_an_empty_kafka_password_is_the_kafka_settings_line_with_the_roles_secret(
    clean_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = doctor_json(
        capsys,
        "worker",
        {
            "GPUATTR_KAFKA_BOOTSTRAP": UNREACHABLE,
            "GPUATTR_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "GPUATTR_KAFKA_SASL_USERNAME": "gpuattr-worker",
            "GPUATTR_KAFKA_SASL_PASSWORD": "",
        },
    )
    assert code == 1
    assert list(lines) == ["kafka.settings", "secrets.signing"]
    refused = lines["kafka.settings"]
    assert refused["status"] == "fail"
    assert "GPUATTR_KAFKA_SASL_PASSWORD" in str(refused["said"])
    assert "gpuattr-worker-secrets" in str(refused["fix"])
    assert lines["secrets.signing"]["status"] == "warn"  # unset: honoured, unsigned


def test_a_refused_setting_never_prints_its_value(
    clean_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = doctor_json(
        capsys,
        "cluster",
        {
            "GPUATTR_KAFKA_BOOTSTRAP": UNREACHABLE,
            "GPUATTR_CLUSTER_SIGNING_KEY": "change-me",
            "GPUATTR_KUBE_WATCH_TIMEOUT_S": "not-a-number-xyzzy",
        },
    )
    assert code == 1
    assert lines["secrets.settings"]["status"] == "fail"
    assert lines["api.settings"]["status"] == "fail"
    assert "GPUATTR_CLUSTER_SIGNING_KEY" in str(lines["secrets.settings"]["said"])
    dumped = orjson.dumps(lines).decode()
    assert "change-me" not in dumped
    assert "xyzzy" not in dumped
    # Kafka was still asked: its own settings were fine
    assert lines["kafka.connect"]["status"] == "fail"
    assert lines["kafka.topics"]["status"] == "skip"


@pytest.mark.parametrize(
    ("env", "status", "said"),
    [
        ({}, "warn", "neither a Slack nor a webhook URL is set"),
        (
            {"GPUATTR_SINK_SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/x"},
            "ok",
            "delivers to Slack",
        ),
    ],
)
def test_the_sinks_destinations(
    clean_env: None,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    status: str,
    said: str,
) -> None:
    code, lines = doctor_json(capsys, "sink", {"GPUATTR_KAFKA_BOOTSTRAP": UNREACHABLE, **env})
    assert code == 1  # Kafka is not there
    line = lines["secrets.destinations"]
    assert (line["status"], said in str(line["said"])) == (status, True)
    assert "hooks.slack.com" not in orjson.dumps(lines).decode()


def test_a_set_signing_key_is_green(clean_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    key = "0123456789abcdef0123456789abcdef"
    _, lines = doctor_json(
        capsys,
        "worker",
        {"GPUATTR_KAFKA_BOOTSTRAP": UNREACHABLE, "GPUATTR_CLUSTER_SIGNING_KEY": key},
    )
    assert lines["secrets.signing"]["status"] == "ok"
    assert key not in orjson.dumps(lines).decode()


def settings(role: str, refused: Mapping[str, str]) -> DoctorSettings:
    return DoctorSettings(
        role=role,  # type: ignore[arg-type]
        kafka=KafkaSettings(),
        kubelet=KubeletSettings(),
        dcgm=DcgmSettings(),
        kube=KubeSettings(),
        cluster=ClusterSettings(),
        worker_app_id="gpuattr-worker",
        sink_group="gpuattr-sink",
        node="gpu-1" if role == "agent" else None,
        refused=refused,
    )


@pytest.mark.parametrize("role", list(GROUPS))
async def test_every_group_refused_is_one_red_line_each_and_nothing_is_asked(role: str) -> None:
    groups = [name for name, _ in GROUPS[role]]  # type: ignore[index]
    lines = await run_doctor(settings(role, dict.fromkeys(groups, "x: refused")))
    assert [(x.check, x.status) for x in lines] == [(f"{g}.settings", "fail") for g in groups]
    assert all(x.fix and "{role}" not in x.fix for x in lines)


def test_the_fix_names_the_roles_own_secret() -> None:
    assert "gpuattr-agent-secrets" in settings_fix("kafka", "agent")
    assert "gpuattr-sink-secrets" in settings_fix("secrets", "sink")
    assert "GPUATTR_CLUSTER_SIGNING_KEY" in settings_fix("secrets", "cluster")
