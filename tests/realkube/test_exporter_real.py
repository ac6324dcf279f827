"""The agent's exporter watch and locator against a real kube-apiserver: of the pods labelled
``app=nvidia-dcgm-exporter`` on its node, only the one the operator's DaemonSet controls in the
operator's namespace is scraped; a tenant's look-alikes are refused and counted."""

from __future__ import annotations

import asyncio
from typing import Any

from agents.kube.watch import ExporterWatcher, make_api_client
from agents.locate import ExporterLocator, NotFound, Target
from agents.selfmetrics import EXPORTER_REFUSED
from agents.types import AgentRecord
from gpuattr.localkube import LocalKube
from infra.settings import KubeSettings
from tests.helpers import wait_for
from tests.kube_fixture import Rest
from tests.realkube.cluster import create_node, gpu_pod, now_ms, owner_ref

APP = {"app": "nvidia-dcgm-exporter"}
OPERATOR_NS, TENANT_NS, NODE = "rk-exp-operator", "rk-exp-tenant", "rkexp-a"


def daemonset(name: str) -> dict[str, Any]:
    template = {"metadata": {"labels": APP}, "spec": gpu_pod("t", "", gpus=0)["spec"]}
    del template["spec"]["nodeName"]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": APP}, "template": template},
    }


def refused(reason: str) -> float:
    return sum(
        s.value
        for s in EXPORTER_REFUSED.collect()[0].samples
        if s.name.endswith("_total") and s.labels == {"reason": reason}
    )


async def ready(rest: Rest, ns: str, name: str, ip: str) -> None:
    """What the kubelet writes for a running, ready exporter: phase, Ready and its pod IP."""
    await rest.merge_patch(
        f"/api/v1/namespaces/{ns}/pods/{name}/status",
        {
            "status": {
                "phase": "Running",
                "podIP": ip,
                "conditions": [{"type": "Ready", "status": "True"}],
            }
        },
    )


async def test_only_the_operators_daemonset_pod_is_chosen(real_kube: LocalKube) -> None:
    rest = Rest.admin(real_kube)
    for ns in (OPERATOR_NS, TENANT_NS):
        await rest.namespace(ns)
    for node in (NODE, "rkexp-b"):
        await create_node(rest, node, {}, 1)
    operator_ds = await rest.create(
        f"/apis/apps/v1/namespaces/{OPERATOR_NS}/daemonsets", daemonset("nvidia-dcgm-exporter")
    )
    tenant_ds = await rest.create(
        f"/apis/apps/v1/namespaces/{TENANT_NS}/daemonsets", daemonset("nvidia-dcgm-exporter")
    )
    operator_pods = f"/api/v1/namespaces/{OPERATOR_NS}/pods"
    tenant_pods = f"/api/v1/namespaces/{TENANT_NS}/pods"

    def exporter(name: str, node: str, owner: dict[str, Any] | None) -> dict[str, Any]:
        return gpu_pod(name, node, gpus=0, labels=APP, owner=owner)

    await rest.create(operator_pods, exporter("exporter-a", NODE, owner_ref(operator_ds)))
    await ready(rest, OPERATOR_NS, "exporter-a", "10.1.0.7")
    await rest.create(operator_pods, exporter("exporter-b", "rkexp-b", owner_ref(operator_ds)))
    await ready(rest, OPERATOR_NS, "exporter-b", "10.1.1.7")
    # newer and ready: the locator's preference alone would pick either
    await rest.create(tenant_pods, exporter("lookalike", NODE, owner_ref(tenant_ds)))
    await ready(rest, TENANT_NS, "lookalike", "10.1.0.66")
    await rest.create(operator_pods, exporter("unowned", NODE, None))
    await ready(rest, OPERATOR_NS, "unowned", "10.1.0.67")
    before = {r: refused(r) for r in ("other-namespace", "no-daemonset-owner")}

    locator = ExporterLocator(
        "app=nvidia-dcgm-exporter", namespace=OPERATOR_NS, daemonset="nvidia-dcgm-exporter"
    )
    settings = KubeSettings(kubeconfig=real_kube.kubeconfig, max_backoff_s=0.5)
    api = await make_api_client(settings)

    async def emit(rec: AgentRecord) -> None:
        raise AssertionError(f"the exporter watch publishes nothing, got {rec}")

    watcher = ExporterWatcher(
        node=NODE,
        api=api,
        emit=emit,
        now_ms=now_ms,
        settings=settings,
        locator=locator,
        port_name="metrics",
        default_port=9400,
    )
    task = asyncio.create_task(watcher.run(), name="exporter-watch")
    try:
        await wait_for(lambda: locator.listed, 30, what="the exporter watch's list")
        assert locator.target() == Target(
            "http://10.1.0.7:9400/metrics", f"{OPERATOR_NS}/exporter-a"
        )
        assert locator.refused == {
            f"{TENANT_NS}/lookalike": "other-namespace",
            f"{OPERATOR_NS}/unowned": "no-daemonset-owner",
        }
        assert refused("other-namespace") == before["other-namespace"] + 1
        assert refused("no-daemonset-owner") == before["no-daemonset-owner"] + 1

        # a look-alike that arrives through the watch is refused as well
        await rest.create(tenant_pods, exporter("lookalike-2", NODE, owner_ref(tenant_ds)))
        await ready(rest, TENANT_NS, "lookalike-2", "10.1.0.68")
        await wait_for(
            lambda: f"{TENANT_NS}/lookalike-2" in locator.refused, 30, what="the new look-alike"
        )
        assert refused("other-namespace") == before["other-namespace"] + 2
        assert locator.target() == Target(
            "http://10.1.0.7:9400/metrics", f"{OPERATOR_NS}/exporter-a"
        )

        # without the operator's pod there is no exporter, whatever else is labelled so
        await rest.delete(f"{operator_pods}/exporter-a", grace_s=0)

        def gone() -> NotFound | None:
            found = locator.target()
            return found if isinstance(found, NotFound) else None

        found = await wait_for(gone, 30, what="the operator's exporter gone")
        assert found.reason == "no-exporter-pod"
        assert "3 other pod(s) labelled so refused" in found.detail
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
