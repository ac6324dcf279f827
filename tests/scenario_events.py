"""A scenario's nodes through the worker's processor, in process: the records every agent would
publish (made by the agents' own translators from the simulator's objects and exporter text),
then scrapes at a fixed allocation. For accounting checks that need many hours of event time.
"""

from __future__ import annotations

from collections.abc import Iterator

from agents.dcgm.translate import parse_exposition
from agents.kube.dra import claim_record, slice_record
from contract.inputs import (
    AgentStatus,
    DcgmScrape,
    DeviceInventory,
    GpuInfo,
    MigInfo,
    NodeRecord,
    OwnerRef,
    PodListSnapshot,
    PodRecord,
    PodResourcesSnapshot,
    SourceStatus,
)
from contract.outputs import AttributionEvent
from sim import dra
from sim.cluster import Cluster
from sim.exporter_rows import render
from sim.scenario import NodeSpec, Scenario
from streams.core.flow.processor import Output, Processor, Tables

EPOCH_S = 1_700_000_000


def setup(scenario: Scenario, cluster: Cluster, node: NodeSpec, ts_ms: int) -> list[object]:
    """What a node's agent publishes at start: node, inventory, pods, DRA objects, PodResources."""
    t = cluster.clock()
    records: list[object] = [
        NodeRecord(
            node.name,
            ts_ms,
            tuple(sorted({**dict(node.labels), "kubernetes.io/hostname": node.name}.items())),
        )
    ]
    inv = cluster.inventory(node.name)
    records.append(
        DeviceInventory(
            node.name,
            ts_ms,
            "file",
            tuple(GpuInfo(int(g["index"]), str(g["uuid"]), str(g["model"])) for g in inv["gpus"]),  # type: ignore[call-overload]
            tuple(
                MigInfo(str(m["mig_uuid"]), str(m["parent_uuid"]), int(m["gi"]), str(m["profile"]))  # type: ignore[call-overload]
                for m in inv["migs"]
            ),
        )
    )
    pods = cluster.holders(node.name, t)
    for pod in pods:
        workload = (
            OwnerRef(pod.workload_kind, pod.workload_name) if pod.workload_kind != "Pod" else None
        )
        records.append(
            PodRecord(
                node.name,
                ts_ms,
                pod.uid,
                pod.namespace,
                pod.name,
                (EPOCH_S + int(pod.start_s)) * 1000,
                workload=workload,
            )
        )
    records.append(PodListSnapshot(node.name, ts_ms, tuple(sorted(p.uid for p in pods))))
    if node.dra:
        records.append(slice_record(dra.slice_object(node), node=node.name, ts_ms=ts_ms))
        holding = [p for p in scenario.pods if p in cluster.holders(p.node, t)]
        for obj in dra.claim_objects(scenario, holding, EPOCH_S):
            claim = claim_record(obj, node=node.name, ts_ms=ts_ms)
            if claim is not None:
                records.append(claim)
    rows, allocatable = cluster.podresources(node.name)
    records.append(PodResourcesSnapshot(node.name, ts_ms, rows, allocatable))
    return records


def scrape(cluster: Cluster, node: NodeSpec, ts_ms: int, n: int) -> object:
    """One scrape of the node's exporter, or (exporter down or absent) the agent saying so."""
    if node.exporter != "pod":
        state = "failing" if node.exporter == "down" else "disabled"
        reason = "unreachable" if node.exporter == "down" else "no-exporter-pod"
        return AgentStatus(
            node.name,
            ts_ms,
            (SourceStatus("dcgm", state, 0, reason, "connection refused", "http://10.0.0.9:9400"),),
        )
    text = render(cluster.exporter_rows(node.name, n))
    samples = parse_exposition(text, node=node.name, ts_ms=ts_ms).samples
    return DcgmScrape(node.name, ts_ms, samples, "http://sim/metrics")


def run(
    scenario: Scenario, at_s: float, minutes: int, every_s: int = 60
) -> Iterator[tuple[object, list[Output]]]:
    """Every node set up at scenario time ``at_s``, then ``minutes`` of scrapes every
    ``every_s`` with the allocation held still: (record, its outputs) in order."""
    cluster = Cluster(scenario, lambda: at_s)
    proc = Processor(Tables.in_memory())
    start_ms = EPOCH_S * 1000
    for node in scenario.nodes:
        for record in setup(scenario, cluster, node, start_ms):
            yield record, proc.handle(record)
    for step in range(minutes * 60 // every_s + 1):
        ts_ms = start_ms + step * every_s * 1000
        for node in scenario.nodes:
            record = scrape(cluster, node, ts_ms, step)
            yield record, proc.handle(record)


def events(scenario: Scenario, at_s: float, minutes: int) -> list[AttributionEvent]:
    return [
        out
        for _, outputs in run(scenario, at_s, minutes)
        for out in outputs
        if isinstance(out, AttributionEvent)
    ]
