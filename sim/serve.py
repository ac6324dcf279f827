"""``gpuattr sim``: run a scenario's doubles as a service (docker compose, manual testing)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import orjson

from sim.runner import ScenarioClock, SimulatedCluster
from sim.scenario import load


async def serve(
    scenario_name: str,
    workdir: Path,
    *,
    host: str,
    api_port: int,
    exporter_port_base: int,
    advertise: str | None,
    speed: float,
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sim = SimulatedCluster(
        load(scenario_name),
        workdir,
        ScenarioClock(speed),
        host=host,
        api_port=api_port,
        exporter_port_base=exporter_port_base,
        advertise=advertise,
    )
    async with sim:
        for ep in sim.endpoints():  # one line per node: what its agent must be given
            print(orjson.dumps({"node": ep.node, **ep.agent_env(1.0, 5.0)}).decode(), flush=True)
        await stop.wait()
    return 0
