"""The settings a doctor run checks: the role's own, as its pod has them.

Apart from :mod:`gpuattr.doctor.run`, which imports every group: a group imports these settings
from here, so no group imports the module that imports it."""

from __future__ import annotations

from dataclasses import dataclass

from infra.acls import Role
from infra.settings import (
    ClusterSettings,
    DcgmSettings,
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
