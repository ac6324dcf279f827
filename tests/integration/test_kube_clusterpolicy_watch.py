"""The cluster role's ClusterPolicy watcher against the real HTTP API-server double: a cluster
without the GPU Operator's CRD (404) is a state it reports and retries, never a crash; once the
CRD is served the policy is published on every list and on every change of what it says, not on
writes that change nothing we read; a policy deleted while the watch was down is published as
deleted after the relist, and so is every policy when the CRD goes away."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import REGISTRY

from agents.kube.policywatch import ClusterPolicyWatcher
from agents.kube.watch import make_api_client
from contract.inputs import ClusterPolicyRecord, OperandSpec
from infra.settings import KubeSettings
from sim.apiserver import ApiServerDouble
from tests.gpuoperator_objects import NOT_READY, not_ready_status, seed_policy
from tests.helpers import wait_for

RETRY_S = 0.05


def served() -> float | None:
    return REGISTRY.get_sample_value("gpuattr_cluster_clusterpolicy_served")


def not_served_total() -> float:
    labels = {"source": "clusterpolicy", "error": "not_served"}
    return REGISTRY.get_sample_value("gpuattr_agent_source_errors_total", labels) or 0.0


@dataclass
class Run:
    api: ApiServerDouble
    watcher: ClusterPolicyWatcher
    task: asyncio.Task[None]
    policies: dict[str, dict[str, Any]]
    out: list[ClusterPolicyRecord] = field(default_factory=list)

    def settled(self) -> bool:
        """The watcher has seen every change the double made (events and bookmarks)."""
        return self.watcher.position == str(self.api.rv)


@asynccontextmanager
async def watching(*, crd: bool) -> AsyncIterator[Run]:
    policies: dict[str, dict[str, Any]] = {}
    out: list[ClusterPolicyRecord] = []

    async def emit(record: ClusterPolicyRecord) -> None:
        out.append(record)

    def provided() -> list[dict[str, Any]]:
        return list(policies.values())

    async with ApiServerDouble(
        lambda: ([], []), cluster_policies=provided, tick_s=0.02, bookmark_s=0.1
    ) as api:
        api.serves_cluster_policies = crd
        settings = KubeSettings(api_url=api.url, watch_timeout_s=30, max_backoff_s=0.2)
        client = await make_api_client(settings)
        watcher = ClusterPolicyWatcher(
            api=client, emit=emit, now_ms=lambda: 7, settings=settings, retry_s=RETRY_S
        )
        task = asyncio.create_task(watcher.run(), name="clusterpolicy-watch")
        try:
            yield Run(api, watcher, task, policies, out)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()


def with_status(obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {**copy.deepcopy(obj), "status": status}


async def test_a_missing_crd_is_a_state_retried_until_the_operator_is_installed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="agents.kube.policywatch")
    before = not_served_total()
    async with watching(crd=False) as run:
        run.policies["cluster-policy"] = seed_policy(uid="cp-1")
        # several lists answered 404: counted each time, said once, and the watcher goes on
        await wait_for(lambda: not_served_total() >= before + 3, what="three 404 lists")
        assert not run.task.done()
        assert served() == 0
        assert run.watcher.health.state == "disabled"
        assert run.watcher.health.reason == "crd-not-installed"
        assert run.out == []
        said = [r for r in caplog.records if "GPU Operator is not installed" in r.getMessage()]
        assert [r.levelno for r in said] == [logging.WARNING]

        run.api.serves_cluster_policies = True  # the GPU Operator is installed
        [record] = await wait_for(lambda: run.out, what="the policy, once its CRD is served")
        assert served() == 1
        assert run.watcher.health.state == "ok"
        assert record == ClusterPolicyRecord(
            name="cluster-policy",
            ts_ms=7,
            operands=(
                OperandSpec("dcgm", False),
                OperandSpec("dcgmExporter", True),
                OperandSpec("devicePlugin", True),
                OperandSpec("driver", False),
                OperandSpec("gfd", True),
                OperandSpec("migManager", True),
                OperandSpec("nodeStatusExporter", False),
                OperandSpec("toolkit", True),
            ),
            mig_strategy="single",
            resource_version=record.resource_version,
        )
        assert record.resource_version


async def test_published_on_what_it_says_and_deletions_seen_across_a_relist() -> None:
    async with watching(crd=True) as run:
        policy = seed_policy(uid="cp-1")
        run.policies["cluster-policy"] = policy
        await wait_for(lambda: run.out, what="the first list")
        await wait_for(run.settled, what="the watch caught up")

        # the operator writes its status: published, with its own word
        policy = with_status(policy, not_ready_status())
        run.policies["cluster-policy"] = policy
        [_, reported] = await wait_for(lambda: run.out[1:] and run.out, what="the status")
        assert (reported.state, reported.namespace) == ("notReady", "gpu-operator")
        assert [(c.type, c.status, c.message) for c in reported.conditions] == [
            ("Ready", "False", ""),
            ("Error", "True", NOT_READY),
        ]

        # a write that changes nothing we read (a label): seen, not published
        labelled = copy.deepcopy(policy)
        labelled["metadata"]["labels"] = {"team": "platform"}
        run.policies["cluster-policy"] = labelled
        rv = run.api.rv
        await wait_for(lambda: run.api.rv > rv and run.settled(), what="the label seen")
        assert len(run.out) == 2

        # intent changes: the exporter turned off in the policy
        changed = copy.deepcopy(labelled)
        changed["spec"]["dcgmExporter"]["enabled"] = False
        run.policies["cluster-policy"] = changed
        [turned_off] = await wait_for(lambda: run.out[2:], what="the exporter disabled")
        assert OperandSpec("dcgmExporter", False) in turned_off.operands

        # a second policy comes; the first is deleted while the watch is down and its versions
        # expire: the relist publishes what is there, and the first as deleted
        run.policies["other"] = seed_policy("other", uid="cp-2")
        await wait_for(lambda: [r for r in run.out if r.name == "other"], what="the second")
        run.api.cut_streams()
        await run.api.down()
        await wait_for(lambda: run.watcher.health.state == "failing", what="the watch down")
        del run.policies["cluster-policy"]
        run.api.sync()
        run.api.expire_all()
        count = len(run.out)
        await run.api.up()
        relisted = await wait_for(lambda: run.out[count:][1:] and run.out[count:], what="relist")
        assert [(r.name, r.deleted) for r in relisted] == [
            ("other", False),
            ("cluster-policy", True),
        ]
        assert relisted[1].operands == turned_off.operands  # the record it had published


async def test_policies_published_are_deleted_when_their_crd_goes_away() -> None:
    async with watching(crd=True) as run:
        run.policies["cluster-policy"] = seed_policy(uid="cp-1")
        await wait_for(lambda: run.out, what="the first list")
        # the CRD is removed while the watch is down: the next list answers 404
        run.api.serves_cluster_policies = False
        run.api.expire_all()
        run.api.cut_streams()
        [_, gone] = await wait_for(lambda: run.out[1:] and run.out, what="the deletion")
        assert (gone.name, gone.deleted) == ("cluster-policy", True)
        await wait_for(lambda: served() == 0, what="the gauge")
        assert not run.task.done()
