"""A synthetic GPU fleet written straight into the input topic: N nodes x 8 GPUs.

Every fourth node is exclusive, time-sliced (4 replicas), MPS (4 replicas) or MIG (two GPUs split
into 7 instances, the rest exclusive). One sample per GPU (or MIG instance) per interval, and a
pod replaced on every node every ``churn_every`` intervals. Deterministic for a given seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from contract.inputs import (
    DcgmSample,
    DcgmScrape,
    DeviceAssignment,
    DeviceInventory,
    GpuInfo,
    MigInfo,
    NodeRecord,
    OwnerRef,
    PodRecord,
    PodResourcesDiff,
    PodResourcesSnapshot,
)
from contract.inputs import InputRecord as AgentRecord
from sim.scenario import gpu_uuid, mig_uuid

MODES = ("exclusive", "time-slicing", "mps", "mig")
MIG_GPUS = (6, 7)
MIG_INSTANCES = tuple(range(7, 14))


@dataclass(frozen=True)
class FleetNode:
    name: str
    mode: str
    gpus: int = 8

    def devices(self) -> list[tuple[int, int | None]]:
        """(gpu index, MIG instance or None) of everything that produces a sample."""
        out: list[tuple[int, int | None]] = []
        for g in range(self.gpus):
            if self.mode == "mig" and g in MIG_GPUS:
                out += [(g, gi) for gi in MIG_INSTANCES]
            else:
                out.append((g, None))
        return out


def fleet(nodes: int) -> list[FleetNode]:
    return [FleetNode(f"node-{i:05d}", MODES[i % len(MODES)]) for i in range(nodes)]


def _holders(node: FleetNode, generation: int) -> list[tuple[str, DeviceAssignment]]:
    """(pod uid, assignment) for every slot held on the node in this generation of pods."""
    rows = []
    for g, gi in node.devices():
        tenants = 3 if node.mode in ("time-slicing", "mps") else 1
        for t in range(tenants):
            name = f"w{g}-{'' if gi is None else gi}-{t}-g{generation}"
            if gi is not None:
                dev, res = mig_uuid(node.name, g, gi), "nvidia.com/mig-1g.10gb"
            elif tenants > 1:
                dev, res = f"{gpu_uuid(node.name, g)}::{t}", "nvidia.com/gpu"
            else:
                dev, res = gpu_uuid(node.name, g), "nvidia.com/gpu"
            uid = f"{node.name}-{name}"
            rows.append((uid, DeviceAssignment("bench", name, "main", res, dev)))
    return rows


def setup(node: FleetNode, ts_ms: int) -> list[AgentRecord]:
    labels = {"none": "none", "exclusive": "none", "mig": "none"}.get(node.mode, node.mode)
    replicas = "4" if node.mode in ("time-slicing", "mps") else "1"
    inv = DeviceInventory(
        node.name,
        ts_ms,
        "file",
        tuple(GpuInfo(g, gpu_uuid(node.name, g), "A100") for g in range(8)),
        tuple(
            MigInfo(mig_uuid(node.name, g, gi), gpu_uuid(node.name, g), gi)
            for g, gi in node.devices()
            if gi is not None
        ),
    )
    out: list[AgentRecord] = [
        inv,
        NodeRecord(
            node.name,
            ts_ms,
            (("nvidia.com/gpu.replicas", replicas), ("nvidia.com/gpu.sharing-strategy", labels)),
        ),
    ]
    holders = _holders(node, 0)
    out += [
        PodRecord(
            node.name,
            ts_ms,
            uid,
            a.namespace,
            a.pod,
            ts_ms,
            workload=OwnerRef("Deployment", a.pod.rsplit("-", 1)[0]),
        )
        for uid, a in holders
    ]
    out.append(PodResourcesSnapshot(node.name, ts_ms, tuple(sorted(a for _, a in holders))))
    return out


def churn(node: FleetNode, generation: int, ts_ms: int) -> list[AgentRecord]:
    """Replace the pods of the node's first device: delete the old, add the new, hand over."""
    old = [x for x in _holders(node, generation - 1) if x[1].pod.startswith("w0-")]
    new = [x for x in _holders(node, generation) if x[1].pod.startswith("w0-")]
    out: list[AgentRecord] = [
        PodRecord(node.name, ts_ms, uid, a.namespace, a.pod, ts_ms - 1000, deleted=True)
        for uid, a in old
    ]
    out += [
        PodRecord(
            node.name,
            ts_ms,
            uid,
            a.namespace,
            a.pod,
            ts_ms,
            workload=OwnerRef("Deployment", "w0"),
        )
        for uid, a in new
    ]
    out.append(
        PodResourcesDiff(node.name, ts_ms, tuple(a for _, a in new), tuple(a for _, a in old))
    )
    return out


