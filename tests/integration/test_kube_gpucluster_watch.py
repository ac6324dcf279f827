"""The cluster role's GPUCluster watcher against the real HTTP API-server double: a cluster whose
operator predates the DRA stack (no GPUCluster CRD: 404) is a state it reports and retries; once
served, the GPUCluster is published with what we read of it, and what we cannot read — a ``spec``
key a newer operator added, a ``status.state`` outside the CRD's enum — is logged and counted,
never a crash and never dropped."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from prometheus_client import REGISTRY

from agents.kube.policywatch import GpuClusterWatcher
from agents.kube.watch import make_api_client
from contract.inputs import GpuClusterRecord
from infra.settings import KubeSettings
from sim.apiserver import ApiServerDouble
from tests.gpuoperator_objects import gpu_cluster, gpu_cluster_status
from tests.helpers import wait_for

RETRY_S = 0.05


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels or None) or 0.0


def unread(field: str) -> float:
    return sample("gpuattr_cluster_unread_fields_total", kind="gpucluster", field=field)


async def test_not_served_then_published_and_what_we_cannot_read_is_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="agents.kube.policywatch")
    objects: dict[str, dict[str, Any]] = {}
    out: list[GpuClusterRecord] = []

    async def emit(record: object) -> None:
        assert isinstance(record, GpuClusterRecord)
        out.append(record)

    not_served = {"source": "gpucluster", "error": "not_served"}
    before = sample("gpuattr_agent_source_errors_total", **not_served)
    async with ApiServerDouble(
        lambda: ([], []), cluster_policies=lambda: list(objects.values()), tick_s=0.02
    ) as api:
        settings = KubeSettings(api_url=api.url, watch_timeout_s=30, max_backoff_s=0.2)
        client = await make_api_client(settings)
        watcher = GpuClusterWatcher(
            api=client, emit=emit, now_ms=lambda: 7, settings=settings, retry_s=RETRY_S
        )
        task = asyncio.create_task(watcher.run(), name="gpucluster-watch")
        try:
            # an operator before 26.7: no GPUCluster CRD, said once, counted, retried
            await wait_for(
                lambda: sample("gpuattr_agent_source_errors_total", **not_served) >= before + 3,
                what="three 404 lists",
            )
            assert not task.done()
            assert sample("gpuattr_cluster_gpucluster_served") == 0
            said = [r for r in caplog.records if "DRA stack (v26.7.0 or later)" in r.getMessage()]
            assert [r.levelno for r in said] == [logging.WARNING]

            # a newer operator's GPUCluster: a spec key and a state we do not know
            newer = {**gpu_cluster(exporter=True), "status": gpu_cluster_status(False)}
            newer["metadata"]["uid"] = "gc-1"
            newer["spec"]["sandboxWorkloads"] = {"enabled": True}
            newer["status"]["state"] = "degraded"
            objects["gpu-cluster"] = newer
            key_before, state_before = unread("spec.sandboxWorkloads"), unread("status.state")
            api.serves_dra_stack = True
            [record] = await wait_for(lambda: out, what="the GPUCluster, once served")
            assert sample("gpuattr_cluster_gpucluster_served") == 1
            assert (record.name, record.state, record.unknown_fields) == (
                "gpu-cluster",
                "",
                ("sandboxWorkloads",),
            )
            assert [(o.operand, o.enabled) for o in record.operands] == [("dcgmExporter", True)]
            assert unread("spec.sandboxWorkloads") == key_before + 1
            assert unread("status.state") == state_before + 1
            logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert any("spec.sandboxWorkloads is unknown to this build" in m for m in logged)
            assert any("'degraded' is none this build knows" in m for m in logged)
            assert not task.done()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()
