"""What ``gpuattr doctor`` knows of the role it checks: that role's own settings. Its own module
so that run.py (which imports every group) and each group (which reads these) import no cycle."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from infra.acls import Role
from infra.settings import (
    ClusterSettings,
    DcgmSettings,
    InventorySettings,
    KafkaSettings,
    KubeletSettings,
    KubeSettings,
)


@dataclass(frozen=True, slots=True)
class DoctorSettings:
    """The settings of the role being checked, read from the same environment it runs with."""

    role: Role
    kafka: KafkaSettings
    kubelet: KubeletSettings
    dcgm: DcgmSettings
    kube: KubeSettings
    cluster: ClusterSettings
    worker_app_id: str
    sink_group: str
    #: the agent's node (its NODE_NAME); None for the other roles
    node: str | None
    #: how long one check may wait for an answer
    timeout_s: float = 10.0
    #: the clock offset against the broker beyond which the line fails
    max_skew_s: float = 2.0
    #: where the agent reads its GPUs when NVML is not there (the exporter's rows are checked
    #: against them)
    inventory: InventorySettings = field(default_factory=InventorySettings)
    #: whether the cluster role's signing key is set (GPUATTR_CLUSTER_SIGNING_KEY)
    signing_key_set: bool = False
    #: the sink's destinations that are set (Slack, webhook)
    sink_destinations: tuple[str, ...] = ()
    #: a group whose settings the role itself would refuse → why (its checks are not run: the
    #: role would not start)
    refused: Mapping[str, str] = field(default_factory=dict)


def refusal(err: ValidationError) -> str:
    """What pydantic refused, by setting and reason, never the value (a password is one)."""
    parts = []
    for e in err.errors(include_input=False, include_url=False):
        where = ".".join(str(x) for x in e["loc"])
        parts.append(f"{where}: {e['msg']}" if where else e["msg"])
    return "; ".join(parts)
