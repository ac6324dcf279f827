"""A DRA ``DeviceTaintRule`` (KEP-5055, ``resource.k8s.io/v1alpha3`` in 1.35) reaches the owner of
the device it selects, from a real API server.

Real here: kube-apiserver 1.35.4 serving ``resource.k8s.io/v1alpha3`` (the tier's
``--runtime-config``; without it the kind is not served: the second test) stores a rule
selecting one device by driver, pool and name, and defaults its taint's ``timeAdded``; the cluster
role's ``DeviceTaintRuleWatcher`` with the shipped ClusterRole's ServiceAccount token (list and
watch, nothing else) publishes it; the agent's slice, claim and pod watchers publish the node's
DRA device and its holder, as in ``test_dra_taints_real.py``.

Not real here: no kubelet, dcgm-exporter or Kafka. The worker's pure core is fed every record as
published, through the wire codec (the rule in the node's partition, as the cluster role
publishes it into every one), with the holder's PodResources row and a healthy DCGM scrape after
each change. It must judge the held device unhealthy with the rule named, raise the
``device-unhealthy`` alert naming the holder, leave the unselected device alone, and resolve
once the rule is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from agents.kube.taintrulewatch import DeviceTaintRuleWatcher
from agents.kube.watch import make_api_client
from contract.inputs import DeviceTaintRuleRecord, PodRecord, ResourceClaimRecord
from gpuattr.localkafka import default_cache_dir
from gpuattr.localkube import LocalKube
from infra.settings import KubeSettings
from tests.helpers import wait_for
from tests.kube_fixture import KubeError, Rest
from tests.realkube.cluster import set_running
from tests.realkube.deploy import cluster_token, ensure_namespace
from tests.realkube.test_dra_real import DRIVER, allocation, resource_claim, resource_slice
from tests.realkube.test_dra_taints_real import (
    CLAIMS,
    GPU,
    NS,
    PODS,
    SLICES,
    Worker,
    agent_watching,
    gpu0,
    holder_pod,
    latest_slice,
)

RULES = "/apis/resource.k8s.io/v1alpha3/devicetaintrules"
TAINT_KEY = "example.com/maintenance"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def rule(name: str, node: str, device: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": node, "device": device},
            "taint": {"key": TAINT_KEY, "value": "swap", "effect": "NoExecute"},
        },
    }


@contextlib.asynccontextmanager
async def rule_watcher(
    kube: LocalKube, tmp_path: Path, emit: Any
) -> AsyncIterator[DeviceTaintRuleWatcher]:
    """The cluster role's DeviceTaintRule watcher with its shipped RBAC's token."""
    token = await cluster_token(kube)
    config = kube.write_kubeconfig(tmp_path / "cluster.kubeconfig", token=token, user="cluster")
    settings = KubeSettings(kubeconfig=config, watch_timeout_s=300, max_backoff_s=0.5)
    api = await make_api_client(settings)
    watcher = DeviceTaintRuleWatcher(
        api=api, emit=emit, now_ms=now_ms, settings=settings, retry_s=0.5
    )
    task = asyncio.create_task(watcher.run(), name="devicetaintrule-watch")
    try:
        yield watcher
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()


def served() -> float | None:
    return REGISTRY.get_sample_value("gpuattr_cluster_devicetaintrule_served")


def not_served() -> float:
    labels = {"source": "devicetaintrule", "error": "not_served"}
    return REGISTRY.get_sample_value("gpuattr_agent_source_errors_total", labels) or 0.0


async def test_the_cluster_roles_token_only_lists_and_watches_rules(real_kube: LocalKube) -> None:
    admin = Rest.admin(real_kube)
    role = admin.as_token(await cluster_token(real_kube))
    group = "resource.k8s.io"
    for verb in ("list", "watch"):
        assert await role.allowed(verb, "devicetaintrules", group=group), verb
    for verb in ("get", "create", "update", "patch", "delete", "deletecollection"):
        assert not await role.allowed(verb, "devicetaintrules", group=group), verb
    status, listing = await role.call("GET", RULES)
    assert status == 200, listing


async def test_a_rule_taints_the_held_device_it_selects_and_lifts_when_deleted(
    real_kube: LocalKube, tmp_path: Path
) -> None:
    node = "rk-taint-rule"
    rest = Rest.admin(real_kube)
    await ensure_namespace(rest, NS)
    with contextlib.suppress(KubeError):  # another test may have made it
        await rest.create(
            "/apis/resource.k8s.io/v1/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": DRIVER},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
            },
        )
    claim, pod, name = "train-rule", "trainer-rule", "gpu-0-maintenance"
    slice_name = f"{node}-gpu.nvidia.com"
    await rest.create(SLICES, resource_slice(node, GPU))
    await rest.create(CLAIMS, resource_claim(claim))
    created = await rest.create(PODS, holder_pod(pod, node, claim))
    uid = created["metadata"]["uid"]
    await set_running(rest, NS, pod)
    await rest.merge_patch(f"{CLAIMS}/{claim}/status", allocation(node, "gpu-0", [(pod, uid)]))
    try:
        async with agent_watching(real_kube, tmp_path, node) as out:

            async def emit(record: DeviceTaintRuleRecord) -> None:
                # the cluster role's record, fed to the worker in order beside the agent's
                out.append(record)  # type: ignore[arg-type]

            async with rule_watcher(real_kube, tmp_path, emit):
                worker = Worker(node, out)

                def everything_seen() -> bool:
                    pods = {r.name for r in out if isinstance(r, PodRecord)}
                    claims = {r.name for r in out if isinstance(r, ResourceClaimRecord)}
                    placed = gpu0(latest_slice(out, slice_name)) is not None
                    return pod in pods and claim in claims and placed and served() == 1

                await wait_for(everything_seen, 60, what="the node's pod, claim and slice")
                worker.catch_up()
                worker.podresources(pod, claim)
                event, alerts = worker.scrape()
                assert (event.health.sources, alerts) == ((), [])

                # an admin takes gpu-0 out for maintenance; a rule for another device beside it
                before_ms = int(time.time()) * 1000 - 1000
                stored = await rest.create(RULES, rule(name, node, "gpu-0"))
                assert stored["spec"]["taint"]["timeAdded"]  # defaulted by the server
                await rest.create(RULES, rule("gpu-1-maintenance", node, "gpu-1"))

                def published(rule_name: str) -> DeviceTaintRuleRecord | None:
                    mine = [r for r in out if isinstance(r, DeviceTaintRuleRecord)]
                    found = [r for r in mine if r.name == rule_name]
                    return found[-1] if found else None

                said = await wait_for(lambda: published(name), 30, what="the rule, published")
                assert (said.driver, said.pool, said.device) == (DRIVER, node, "gpu-0")
                assert said.taint is not None
                assert (said.taint.key, said.taint.value, said.taint.effect) == (
                    TAINT_KEY,
                    "swap",
                    "NoExecute",
                )
                assert said.taint.time_added_ms is not None
                assert said.taint.time_added_ms >= before_ms
                assert (said.selector, said.unevaluable, said.deleted) == (True, "", False)
                await wait_for(lambda: published("gpu-1-maintenance"), 30, what="the other rule")

                event, alerts = worker.scrape()
                words = [(w.source, w.state, w.detail, w.effect) for w in event.health.sources]
                assert words == [
                    (
                        "dra-taint",
                        "unhealthy",
                        f"DeviceTaintRule {name}: {TAINT_KEY}=swap:NoExecute",
                        "NoExecute",
                    ),
                    ("dcgm", "healthy", "no memory fault in the reading", None),
                ]
                (firing,) = alerts
                assert firing.status == "firing"
                assert [(h.namespace, h.pod, h.uid) for h in firing.holders] == [(NS, pod, uid)]
                assert f"dra-taint: DeviceTaintRule {name}:" in firing.summary
                assert "the holders will be evicted" in firing.summary

                await rest.delete(f"{RULES}/{name}")

                def deleted() -> bool:
                    last = published(name)
                    return last is not None and last.deleted

                await wait_for(deleted, 30, what="the rule's deletion, published")
                event, alerts = worker.scrape()
                assert (event.health.sources, event.health.verdict) == ((), None)
                (resolved,) = alerts
                assert (resolved.status, resolved.id) == ("resolved", firing.id)
    finally:
        for path in (
            f"{RULES}/{name}",
            f"{RULES}/gpu-1-maintenance",
            f"{PODS}/{pod}",
            f"{CLAIMS}/{claim}",
            f"{SLICES}/{slice_name}",
        ):
            with contextlib.suppress(KubeError):
                await rest.delete(path, grace_s=0)


class V1alpha3Off(LocalKube):
    """The same API server without ``resource.k8s.io/v1alpha3`` (its default in 1.35)."""

    def _apiserver_cmd(self) -> list[str]:
        cmd = super()._apiserver_cmd()
        on = [arg for arg in cmd if arg == "--runtime-config=resource.k8s.io/v1alpha3=true"]
        assert len(on) == 1, cmd
        return [arg for arg in cmd if arg not in on]


async def test_without_the_api_version_the_watcher_says_so_and_tries_again(
    tmp_path: Path,
) -> None:
    """Not served is a state: the watcher counts it, sets its gauge to 0, publishes nothing and
    lists again after ``retry_s`` — it does not end or crash."""
    async with V1alpha3Off(tmp_path / "kube", default_cache_dir()) as kube:
        status, _ = await Rest.admin(kube).call("GET", RULES)
        assert status == 404
        out: list[DeviceTaintRuleRecord] = []

        async def emit(record: DeviceTaintRuleRecord) -> None:
            out.append(record)

        before = not_served()
        async with rule_watcher(kube, tmp_path, emit):
            await wait_for(
                lambda: not_served() >= before + 2 and served() == 0,
                30,
                what="the rule API refused twice (tried again)",
            )
        assert out == []
