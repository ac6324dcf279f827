"""The vendored Kueue CRDs (``tests/fixtures/kueue/``) are the recorded upstream files, serve the
versions the watcher asks for (``v1beta2`` stored, ``v1beta1`` deprecated), and every field
:mod:`agents.kube.kueue` reads is in each served version with the type it is read as."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.kube.kueue import GROUP, VERSIONS

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "kueue"
FILES = {
    "workloads": ("Workload", "Namespaced"),
    "localqueues": ("LocalQueue", "Namespaced"),
    "clusterqueues": ("ClusterQueue", "Cluster"),
    "resourceflavors": ("ResourceFlavor", "Cluster"),
}


@functools.cache
def crd(plural: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((HERE / f"{GROUP}_{plural}.yaml").read_text())
    return loaded


def schema(plural: str, version: str) -> dict[str, Any]:
    (found,) = [v for v in crd(plural)["spec"]["versions"] if v["name"] == version]
    out: dict[str, Any] = found["schema"]["openAPIV3Schema"]
    return out


def at(node: dict[str, Any], path: str) -> dict[str, Any]:
    """The schema of ``path`` (dots; ``[]`` steps into an array's items)."""
    for step in path.split("."):
        if step.endswith("[]"):
            node = node["properties"][step[:-2]]
            assert node["type"] == "array", path
            node = node["items"]
        else:
            node = node["properties"][step]
    return node


#: (plural, path, type) of every field the translator reads, in both versions unless named
READ: list[tuple[str, str, str]] = [
    ("workloads", "spec.podSets", "array"),
    ("workloads", "spec.podSets[].name", "string"),
    ("workloads", "spec.podSets[].count", "integer"),
    ("workloads", "spec.podSets[].template", "object"),
    ("workloads", "spec.podSets[].template.spec", "object"),
    ("workloads", "spec.podSets[].template.spec.containers", "array"),
    ("workloads", "spec.podSets[].template.spec.initContainers", "array"),
    ("workloads", "spec.podSets[].template.spec.nodeSelector", "object"),
    ("workloads", "spec.podSets[].template.spec.resourceClaims", "array"),
    ("workloads", "spec.queueName", "string"),
    ("workloads", "spec.priority", "integer"),
    ("workloads", "status.conditions[].type", "string"),
    ("workloads", "status.conditions[].status", "string"),
    ("workloads", "status.conditions[].reason", "string"),
    ("workloads", "status.conditions[].message", "string"),
    ("workloads", "status.conditions[].lastTransitionTime", "string"),
    ("workloads", "status.admission.clusterQueue", "string"),
    ("workloads", "status.admission.podSetAssignments[].name", "string"),
    ("workloads", "status.admission.podSetAssignments[].count", "integer"),
    ("workloads", "status.admission.podSetAssignments[].flavors", "object"),
    ("localqueues", "spec.clusterQueue", "string"),
    ("clusterqueues", "spec.resourceGroups[].coveredResources", "array"),
    ("clusterqueues", "spec.resourceGroups[].flavors[].name", "string"),
    ("resourceflavors", "spec.nodeLabels", "object"),
]


@pytest.mark.parametrize("plural", sorted(FILES))
def test_each_is_the_recorded_upstream_file(plural: str) -> None:
    recorded = dict(
        reversed(line.split(maxsplit=1)) for line in (HERE / "SHA256SUMS").read_text().splitlines()
    )
    file = HERE / f"{GROUP}_{plural}.yaml"
    assert hashlib.sha256(file.read_bytes()).hexdigest() == recorded[file.name]


@pytest.mark.parametrize("plural", sorted(FILES))
def test_each_serves_both_versions_and_stores_v1beta2(plural: str) -> None:
    spec = crd(plural)["spec"]
    kind, scope = FILES[plural]
    assert (spec["group"], spec["names"]["kind"], spec["scope"]) == (GROUP, kind, scope)
    served = {v["name"]: (v["served"], v["storage"]) for v in spec["versions"]}
    assert served == {"v1beta2": (True, True), "v1beta1": (True, False)}
    assert VERSIONS == ("v1beta2", "v1beta1")  # the watcher's preference: the stored one first


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("plural", "path", "kind"), READ, ids=[f"{p}:{f}" for p, f, _ in READ])
def test_every_field_we_read_is_there_with_its_type(
    plural: str, path: str, kind: str, version: str
) -> None:
    assert at(schema(plural, version), path)["type"] == kind


def test_the_priority_class_is_renamed_between_the_versions() -> None:
    v1 = at(schema("workloads", "v1beta1"), "spec")["properties"]
    v2 = at(schema("workloads", "v1beta2"), "spec")["properties"]
    assert v1["priorityClassName"]["type"] == "string"
    assert "priorityClassRef" not in v1
    assert "priorityClassName" not in v2
    assert at(schema("workloads", "v1beta2"), "spec.priorityClassRef.name")["type"] == "string"


def test_the_product_label_is_a_string_node_label() -> None:
    for version in VERSIONS:
        labels = at(schema("resourceflavors", version), "spec.nodeLabels")
        assert labels["additionalProperties"]["type"] == "string"


def test_the_workload_has_a_status_subresource_kueue_writes() -> None:
    for version in crd("workloads")["spec"]["versions"]:
        assert version["subresources"] == {"status": {}}