LEVELS = (0.0, 0.0, 2.0, 35.0, 60.0, 92.0)  # idle, idle, nearly idle, light, busy, saturated


class UtilTrace:
    """Each device keeps its utilisation from one scrape to the next (a little jitter), and
    switches level now and then (``switch`` per scrape): steady devices with occasional busy /
    idle transitions, as real GPUs run — enough idle stretches and transitions to raise and
    resolve idle alerts, not a fresh random draw per sample."""

    def __init__(self, rng: random.Random, switch: float = 0.05) -> None:
        self.rng = rng
        self.switch = switch
        self.level: dict[tuple[str, int, int | None], float] = {}

    def __call__(self, device: tuple[str, int, int | None]) -> float:
        level = self.level.get(device)
        if level is None or self.rng.random() < self.switch:
            level = self.level[device] = self.rng.choice(LEVELS)
        return level if level == 0.0 else max(0.0, level + self.rng.uniform(-2.0, 2.0))


def samples(node: FleetNode, ts_ms: int, trace: UtilTrace) -> tuple[DcgmSample, ...]:
    out = []
    for g, gi in node.devices():
        util = round(trace((node.name, g, gi)), 1)
        out.append(
            DcgmSample(
                node=node.name,
                ts_ms=ts_ms,
                uuid=gpu_uuid(node.name, g),
                gpu_index=g,
                model="NVIDIA A100-SXM4-40GB",
                hostname=node.name,
                mig_instance_id=gi,
                mig_profile="1g.10gb" if gi is not None else None,
                util_pct=0.0 if gi is not None else util,
                gr_engine_active=util / 100,
                fb_used_mib=1000.0 + util * 100,
                fb_free_mib=30000.0,
                power_w=80 + util,
                temp_c=40.0,
                xid=0,
            )
        )
    return tuple(out)


def scrape(node: FleetNode, ts_ms: int, trace: UtilTrace) -> DcgmScrape:
    """What the node's agent publishes for one scrape: every device's reading, one record."""
    return DcgmScrape(node.name, ts_ms, samples(node, ts_ms, trace))


def stream(
    nodes: int,
    intervals: int,
    *,
    start_ms: int,
    interval_ms: int = 5000,
    churn_every: int = 4,
    seed: int = 7,
    switch: float = 0.05,
) -> Iterator[AgentRecord]:
    """Everything the agents of the fleet would publish, in time order (``churn_every`` 0 and
    ``switch`` 0: a steady fleet — no pod churn, every device at its level)."""
    trace = UtilTrace(random.Random(seed), switch)
    members = fleet(nodes)
    for node in members:
        yield from setup(node, start_ms)
    for k in range(1, intervals + 1):
        ts = start_ms + k * interval_ms
        for node in members:
            if churn_every and k % churn_every == 0:
                yield from churn(node, k // churn_every, ts - 1)
            yield scrape(node, ts, trace)


def sample_count(nodes: int, intervals: int) -> int:
    return sum(len(n.devices()) for n in fleet(nodes)) * intervals
