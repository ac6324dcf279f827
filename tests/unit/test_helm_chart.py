"""The Helm chart: the one source of the manifests.

Its defaults render the committed kustomize base (byte for byte through the generator, and the
same documents); the overlays' patches are values too; every rendered manifest is valid against
the Kubernetes schemas, strictly; the values schema refuses a misspelt key or a wrong type with
its own message; every ``GPUATTR_*`` variable it sets is a setting the code reads. ``helm`` is the
one ``gpuattr kube --build`` builds (``make test`` builds it first), never skipped.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic_settings import BaseSettings

import infra.settings
from gpuattr.localkafka.jars import default_cache_dir
from gpuattr.localkube.binaries import resolve_helm
from tests.kustomize_render import BASE, ROOT, base_docs, microk8s_docs, nvml_processes_docs
from tests.unit.test_dashboard import COMMITTED as DASHBOARD
from tests.unit.test_deploy import K8S_VERSION

CHART = ROOT / "deploy" / "helm" / "gpuattr"
FULL_VALUES = ROOT / "tests" / "fixtures" / "helm" / "full-values.yaml"
FIXTURES = ROOT / "tests" / "fixtures"
#: operators' kinds: no Kubernetes schema (the real-server test applies their genuine CRDs)
CRD_GROUPS = ("kafka.strimzi.io/v1", "monitoring.coreos.com/v1")
MICROK8S_ROOT = "/var/snap/microk8s/common/var/lib/kubelet"

Doc = dict[str, Any]


def generator() -> ModuleType:
    path = ROOT / "deploy" / "helm" / "render_kustomize.py"
    spec = importlib.util.spec_from_file_location("render_kustomize", path)
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def helm() -> Path:
    return resolve_helm(default_cache_dir()) / "helm"


def run(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args], capture_output=True, text=True, timeout=120, check=False
    )


def docs_of(text: str) -> list[Doc]:
    return [d for d in yaml.safe_load_all(text) if d]


def template(helm: Path, *args: str) -> list[Doc]:
    return docs_of(generator().helm_template(helm, *args))


def key(d: Doc) -> tuple[str, str, str]:
    return d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]


def same(a: list[Doc], b: list[Doc]) -> bool:
    return sorted(a, key=key) == sorted(b, key=key)


def one(docs: list[Doc], kind: str, name: str) -> Doc:
    (doc,) = [d for d in docs if (d["kind"], d["metadata"]["name"]) == (kind, name)]
    return doc


@pytest.mark.parametrize("values", [[], ["-f", str(FULL_VALUES)]], ids=["default", "full"])
def test_lint_strict(helm: Path, values: list[str]) -> None:
    done = run(helm, "lint", "--strict", str(CHART), *values)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


def test_the_charts_topics_and_users_are_their_owners_render() -> None:
    """files/kafka.yaml is made from contract/topics.py and infra/acls.py, never kept by hand."""
    gen = generator()
    assert gen.KAFKA_FILE.read_text() == gen.kafka_file(), "stale chart file: `make manifests`"


def test_the_committed_base_is_the_charts_default_render(helm: Path) -> None:
    gen = generator()
    files = gen.base_files(gen.helm_template(helm, *gen.BASE_FLAGS))
    committed = {p.name: p.read_text() for p in BASE.iterdir()}
    assert files == committed, "stale base: run `make manifests`"
    assert same(template(helm, *gen.BASE_FLAGS), base_docs())


@pytest.mark.parametrize(
    ("values", "overlay"),
    [
        (["--set", f"kubelet.root={MICROK8S_ROOT}"], microk8s_docs),
        (["--set", "nvmlProcesses.enabled=true"], nvml_processes_docs),
    ],
    ids=["microk8s", "nvml-processes"],
)
def test_the_overlays_are_values(
    helm: Path, values: list[str], overlay: Callable[[], list[Doc]]
) -> None:
    assert same(template(helm, *generator().BASE_FLAGS, *values), overlay())


@pytest.mark.parametrize("values", [[], ["-f", str(FULL_VALUES)]], ids=["default", "full"])
def test_every_manifest_validates_strictly(helm: Path, values: list[str]) -> None:
    docs = [d for d in template(helm, *values) if d["apiVersion"] not in CRD_GROUPS]
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_full_values_make_every_option(helm: Path) -> None:
    docs = template(helm, "-f", str(FULL_VALUES))
    kinds = {d["kind"] for d in docs}
    assert kinds >= {"Kafka", "KafkaNodePool", "KafkaTopic", "KafkaUser", "PodMonitor"}
    assert kinds >= {"PrometheusRule", "Namespace", "DaemonSet", "Deployment"}
    kafka = one(docs, "Kafka", "gpuattr-kafka")
    assert kafka["metadata"]["annotations"] == {
        "strimzi.io/kraft": "enabled",
        "strimzi.io/node-pools": "enabled",
    }
    (listener,) = kafka["spec"]["kafka"]["listeners"]
    assert listener["tls"] is True
    assert listener["authentication"] == {"type": "scram-sha-512"}
    assert kafka["spec"]["kafka"]["authorization"] == {"type": "simple"}
    pool = one(docs, "KafkaNodePool", "dual-role")
    assert pool["metadata"]["labels"] == {"strimzi.io/cluster": "gpuattr-kafka"}
    assert sorted(pool["spec"]["roles"]) == ["broker", "controller"]
    # the roles in the Kafka's namespace read the User Operator's Secret; the agent, elsewhere,
    # its own (existing) one
    for role in ("cluster", "worker", "sink"):
        (ctr,) = one(docs, "Deployment", f"gpuattr-{role}")["spec"]["template"]["spec"][
            "containers"
        ]
        env = {e["name"]: e for e in ctr["env"]}
        assert env["GPUATTR_KAFKA_SASL_PASSWORD"]["valueFrom"] == {
            "secretKeyRef": {"name": f"gpuattr-{role}", "key": "password"}
        }
    agent = one(docs, "DaemonSet", "gpuattr-agent")
    pod = agent["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert {"secretRef": {"name": "agent-kafka"}} in ctr["envFrom"]
    assert all(e["name"] != "GPUATTR_KAFKA_SASL_PASSWORD" for e in ctr["env"])
    assert pod["hostPID"] is True
    assert pod["volumes"][0]["hostPath"]["path"] == f"{MICROK8S_ROOT}/pod-resources"
    assert {"name": "kafka-ca", "configMap": {"name": "kafka-ca", "optional": True}} in pod[
        "volumes"
    ]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["GPUATTR_KUBE_DRA"] == "false"
    assert env["GPUATTR_KUBE_OPERATOR_NAMESPACE"] == "nvidia-gpu-operator"
    assert env["GPUATTR_DCGM_PER_POD_ROWS"] == "on"
    secrets = {d["metadata"]["name"] for d in docs if d["kind"] == "Secret"}
    assert secrets == {"gpuattr-cluster-secrets", "gpuattr-worker-secrets"}  # no agent's, sink's
    dashboard = one(docs, "ConfigMap", "gpuattr-grafana-dashboard")
    assert dashboard["data"] == {"gpuattr.json": DASHBOARD.read_text()}


WORKLOAD_KINDS = {"agent": "DaemonSet", "cluster": "Deployment"}
WORKLOAD_KINDS |= {"worker": "Deployment", "sink": "Deployment"}
#: what the doctor's Pod takes from its role's: who it is, where it runs, what it sees
SAME_POD = ("serviceAccountName", "nodeSelector", "tolerations", "hostPID", "runtimeClassName")
SAME_POD += ("volumes",)
SAME_CONTAINER = ("image", "imagePullPolicy", "env", "envFrom", "volumeMounts", "securityContext")


def doctor_pods(docs: list[Doc]) -> dict[str, Doc]:
    """The ``helm test`` Pods, by name."""
    return {
        d["metadata"]["name"]: d
        for d in docs
        if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"
    }


@pytest.mark.parametrize("values", [[], ["-f", str(FULL_VALUES)]], ids=["default", "full"])
def test_helm_test_runs_the_doctor_as_each_role(helm: Path, values: list[str]) -> None:
    """Each role's doctor Pod is the role's pod but for what it runs: the same ServiceAccount,
    env, Secret, mounts and node, so the doctor checks exactly what the role runs with."""
    docs = template(helm, *values)
    pods = doctor_pods(docs)
    assert set(pods) == {f"gpuattr-doctor-{role}" for role in WORKLOAD_KINDS}
    for role, kind in WORKLOAD_KINDS.items():
        pod = pods[f"gpuattr-doctor-{role}"]
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
        workload = one(docs, kind, f"gpuattr-{role}")
        assert pod["metadata"]["namespace"] == workload["metadata"]["namespace"]
        assert pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == (
            "before-hook-creation"
        )
        # a workload's selector would adopt (and a ReplicaSet delete) a Pod it matches
        selector = workload["spec"]["selector"]["matchLabels"].items()
        assert not selector <= pod["metadata"]["labels"].items(), role
        want = workload["spec"]["template"]["spec"]
        got = pod["spec"]
        assert got["restartPolicy"] == "Never"
        for field in SAME_POD:
            assert got.get(field) == want.get(field), (role, field)
        (ctr,) = got["containers"]
        (role_ctr,) = want["containers"]
        assert ctr["command"] == ["gpuattr", "doctor", "--role", role]
        assert "args" not in ctr
        for field in SAME_CONTAINER:
            assert ctr.get(field) == role_ctr.get(field), (role, field)


@pytest.mark.parametrize(
    "values",
    [list(generator().BASE_FLAGS), ["--set", "doctor.enabled=false"]],
    ids=["skip-tests", "disabled"],
)
def test_no_doctor_pods(helm: Path, values: list[str]) -> None:
    assert doctor_pods(template(helm, *values)) == {}


def test_a_fixed_exporter_url_instead_of_discovery(helm: Path) -> None:
    url = "http://nvidia-dcgm-exporter.gpu-operator:9400/metrics"
    docs = template(helm, "--set", "dcgm.discover=false", "--set", f"dcgm.url={url}")
    (ctr,) = one(docs, "DaemonSet", "gpuattr-agent")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["GPUATTR_DCGM_URL"] == url
    assert not [n for n in env if n.startswith("GPUATTR_DCGM_") and "DISCOVER" in n]
    done = run(helm, "template", "x", str(CHART), "--set", "dcgm.discover=false")
    assert done.returncode != 0
    assert "dcgm.url is required" in done.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "kafka.bootsrap=kafka:9093"], "additional properties 'bootsrap' not allowed"),
        (["--set", "worker.replicas=two"], "at '/worker/replicas': got string, want integer"),
        (["--set-string", "agent.dra=yes"], "at '/agent/dra': got string, want boolean"),
        (["--set", "kafka.saslMechanism=SCRAM"], "at '/kafka/saslMechanism'"),
        (["--set", "agent.resources.limits.gpu=1"], "additional properties 'gpu' not allowed"),
    ],
    ids=["misspelt-key", "wrong-type", "string-for-bool", "not-an-enum", "nested-key"],
)
def test_a_wrong_value_fails_with_the_schemas_message(
    helm: Path, values: list[str], message: str
) -> None:
    for command in (["template", "x"], ["lint", "--strict"]):
        done = run(helm, *command, str(CHART), *values)
        assert done.returncode != 0, command
        assert message in done.stdout + done.stderr, (command, done.stdout, done.stderr)


def test_the_schema_closes_every_object() -> None:
    """Every object of the schema lists its keys (maps excepted: their values are typed)."""
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object":
                extra = node.get("additionalProperties")
                assert extra is False or isinstance(extra, dict), path
                if extra is not False:  # a map (labels, Kafka config): no listed keys
                    assert "properties" not in node, path
            for k, v in node.items():
                walk(v, f"{path}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}/{i}")

    walk(schema, "")


def setting_names() -> set[str]:
    """Every environment variable a settings class of infra/settings.py reads."""
    names = set()
    for _, cls in inspect.getmembers(infra.settings, inspect.isclass):
        if issubclass(cls, BaseSettings) and cls is not BaseSettings:
            prefix = cls.model_config.get("env_prefix", "")
            names |= {f"{prefix}{field}".upper() for field in cls.model_fields}
    return names


def test_every_variable_the_chart_sets_is_a_setting(helm: Path) -> None:
    docs = template(helm) + template(helm, "-f", str(FULL_VALUES))
    docs += template(helm, "--set", "dcgm.discover=false", "--set", "dcgm.url=http://x:9400/m")
    set_here: set[str] = set()
    for doc in docs:
        if doc["kind"] in ("ConfigMap", "Secret") and doc["metadata"]["name"] != (
            "gpuattr-grafana-dashboard"
        ):
            set_here |= set(doc.get("data") or {}) | set(doc.get("stringData") or {})
        if doc["kind"] in ("DaemonSet", "Deployment"):
            for ctr in doc["spec"]["template"]["spec"]["containers"]:
                set_here |= {e["name"] for e in ctr.get("env", [])}
    ours = {n for n in set_here if n.startswith("GPUATTR_")}
    assert ours - setting_names() == set()
    assert len(ours) > 25


def test_the_charts_dashboard_is_the_committed_one() -> None:
    """Helm reads only files inside its chart: the dashboard script writes both copies."""
    assert (CHART / "files" / "gpuattr.json").read_bytes() == DASHBOARD.read_bytes()


@pytest.mark.parametrize("folder", ["strimzi", "prometheus-operator"])
def test_the_vendored_crds_are_the_recorded_ones(folder: str) -> None:
    sums = (FIXTURES / folder / "SHA256SUMS").read_text().split("\n")
    recorded = dict(reversed(line.split()) for line in sums if line)
    files = {p.name for p in (FIXTURES / folder).glob("*.yaml")}
    assert set(recorded) == files
    for name, digest in recorded.items():
        assert hashlib.sha256((FIXTURES / folder / name).read_bytes()).hexdigest() == digest
        crd = yaml.safe_load((FIXTURES / folder / name).read_text())
        assert crd["kind"] == "CustomResourceDefinition"
