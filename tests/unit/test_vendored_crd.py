"""The vendored GPU Operator CRDs (ClusterPolicy, GPUCluster, NVIDIADriver) are the genuine ones
(their recorded checksums), and every field the translator (:mod:`agents.kube.gpuoperator`) and the
stack's defaults (:mod:`streams.core.stack.operatorstack`) read exists in them with the type we
read it as."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from agents.kube.gpuoperator import GPUCLUSTER_SPEC
from contract.inputs import OperatorCrState, PolicyState
from streams.core.stack.operatorstack import GPUCLUSTER_DEFAULTS, POLICY_DEFAULTS

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "gpu-operator"
CRD = HERE / "nvidia.com_clusterpolicies.yaml"


def schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    out: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return out


def test_the_vendored_crd_is_the_recorded_upstream_file() -> None:
    recorded = dict(
        reversed(line.split(maxsplit=1)) for line in (HERE / "SHA256SUMS").read_text().splitlines()
    )
    assert hashlib.sha256(CRD.read_bytes()).hexdigest() == recorded[CRD.name]


def test_it_is_the_cluster_scoped_v1_clusterpolicy_with_a_status_subresource() -> None:
    crd = yaml.safe_load(CRD.read_text())
    assert crd["metadata"]["name"] == "clusterpolicies.nvidia.com"
    spec = crd["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["plural"]) == (
        "nvidia.com",
        "Cluster",
        "clusterpolicies",
    )
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("operand", sorted(POLICY_DEFAULTS))
def test_every_operand_we_read_has_a_boolean_enabled(operand: str) -> None:
    fields = schema()["properties"]["spec"]["properties"][operand]["properties"]
    assert fields["enabled"]["type"] == "boolean"


def test_mig_strategy_sharing_config_and_status_are_where_we_read_them() -> None:
    spec = schema()["properties"]["spec"]["properties"]
    assert set(spec["mig"]["properties"]["strategy"]["enum"]) == {"none", "single", "mixed"}
    config = spec["devicePlugin"]["properties"]["config"]["properties"]
    assert config["name"]["type"] == "string"
    status = schema()["properties"]["status"]["properties"]
    assert set(status["state"]["enum"]) == set(get_args(PolicyState)) - {""}
    assert status["namespace"]["type"] == "string"
    condition = status["conditions"]["items"]["properties"]
    assert {"type", "status", "reason", "message", "lastTransitionTime"} <= set(condition)


# --- the DRA stack's CRDs: GPUCluster and NVIDIADriver (nvidia.com/v1alpha1)

DRA_CRDS = ("nvidia.com_gpuclusters.yaml", "nvidia.com_nvidiadrivers.yaml")


def v1alpha1(file: str) -> tuple[dict[str, Any], dict[str, Any]]:
    crd = yaml.safe_load((HERE / file).read_text())
    (version,) = crd["spec"]["versions"]
    return crd, version


@pytest.mark.parametrize("file", DRA_CRDS)
def test_the_dra_stacks_crds_are_the_recorded_upstream_files(file: str) -> None:
    recorded = dict(
        reversed(line.split(maxsplit=1)) for line in (HERE / "SHA256SUMS").read_text().splitlines()
    )
    assert hashlib.sha256((HERE / file).read_bytes()).hexdigest() == recorded[file]


@pytest.mark.parametrize(
    ("file", "plural"), [(DRA_CRDS[0], "gpuclusters"), (DRA_CRDS[1], "nvidiadrivers")]
)
def test_cluster_scoped_v1alpha1_with_a_status_subresource(file: str, plural: str) -> None:
    crd, version = v1alpha1(file)
    spec = crd["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["plural"]) == (
        "nvidia.com",
        "Cluster",
        plural,
    )
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert set(status["state"]["enum"]) <= set(get_args(OperatorCrState)) - {""}
    assert status["namespace"]["type"] == "string"
    condition = status["conditions"]["items"]["properties"]
    assert {"type", "status", "reason", "message", "lastTransitionTime"} <= set(condition)


def test_every_gpucluster_field_we_read_is_there_and_we_know_every_spec_key() -> None:
    _, version = v1alpha1(DRA_CRDS[0])
    root = version["schema"]["openAPIV3Schema"]
    spec = root["properties"]["spec"]["properties"]
    assert set(spec) == GPUCLUSTER_SPEC  # a key we do not know is said, not silently judged
    assert spec["dcgm"]["properties"]["enabled"]["type"] == "boolean"
    assert spec["dcgmExporter"]["properties"]["enabled"]["type"] == "boolean"
    compute = spec["draDriver"]["properties"]["computeDomains"]["properties"]
    assert compute["enabled"]["type"] == "boolean"
    assert set(GPUCLUSTER_DEFAULTS) == {"dcgm", "dcgmExporter", "computeDomains"}
    # the singleton rule the real API server enforces
    (rule,) = root["x-kubernetes-validations"]
    assert rule["rule"] == "self.metadata.name == 'gpu-cluster'"


def test_the_nvidiadriver_fields_we_read_are_there() -> None:
    _, version = v1alpha1(DRA_CRDS[1])
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(spec["driverType"]["enum"]) == {"gpu", "vgpu", "vgpu-host-manager"}
    assert spec["version"]["type"] == "string"
