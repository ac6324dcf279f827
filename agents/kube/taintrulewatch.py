"""DRA ``DeviceTaintRule`` objects (``resource.k8s.io/v1alpha3``, KEP-5055, cluster-scoped),
watched by the cluster role (one reader per cluster, not every node's agent).

Each rule is published whole (:func:`agents.kube.dra.taint_rule`) into every input partition
after every list and whenever a watch event changes what it says (its selector or taint); a
write that changes nothing we read (a status condition, a label) is not published again. The
watcher remembers what it published (a handful of rules), so a rule deleted while the watch was
down, missing from the relist, is published once more as deleted.

Kubernetes 1.35 serves the kind only with ``--runtime-config=resource.k8s.io/v1alpha3=true``
(whatever the gates: the scheduler and the eviction controller act on rules only with the
``DRADeviceTaintRules`` gate, alpha, on top of ``DRADeviceTaints``); otherwise the API server
answers 404. That is a state, not a fault: logged, ``gpuattr_cluster_devicetaintrule_served`` 0,
``gpuattr_agent_source_errors_total{source="devicetaintrule",error="not_served"}`` counted, and
the list is tried again within ``retry_s``. Rules this watcher had published are published as
deleted: with the API gone, no rule applies.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from prometheus_client import Gauge

from agents.kube.dra import taint_rule
from agents.kube.policywatch import OperatorWatcher
from contract.inputs import DeviceTaintRuleRecord

log = logging.getLogger(__name__)

SERVED = Gauge(
    "gpuattr_cluster_devicetaintrule_served",
    "1 when the API server serves devicetaintrules.resource.k8s.io/v1alpha3 (that API version is "
    "enabled), 0 when it answers 404 and before the first list",
)


class DeviceTaintRuleWatcher(OperatorWatcher[DeviceTaintRuleRecord]):
    kind = "devicetaintrule"
    group, version, plural = "resource.k8s.io", "v1alpha3", "devicetaintrules"
    title = "DeviceTaintRule"
    served = SERVED
    not_served_reason = "api-not-served"  # a built-in kind: no CRD to install
    logger = log

    def _translate(self, obj: Mapping[str, Any], deleted: bool) -> DeviceTaintRuleRecord | None:
        return taint_rule(obj, ts_ms=self.now_ms(), deleted=deleted)

    def _what(self) -> str:
        return f"{self.title} watch ({self.version})"

    def _why_not_served(self) -> str:
        return f"(404: --runtime-config={self.group}/{self.version}=true is not set)"

    def _unread(
        self,
        raw: Mapping[str, Any],
        record: DeviceTaintRuleRecord,
        before: DeviceTaintRuleRecord | None,
    ) -> None:
        """Nothing: the GPU Operator's unread fields (its status.state enum, GPUCluster spec
        keys) are not this kind's."""
