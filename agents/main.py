"""The node agent: one per node, runs the collectors and publishes what they see."""

from __future__ import annotations

import asyncio
import logging
import time

from agents.podresources import PodResourcesCollector
from agents.publish import Publisher
from agents.scrape import DcgmCollector
from gpuattr.settings import DcgmSettings, KafkaSettings, KubeletSettings

log = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


async def run_agent(
    node: str, kafka: KafkaSettings, kubelet: KubeletSettings, dcgm: DcgmSettings
) -> None:
    """Run every collector for ``node`` until cancelled."""
    async with Publisher(kafka) as publisher:
        podresources = PodResourcesCollector(
            node=node,
            socket_path=kubelet.socket_path,
            poll_interval_s=kubelet.poll_interval_s,
            snapshot_interval_s=kubelet.snapshot_interval_s,
            rpc_timeout_s=kubelet.rpc_timeout_s,
            emit=publisher.publish,
            now_ms=wall_clock_ms,
        )
        scraper = DcgmCollector(
            node=node,
            url=dcgm.url,
            interval_s=dcgm.scrape_interval_s,
            timeout_s=dcgm.timeout_s,
            emit=publisher.publish,
            now_ms=wall_clock_ms,
        )
        log.info("agent for node %s: kubelet %s, exporter %s", node, kubelet.socket_path, dcgm.url)
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(podresources.run(), name="podresources")
            tasks.create_task(scraper.run(), name="dcgm")
