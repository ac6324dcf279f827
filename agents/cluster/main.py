"""The cluster role (``gpuattr cluster``, a Deployment): what no node agent can read.

Under one leader (:mod:`agents.cluster.lease`): Node deletions cluster-wide, published keyed by
the node (:class:`agents.kube.watch.ClusterNodeWatcher`); the GPU Operator's ClusterPolicies,
GPUClusters and NVIDIADrivers, published into every input partition with no key
(:mod:`agents.kube.policywatch`: every node's join reads them); and every input partition's clock
(:mod:`agents.cluster.ticker`); the DRA DeviceTaintRules, into every input partition like the
policies (:class:`agents.kube.taintrulewatch.DeviceTaintRuleWatcher`: a rule may select any
node's devices); the pods no node has yet that ask for GPUs, published on the
demand-events topic (:class:`agents.kube.pendingwatch.PendingPodWatcher`: a new leader lists
first, so a pod pending across a failover is in the new leader's list); Kueue's Workloads that
ask for GPUs and are not admitted yet, on the demand-events topic too
(:class:`agents.kube.kueuewatch.KueueWatch`, with the LocalQueues, ClusterQueues and
ResourceFlavors they are judged against; Kueue not installed is a state, retried).
Without leader election (one replica, a test) it simply runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from agents.cluster.lease import lead_while_elected
from agents.cluster.ticker import tick
from agents.kube.kueuewatch import KueueWatch
from agents.kube.pendingwatch import PendingPodWatcher
from agents.kube.policywatch import WATCHERS
from agents.kube.taintrulewatch import DeviceTaintRuleWatcher
from agents.kube.watch import ClusterNodeWatcher, make_api_client
from agents.publish import Publisher
from agents.types import NowMs
from infra.observe import ObservabilityServer
from infra.settings import (
    ClusterKeySettings,
    ClusterSettings,
    KafkaSettings,
    KubeSettings,
    ObserveSettings,
)

log = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class ClusterRoleSettings:
    kafka: KafkaSettings
    kube: KubeSettings
    cluster: ClusterSettings
    observe: ObserveSettings = field(default_factory=ObserveSettings)
    signing: ClusterKeySettings = field(default_factory=ClusterKeySettings)


async def run_cluster(settings: ClusterRoleSettings, now_ms: NowMs = wall_clock_ms) -> None:
    signing_key = settings.signing.key()
    if signing_key is None:
        log.warning(
            "GPUATTR_CLUSTER_SIGNING_KEY unset: clock ticks and policies go out unsigned "
            "(a worker with the key refuses them)"
        )
    async with (
        Publisher(settings.kafka, signing_key=signing_key) as publisher,
        contextlib.AsyncExitStack() as stack,
    ):
        if settings.observe.cluster_port:
            server = ObservabilityServer(
                settings.observe.host, settings.observe.cluster_port, {"kafka": publisher.started}
            )
            await server.start()
            stack.push_async_callback(server.stop)
        api = await make_api_client(settings.kube)
        stack.push_async_callback(api.close)

        async def lead() -> None:
            nodes = ClusterNodeWatcher(
                node="", api=api, emit=publisher.publish, now_ms=now_ms, settings=settings.kube
            )
            intent = [
                watcher(
                    api=api,
                    emit=publisher.publish_to_every_partition,
                    now_ms=now_ms,
                    settings=settings.kube,
                    retry_s=settings.cluster.policy_crd_retry_s,
                )
                for watcher in WATCHERS
            ]
            rules = DeviceTaintRuleWatcher(
                api=api,
                emit=publisher.publish_to_every_partition,
                now_ms=now_ms,
                settings=settings.kube,
                retry_s=settings.cluster.taint_rule_retry_s,
            )
            pending = PendingPodWatcher(
                api=api, sink=publisher, now_ms=now_ms, settings=settings.kube
            )
            kueue = KueueWatch(
                api=api,
                sink=publisher,
                now_ms=now_ms,
                settings=settings.kube,
                retry_s=settings.cluster.kueue_retry_s,
            )
            async with asyncio.TaskGroup() as group:
                group.create_task(pending.run(), name="cluster-pending-pods")
                group.create_task(kueue.run(), name="cluster-kueue")
                group.create_task(nodes.run(), name="cluster-nodes")
                for watcher in intent:
                    group.create_task(watcher.run(), name=f"cluster-{watcher.kind}")
                group.create_task(rules.run(), name="cluster-device-taint-rules")
                group.create_task(
                    tick(publisher, settings.cluster.tick_interval_s, now_ms), name="ticker"
                )

        if settings.cluster.leader_election:
            await lead_while_elected(api, settings.cluster, lead)
        else:
            log.info("cluster role without leader election: one replica only")
            await lead()
