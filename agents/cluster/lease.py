"""One leader among the cluster role's replicas, through a ``coordination.k8s.io`` Lease.

kubernetes-asyncio's leader election (client-go's algorithm: acquire, renew within the renew
deadline, a follower takes over once the holder's record has not changed for a lease duration)
runs ``lead`` while this replica holds the Lease and cancels it when the Lease is lost; the
replica then stands as a candidate again. Two leaders can overlap by at most a renew deadline
after a network split: everything the leader publishes is safe to publish twice.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from infra.settings import ClusterSettings

log = logging.getLogger(__name__)


def identity(settings: ClusterSettings) -> str:
    if settings.identity:
        return settings.identity
    host = os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{host}_{uuid.uuid4().hex[:8]}"


async def lead_while_elected(
    api: Any, settings: ClusterSettings, lead: Callable[[], Awaitable[None]]
) -> None:
    """Stand for election for ever; run ``lead`` whenever this replica is the leader."""
    me = identity(settings)
    lock = LeaseLock(settings.lease_name, settings.lease_namespace, me, api)

    async def started() -> None:
        log.info("%s leads (Lease %s/%s)", me, settings.lease_namespace, settings.lease_name)
        await lead()

    async def stopped() -> None:
        log.warning("%s lost the Lease %s: standing again", me, settings.lease_name)

    config = electionconfig.Config(
        lock,
        lease_duration=settings.lease_duration_s,
        renew_deadline=settings.renew_deadline_s,
        retry_period=settings.retry_period_s,
        onstarted_leading=started,
        onstopped_leading=stopped,
    )
    log.info("%s stands for Lease %s/%s", me, settings.lease_namespace, settings.lease_name)
    while True:
        await leaderelection.LeaderElection(config).run()
