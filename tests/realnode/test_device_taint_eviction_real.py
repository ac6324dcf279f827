"""A ``NoExecute`` DRA device taint evicts the holder on the real node, and its owner is told
first (KEP-5055). Real here: the kube-apiserver serving ``resource.k8s.io/v1alpha3`` and the
kube-controller-manager's device-taint eviction controller (gates ``DRADeviceTaints`` and
``DRADeviceTaintRules``), the scheduler and kubelet with the DRA example driver, ``gpuattr
agent``, ``gpuattr cluster`` (it reads DeviceTaintRules) and ``gpuattr worker`` as processes on
the real local Kafka; dcgm-exporter is the node's double.

A pod holds a DRA GPU through a claim that tolerates the taint for :data:`TOLERATE_S` (the claim's
request's ``tolerations``), so the eviction is due at a known time and the worker's word comes
before it; an admin's DeviceTaintRule taints that one device ``NoExecute``. The worker must raise
``device-unhealthy`` naming the holder with its UID, the rule and "the holders will be evicted";
the controller then deletes the pod, and the alert resolves when the device is released.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

from contract.outputs import Alert, AttributionEvent
from gpuattr.localkube.cluster import LocalCluster
from gpuattr.localkube.node import DRA_DRIVER
from tests.helpers import wait_for, wait_for_async
from tests.kube_fixture import KubeError, Rest
from tests.realnode.node import agent_pod, delete_namespace, namespace, pod, running
from tests.realnode.pipeline import real_pipeline

pytestmark = pytest.mark.integration

NS, POD, TEMPLATE = "rn-evict", "victim", "tolerant-gpu"
RULES = "/apis/resource.k8s.io/v1alpha3/devicetaintrules"
RULE = "rn-evict-xid"
TAINT = {"key": "example.com/xid", "value": "79", "effect": "NoExecute"}
KIND = "device-unhealthy"
#: how long the claim tolerates the taint: the eviction is due this long after the rule taints
#: the device, room for the worker's word to come first
TOLERATE_S = 45


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def tolerant_template() -> dict[str, Any]:
    """One GPU of the example driver, tolerating the taint for :data:`TOLERATE_S`."""
    toleration = {
        "key": TAINT["key"],
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": TOLERATE_S,
    }
    request = {"deviceClassName": DRA_DRIVER, "tolerations": [toleration]}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": TEMPLATE},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
    }


async def allocated(rest: Rest) -> tuple[str, dict[str, str]]:
    """The victim's claim name and its allocated device (driver, pool, device)."""
    obj = await rest.get(f"/api/v1/namespaces/{NS}/pods/{POD}")
    (status,) = obj["status"]["resourceClaimStatuses"]
    claim = await rest.get(
        f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/{status['resourceClaimName']}"
    )
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    tolerated = claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"]
    assert tolerated[0]["tolerationSeconds"] == TOLERATE_S  # the gate keeps the field
    return claim["metadata"]["name"], {k: result[k] for k in ("driver", "pool", "device")}


def rule(selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "DeviceTaintRule",
        "metadata": {"name": RULE},
        "spec": {"deviceSelector": selector, "taint": TAINT},
    }


async def test_a_noexecute_taint_rule_tells_the_owner_then_evicts_the_holder(
    real_node: LocalCluster, kafka_bootstrap: str, tmp_path: Path
) -> None:
    rest = Rest.admin(real_node.kube)
    own = await agent_pod(rest)
    await namespace(rest, NS)
    try:
        await rest.create(
            f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaimtemplates", tolerant_template()
        )
        created = await rest.create(
            f"/api/v1/namespaces/{NS}/pods", pod(POD, claim_template=TEMPLATE)
        )
        uid = created["metadata"]["uid"]
        await running(rest, NS, [POD])
        _, selector = await allocated(rest)
        uuids = dict(real_node.node.dra_hardware())
        gpu = uuids[selector["device"]]
        async with real_pipeline(
            kafka_bootstrap, real_node, tmp_path, own_pod=own, cluster_role=True
        ) as p:

            def held() -> AttributionEvent | None:
                found = [
                    e
                    for e in p.attribution()
                    if e.device_uuid == gpu and [(h.pod, h.uid) for h in e.holders] == [(POD, uid)]
                ]
                return found[-1] if found else None

            await wait_for(held, 120, every_s=0.2, what=lambda: f"{POD} on {gpu}\n{p.logs()}")

            def alert(status: str) -> Alert | None:
                found = [
                    a
                    for a in p.alert_records()
                    if (a.kind, a.status, a.device_uuid) == (KIND, status, gpu)
                ]
                return found[0] if found else None

            tainted_ms = now_ms()
            await rest.create(RULES, rule(selector))
            firing = await wait_for(
                lambda: alert("firing"),
                TOLERATE_S,  # before the eviction is due
                every_s=0.2,
                what=lambda: f"{KIND} firing for {gpu}\n{p.logs()}",
            )
            assert [(h.namespace, h.pod, h.uid) for h in firing.holders] == [(NS, POD, uid)]
            assert f"{NS}/{POD} (uid {uid})" in firing.summary
            assert f"DeviceTaintRule {RULE}: example.com/xid=79:NoExecute" in firing.summary
            assert "the holders will be evicted" in firing.summary
            status, _ = await rest.call("GET", f"/api/v1/namespaces/{NS}/pods/{POD}")
            assert status == 200, "the worker spoke only after the eviction"

            # the controller evicts the holder once its toleration runs out
            async def evicted() -> bool:
                code, obj = await rest.call("GET", f"/api/v1/namespaces/{NS}/pods/{POD}")
                return code == 404 or bool(obj.get("metadata", {}).get("deletionTimestamp"))

            await wait_for_async(
                evicted, timeout_s=TOLERATE_S + 90, every_s=0.5, what="the holder evicted"
            )
            assert (now_ms() - tainted_ms) / 1000 >= TOLERATE_S - 5  # not before it was due
            resolved = await wait_for(
                lambda: alert("resolved"),
                120,
                every_s=0.2,
                what=lambda: f"{KIND} resolved for {gpu}\n{p.logs()}",
            )
            assert resolved.id == firing.id
            assert "the device was released" in resolved.summary
    finally:
        with contextlib.suppress(KubeError):
            await rest.delete(f"{RULES}/{RULE}")
        await delete_namespace(rest, NS)
        await real_node.node.settled()
