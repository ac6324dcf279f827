"""The agent's operand-pod watcher against the real HTTP API-server double: the GPU Operator's pods
on its node (the operator's namespace), published whole on every change and only then — through
a crash loop healed, a relist after 410 Gone, and a pod deleted."""

from __future__ import annotations

import asyncio
from typing import Any

from agents.kube.watch import OperandWatcher, make_api_client
from agents.types import AgentRecord
from contract.inputs import OperandPods
from infra.settings import KubeSettings
from sim.apiserver import ApiServerDouble
from tests.helpers import wait_for

NS = "gpu-operator"
NODE = "gpu-a"


def pod(
    name: str,
    *,
    app: str | None,
    node: str = NODE,
    namespace: str = NS,
    ready: bool = True,
    restarts: int = 0,
) -> dict[str, Any]:
    state: dict[str, Any] = (
        {"running": {"startedAt": "2026-08-21T10:00:00Z"}}
        if ready
        else {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "creationTimestamp": "2026-08-21T10:00:00Z",
            "labels": {"app": app} if app else {},
        },
        "spec": {
            "nodeName": node,
            "initContainers": [{"name": "toolkit-validation", "image": "validator"}],
            "containers": [{"name": "main", "image": "operand"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "initContainerStatuses": [
                {
                    "name": "toolkit-validation",
                    "image": "validator",
                    "imageID": "validator@sha256:0",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
                }
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "image": "operand",
                    "imageID": "operand@sha256:0",
                    "ready": ready,
                    "restartCount": restarts,
                    "state": state,
                }
            ],
        },
    }


async def test_operand_pods_are_published_whole_on_change_and_only_then() -> None:
    pods = {
        "toolkit": pod(
            "nvidia-container-toolkit-daemonset-x", app="nvidia-container-toolkit-daemonset"
        ),
        "exporter": pod(
            "nvidia-dcgm-exporter-y", app="nvidia-dcgm-exporter", ready=False, restarts=12
        ),
        # not this node's operand pods: another node's, another namespace's, no app label
        "elsewhere": pod("nvidia-dcgm-exporter-z", app="nvidia-dcgm-exporter", node="gpu-b"),
        "other-ns": pod("trainer", app="trainer", namespace="ml"),
        "unlabelled": pod("helper", app=None),
    }
    out: list[AgentRecord] = []

    async def emit(rec: AgentRecord) -> None:
        out.append(rec)

    def published() -> list[OperandPods]:
        return [r for r in out if isinstance(r, OperandPods)]

    def apps(record: OperandPods) -> dict[str, tuple[bool, int, str]]:
        return {p.app: (p.ready, p.restarts, p.reason) for p in record.pods}

    async with ApiServerDouble(
        lambda: (list(pods.values()), []), tick_s=0.02, bookmark_s=0.2
    ) as api:
        settings = KubeSettings(api_url=api.url, watch_timeout_s=30, max_backoff_s=0.2)
        client = await make_api_client(settings)
        watcher = OperandWatcher(
            node=NODE, api=client, emit=emit, now_ms=lambda: 7, settings=settings, namespace=NS
        )
        task = asyncio.create_task(watcher.run())
        try:
            [first] = await wait_for(published, what="the first list")
            assert (first.node, first.namespace) == (NODE, NS)
            assert apps(first) == {
                "nvidia-container-toolkit-daemonset": (True, 0, ""),
                "nvidia-dcgm-exporter": (False, 12, "CrashLoopBackOff"),
            }
            assert [c.name for c in first.pods[0].init] == ["toolkit-validation"]

            pods["exporter"] = pod(
                "nvidia-dcgm-exporter-y", app="nvidia-dcgm-exporter", restarts=12
            )
            healed = await wait_for(lambda: published()[1:], what="the exporter ready")
            assert [apps(r)["nvidia-dcgm-exporter"] for r in healed] == [(True, 12, "")]

            # something else on the node changes (not an operand pod): nothing published
            pods["other-ns"] = pod("trainer", app="trainer", namespace="ml", restarts=1)
            # every version expires and the streams drop: it relists, finds the same, says nothing
            lists, watches = api.lists, api.watches
            api.expire_all()
            api.cut_streams()
            await wait_for(
                lambda: api.lists > lists and api.watches > watches + 1, what="relist and watch"
            )
            assert len(published()) == 2

            del pods["exporter"]  # deleted: terminating first, then gone
            await wait_for(
                lambda: set(apps(published()[-1])) == {"nvidia-container-toolkit-daemonset"},
                what="the exporter gone",
            )
            terminating = [r for r in published()[2:] if any(p.deleting for p in r.pods)]
            assert len(published()) == 2 + len(terminating) + 1
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()
