"""Render the kustomize base from the Helm chart: one source for the manifests.

    .venv/bin/python deploy/helm/render_kustomize.py   (make manifests)

runs ``helm template`` on ``deploy/helm/gpuattr`` with its default values, without its ``helm
test`` Pods (``BASE_FLAGS``), and writes each template's documents to the base file of the same
name (``agent.yaml``, ``cluster.yaml``, …, split by Helm's ``# Source:`` comments), and the
base's ``kustomization.yaml``. First it writes
the chart's ``files/kafka.yaml`` (the KafkaTopics' and KafkaUsers' content) from their owners,
:mod:`contract.topics`/:mod:`infra.topics` and :mod:`infra.acls`. The overlays
stay kustomize patches on that base. ``helm`` is the one ``gpuattr kube --build`` builds from the
Go module proxy (:func:`gpuattr.localkube.binaries.resolve_helm`).
tests/unit/test_helm_chart.py fails when the committed base is not this script's output.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHART = HERE / "gpuattr"
BASE = HERE.parent / "kustomize" / "base"
RELEASE = "gpuattr"
SOURCE = f"# Source: {CHART.name}/templates/"
#: the base is what ``helm install`` applies: the ``helm test`` doctor Pods are not in it
BASE_FLAGS = ("--skip-tests",)
HEADER = (
    "# Generated from the Helm chart deploy/helm/gpuattr (default values) by\n"
    "# deploy/helm/render_kustomize.py: edit the chart, then run `make manifests`.\n"
)


def helm_template(helm: Path, *args: str) -> str:
    """``helm template`` of the chart; ``args`` as helm takes them (``-f``, ``--set``)."""
    done = subprocess.run(
        [str(helm), "template", RELEASE, str(CHART), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"helm template failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def split_sources(rendered: str) -> dict[str, list[str]]:
    """Each template's documents, in the order Helm printed them, by template file name."""
    out: dict[str, list[str]] = {}
    for chunk in rendered.split("---\n"):
        first, _, body = chunk.partition("\n")
        if not first.startswith(SOURCE):
            if chunk.strip():
                raise ValueError(f"a document without its source: {chunk[:80]!r}")
            continue
        out.setdefault(first.removeprefix(SOURCE), []).append(body.strip("\n") + "\n")
    return out


def tidy(rendered: str) -> str:
    """Drop the blank-but-indented lines an empty optional block leaves (``{{- with }}`` in a
    ``nindent``), and trailing spaces: the same YAML, as a person would write it."""
    lines = [line.rstrip() for line in rendered.splitlines() if line == "" or line.strip()]
    return "\n".join(lines) + "\n"


def base_files(rendered: str) -> dict[str, str]:
    """The base's files: one per template, and the kustomization listing them."""
    sources = split_sources(tidy(rendered))
    files = {name: HEADER + "---\n".join(docs) for name, docs in sources.items()}
    resources = "".join(f"  - {name}\n" for name in sources)
    files["kustomization.yaml"] = (
        HEADER
        + "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
        + resources
    )
    return files


KAFKA_FILE = CHART / "files" / "kafka.yaml"
KAFKA_HEADER = (
    "# Generated from contract/topics.py and infra/acls.py by deploy/helm/render_kustomize.py\n"
    "# (`make manifests`): the topics and each role's ACLs, for the Strimzi KafkaTopics and\n"
    "# KafkaUsers. `partitions: null`: the chart's kafka.partitions.\n"
)


def kafka_file() -> str:
    """The chart's ``files/kafka.yaml``: every topic (name, own partition count, config) and each
    role's user with its ACLs, for the default topic prefix, worker app id and sink group."""
    import yaml

    from contract.topics import TOPICS
    from infra.acls import DEFAULT_PRINCIPALS, ROLES, role_acls
    from infra.settings import KafkaSettings, SinkSettings, WorkerSettings
    from infra.topics import topic_specs

    kafka = KafkaSettings()
    app_id = WorkerSettings().app_id
    own = {kafka.topic(doc.role): doc.partitions for doc in TOPICS}
    topics = [
        {
            # a Kubernetes name: the topic's, with the prefix's dot as a dash
            "object": spec.name.replace(".", "-"),
            "name": spec.name,
            "partitions": own.get(spec.name),
            "config": dict(spec.config),
        }
        for spec in topic_specs(kafka, app_id)
    ]
    users = []
    acls = role_acls(kafka, app_id, SinkSettings().group_id)
    for role in ROLES:
        rules: dict[tuple[str, str, str], list[str]] = {}
        for acl in acls[role]:
            ops = rules.setdefault((acl.resource, acl.name, acl.pattern), [])
            ops.append(acl.operation)
        users.append(
            {
                "name": DEFAULT_PRINCIPALS[role],
                "acls": [
                    {
                        "resource": {"type": kind, "name": name, "patternType": pattern},
                        "operations": ops,
                    }
                    for (kind, name, pattern), ops in rules.items()
                ],
            }
        )
    body = yaml.safe_dump({"topics": topics, "users": users}, sort_keys=False, width=100)
    return KAFKA_HEADER + body


def main() -> None:
    from gpuattr.localkafka.jars import default_cache_dir
    from gpuattr.localkube.binaries import resolve_helm

    KAFKA_FILE.write_text(kafka_file())
    sys.stdout.write(f"wrote {KAFKA_FILE}\n")
    helm = resolve_helm(default_cache_dir()) / "helm"
    for name, text in base_files(helm_template(helm, *BASE_FLAGS)).items():
        (BASE / name).write_text(text)
        sys.stdout.write(f"wrote {BASE / name}\n")


if __name__ == "__main__":
    main()
