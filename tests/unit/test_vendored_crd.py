"""The vendored ClusterPolicy CRD is the genuine one (its recorded checksum), and every field the
translator (:mod:`agents.kube.gpuoperator`) and the stack's defaults
(:mod:`streams.core.stack.operatorstack`) read exists in it with the type we read it as."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from contract.inputs import PolicyState
from streams.core.stack.operatorstack import POLICY_DEFAULTS

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
