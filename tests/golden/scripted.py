"""What a demo scenario's agents and cluster role would publish, in simulated time.

The demo runs real agents against the simulator's doubles on the wall clock; the order in which
their records meet in Kafka then depends on the machine. Here one loop walks scenario time in
steps of :data:`STEP_S` and asks the same doubles' pure views (:class:`sim.cluster.Cluster`,
:mod:`sim.kube_objects`, :mod:`sim.gpuoperator`, :mod:`sim.dra`) what they serve at that
instant, and turns each answer into records with the agents' own translators
(:mod:`agents.kube.translate`, :mod:`agents.kube.gpuoperator`, :mod:`agents.kube.dra`,
:mod:`agents.kube.pending`, :mod:`agents.dcgm.translate`, :mod:`agents.podresources.diff`) on
the demo's intervals: the kubelet and the API server read every step, a scrape and a clock tick
every :data:`SCRAPE_S`, an agent status every :data:`STATUS_S` and on every change, a
PodResources snapshot every :data:`SNAPSHOT_S`. Every record is given the partition the
producer would pick (murmur2 of its key, :func:`streams.worker.outbox.partition_of`) or, for
the cluster role's unkeyed records, one copy per partition.

:class:`AgentFaults` gives a node's agent what no scenario file says: an exporter whose pod
lookup lags the kubelet, a scrape URL that points at another node's exporter for a while.

Deterministic: scenario time only, the simulator's fixed UUIDs and the exporter's fixed
per-scrape choice; no wall clock, no randomness.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import orjson
from kubernetes_asyncio.client.api_client import ApiClient

from agents.dcgm.counters import with_since_last
from agents.dcgm.translate import parse_exposition
from agents.inventory import read_file
from agents.kube.dra import claim_record, slice_record
from agents.kube.gpuoperator import cluster_policy, operand_pods
from agents.kube.pending import pending_pod, per_resource
from agents.kube.translate import can_hold_gpu, node_record, pod_record
from agents.podresources.diff import diff_assignments
from contract.inputs import (
    AgentStatus,
    ClockTick,
    DcgmSample,
    DcgmScrape,
    DeviceAssignment,
    PendingPod,
    PendingPodList,
    PodListSnapshot,
    PodResourcesDiff,
    PodResourcesSnapshot,
    SourceState,
    SourceStatus,
    pool_resource,
)
from contract.records import replace
from sim.cluster import Cluster
from sim.exporter_rows import render
from sim.gpuoperator import cluster_policy_objects, exporter_answers, operand_pod_objects
from sim.kube_objects import node_objects, pod_objects
from sim.scenario import NodeSpec, Scenario
from sim.traces import exporter_down
from streams.worker.outbox import partition_of

EPOCH_S = 1_700_000_000  # scenario second 0, in Unix seconds
PARTITIONS = 8  # the topics' partitions (KafkaSettings.partitions' default)
STEP_S = 1.0  # how often the kubelet and the API server are read
SCRAPE_S = 2.0  # the demo's scrape interval, and its cluster tick interval
STATUS_S = 5.0  # the demo's agent status interval
SNAPSHOT_S = 30.0  # the kubelet snapshot interval the demo gives its agents
#: what the horizon adds past the scenario's last change: its idle, stale and gone windows run out
SETTLE_S = 70.0
MAX_HORIZON_S = 420.0
OPERATOR_NAMESPACE = "gpu-operator"

Topic = Literal["node-events", "demand-events"]


@dataclass(frozen=True, slots=True)
class AgentFaults:
    """``exporter_lag_s``: the node's exporter answers as the cluster was this long before;
    ``misrouted``: (another node, from, until) — the agent scrapes that node's exporter then."""

    exporter_lag_s: float = 0.0
    misrouted: tuple[str, float, float] | None = None


@dataclass(frozen=True, slots=True)
class Published:
    """One record as the producer sends it: topic, partition, key."""

    topic: Topic
    partition: int
    key: bytes | None
    record: object


def ts_of(t: float) -> int:
    return EPOCH_S * 1000 + round(t * 1000)


def partition_for(key: bytes) -> int:
    return partition_of(key, tuple(range(PARTITIONS)))


def horizon_s(scenario: Scenario) -> float:
    """Scenario seconds that cover every phase the file writes down, and the windows after it."""
    times: list[float] = [0.0]
    for pod in scenario.pods:
        times += [pod.start_s, *(s for s, _ in pod.util_steps)]
        times += [x for x in (pod.pending_s, pod.stop_s, pod.released_s) if x is not None]
    for node in scenario.nodes:
        times += [node.deleted_s] if node.deleted_s is not None else []
        for tr in node.traces:
            times += [tr.start_s + tr.ramp_s]
            times += [x for x in (tr.stop_s, tr.failure_s) if x is not None]
        times += [r.at_s + r.down_s for r in node.exporter_restarts]
        if node.operator is not None:
            times += [s.at_s for _, steps in node.operator.pods for s in steps]
            times += [m.at_s for m in node.operator.mig]
    return min(MAX_HORIZON_S, SCRAPE_S * round((max(times) + SETTLE_S) / SCRAPE_S))


class Models(ApiClient):
    """The client library's deserializer alone: no connection pool, no event loop."""

    def __init__(self) -> None:
        pass


def _kube(api: ApiClient, raw: Mapping[str, Any], kind: str) -> Any:
    """A JSON object as the client library hands it to a watcher (its model)."""
    response: Any = SimpleNamespace(data=json.dumps(raw))  # all deserialize reads is .data
    return api.deserialize(response, kind)


def _said(record: object) -> object:
    """A record without when it was read: what a watcher's change is judged on."""
    return replace(record, ts_ms=0)  # type: ignore[type-var]


class NodeAgent:
    """One node's agent: its kubelet, exporter, API-server watches and status."""

    def __init__(
        self,
        scenario: Scenario,
        cluster: Cluster,
        spec: NodeSpec,
        api: ApiClient,
        faults: AgentFaults = AgentFaults(),
    ) -> None:
        self.scenario = scenario
        self.cluster = cluster
        self.faults = faults
        self.now = 0.0
        lag = faults.exporter_lag_s
        self.exporter = Cluster(scenario, lambda: max(0.0, self.now - lag)) if lag else cluster
        self.spec = spec
        self.api = api
        self.node = spec.name
        self.partition = partition_for(spec.name.encode())
        self.node_said: object = None
        self.pods: dict[str, tuple[Any, object]] = {}  # uid → (model, record said)
        self.dra: dict[str, Any] = {}  # namespace/name → record published
        self.operands: object = None
        self.rows: frozenset[DeviceAssignment] | None = None
        self.snapshot_at = 0.0
        self.scrapes = 0
        self.previous: dict[tuple[str, int | None], DcgmSample] = {}
        self.dcgm: tuple[SourceState, str] = ("starting", "")
        self.dcgm_since: int | None = None
        self.status_at: float | None = None
        self.url = f"http://{spec.name}.sim:9400/metrics"

    def _out(self, *records: object) -> list[Published]:
        key = self.node.encode()
        return [Published("node-events", self.partition, key, r) for r in records]

    def step(self, t: float, scrape: bool) -> list[Published]:
        self.now = t
        ts = ts_of(t)
        out = self._node(t, ts)
        out += self._pods(t, ts)
        out += self._dra(ts)
        out += self._operands(t, ts)
        out += self._podresources(t, ts)
        if scrape:
            out += self._scrape(t, ts)
        if self.status_at is None or t - self.status_at >= STATUS_S:
            out += self._status(t, ts)
        return out

    def _node(self, t: float, ts: int) -> list[Published]:
        out: list[Published] = []
        for raw in node_objects(self.scenario, t):
            if raw["metadata"]["name"] != self.node:
                continue
            record = node_record(_kube(self.api, raw, "V1Node"), ts_ms=ts)
            if _said(record) != self.node_said:
                self.node_said = _said(record)
                out += self._out(record)
        if self.status_at is None:  # the agent's start: its inventory file, once
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "inventory.json"
                path.write_bytes(orjson.dumps(self.cluster.inventory(self.node)))
                out += self._out(read_file(path, self.node, ts))
        return out

    def _pods(self, t: float, ts: int) -> list[Published]:
        listed = {}
        for raw in pod_objects(self.scenario, t, EPOCH_S):
            if (raw.get("spec") or {}).get("nodeName") != self.node:
                continue
            pod = _kube(self.api, raw, "V1Pod")
            if can_hold_gpu(pod):
                listed[str(pod.metadata.uid)] = pod
        out: list[Published] = []
        for uid, pod in listed.items():
            record = pod_record(pod, node=self.node, ts_ms=ts)
            before = self.pods.get(uid)
            if before is None or before[1] != _said(record):
                out += self._out(record)
            self.pods[uid] = (pod, _said(record))
        for uid in sorted(set(self.pods) - set(listed)):
            pod, _ = self.pods.pop(uid)
            out += self._out(pod_record(pod, node=self.node, ts_ms=ts, deleted=True))
        if self.status_at is None:  # the pod watch's first list
            out += self._out(PodListSnapshot(self.node, ts, tuple(sorted(listed))))
        return out

    def _dra(self, ts: int) -> list[Published]:
        if not self.spec.dra:
            return []
        seen: dict[str, Any] = {}
        for raw in self.cluster.dra_objects(EPOCH_S):
            meta: Any = raw.get("metadata") or {}
            key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
            if raw.get("kind") == "ResourceSlice":
                record: Any = slice_record(raw, node=self.node, ts_ms=ts)
            else:
                record = claim_record(raw, node=self.node, ts_ms=ts)
            if record is not None:
                seen[key] = record
        out: list[Published] = []
        for key, record in seen.items():
            before = self.dra.get(key)
            if before is None or _said(before) != _said(record):
                out += self._out(record)
            self.dra[key] = record
        for key in sorted(set(self.dra) - set(seen)):
            gone = self.dra.pop(key)
            out += self._out(replace(gone, ts_ms=ts, deleted=True))
        return out

    def _operands(self, t: float, ts: int) -> list[Published]:
        if self.spec.operator is None:
            return []
        objs = operand_pod_objects(self.scenario, t, EPOCH_S)
        record = operand_pods(objs, node=self.node, namespace=OPERATOR_NAMESPACE, ts_ms=ts)
        if record.pods == self.operands:
            return []
        self.operands = record.pods
        return self._out(record)

    def _podresources(self, t: float, ts: int) -> list[Published]:
        rows, allocatable = self.cluster.podresources(self.node)
        current = frozenset(rows)
        if self.rows is None or t - self.snapshot_at >= SNAPSHOT_S:
            self.rows, self.snapshot_at = current, t
            return self._out(PodResourcesSnapshot(self.node, ts, tuple(sorted(rows)), allocatable))
        if current == self.rows:
            return []
        added, removed = diff_assignments(self.rows, current)
        self.rows = current
        return self._out(PodResourcesDiff(self.node, ts, added, removed))

    def _answers(self, t: float) -> bool:
        return exporter_answers(self.scenario, self.spec, t) and not exporter_down(
            self.spec.exporter_restarts, t
        )

    def _dcgm(self, state: SourceState, reason: str, ts: int) -> None:
        if state != self.dcgm[0]:
            self.dcgm_since = ts
        self.dcgm = (state, reason)

    def _scrape(self, t: float, ts: int) -> list[Published]:
        before = self.dcgm
        if self.spec.exporter == "none":
            self._dcgm("disabled", "no-exporter-pod", ts)
        elif self.spec.exporter == "down" or not self._answers(t):
            self._dcgm("failing", "unreachable", ts)
        else:
            self._dcgm("ok", "", ts)
        out: list[Published] = []
        if self.dcgm[0] == "ok":
            source, misrouted = self.node, self.faults.misrouted
            if misrouted is not None and misrouted[1] <= t < misrouted[2]:
                source = misrouted[0]
            text = render(self.exporter.exporter_rows(source, self.scrapes))
            self.scrapes += 1
            parsed = parse_exposition(text, node=self.node, ts_ms=ts).samples
            samples = tuple(
                with_since_last(self.previous.get((s.uuid, s.mig_instance_id)), s) for s in parsed
            )
            if samples:
                self.previous = {(s.uuid, s.mig_instance_id): s for s in samples}
                out += self._out(DcgmScrape(self.node, ts, samples, self.url))
        if self.dcgm != before and self.status_at is not None:
            out += self._status(t, ts)  # the status publisher wakes on every change
        return out

    def _status(self, t: float, ts: int) -> list[Published]:
        self.status_at = t
        state, reason = self.dcgm
        detail = {"unreachable": "connection refused", "no-exporter-pod": "no exporter pod"}
        sources = (
            SourceStatus("apiserver", "ok", EPOCH_S * 1000),
            SourceStatus("dcgm", state, self.dcgm_since, reason, detail.get(reason, ""), self.url),
            SourceStatus("podresources", "ok", EPOCH_S * 1000),
        )
        return self._out(AgentStatus(self.node, ts, sources))


class ClusterRole:
    """The cluster role: node deletions, the ClusterPolicy, pending pods and the clock ticks."""

    def __init__(self, scenario: Scenario, api: ApiClient) -> None:
        self.scenario = scenario
        self.api = api
        self.nodes: dict[str, Any] = {}  # name → the Node's last model
        self.pending: dict[str, PendingPod] = {}  # uid → last published
        self.listed = False

    def step(self, t: float, tick: bool) -> list[Published]:
        ts = ts_of(t)
        out = self._nodes(t, ts)
        if not self.listed and self.scenario.cluster_policy is not None:
            for raw in cluster_policy_objects(self.scenario, EPOCH_S):
                record = cluster_policy(raw, ts_ms=ts)
                if record is not None:
                    out += [Published("node-events", p, None, record) for p in range(PARTITIONS)]
        out += self._pending(t, ts)
        self.listed = True
        if tick:
            topics: tuple[Topic, ...] = ("node-events", "demand-events")
            for topic in topics:
                out += [Published(topic, p, None, ClockTick(p, ts)) for p in range(PARTITIONS)]
        return out

    def _nodes(self, t: float, ts: int) -> list[Published]:
        now = {raw["metadata"]["name"]: raw for raw in node_objects(self.scenario, t)}
        out: list[Published] = []
        for name in sorted(set(self.nodes) - set(now)):
            record = node_record(self.nodes.pop(name), ts_ms=ts, deleted=True)
            out.append(
                Published("node-events", partition_for(name.encode()), name.encode(), record)
            )
        for name, raw in now.items():
            self.nodes[name] = _kube(self.api, raw, "V1Node")
        return out

    def _demand(self, record: PendingPod) -> list[Published]:
        out = []
        for resource, part in per_resource(record):
            key = pool_resource(resource).encode()
            out.append(Published("demand-events", partition_for(key), key, part))
        return out

    def _pending(self, t: float, ts: int) -> list[Published]:
        waiting = {}
        for raw in pod_objects(self.scenario, t, EPOCH_S):
            if (raw.get("spec") or {}).get("nodeName"):
                continue
            record = pending_pod(raw, ts_ms=ts)
            if record is not None:
                waiting[record.uid] = record
        out: list[Published] = []
        for uid, record in waiting.items():
            before = self.pending.get(uid)
            if before is None or _said(before) != _said(record):
                out += self._demand(record)
            self.pending[uid] = record
        for uid in sorted(set(self.pending) - set(waiting)):
            last = self.pending.pop(uid)
            pod = next((p for p in self.scenario.pods if p.uid == uid), None)
            bound = pod is not None and pod.node and (pod.stop_s is None or t < pod.stop_s)
            final = replace(
                last,
                ts_ms=ts,
                state="bound" if bound else "deleted",
                node=pod.node if bound and pod is not None else "",
            )
            out += self._demand(final)
        if not self.listed:  # the watch's first list
            pods = tuple(sorted(self.pending.values(), key=lambda p: (p.namespace, p.name, p.uid)))
            listing = PendingPodList(ts, pods)
            out += [Published("demand-events", p, None, listing) for p in range(PARTITIONS)]
        return out


def scenario_inputs(
    scenario: Scenario, faults: Mapping[str, AgentFaults] | None = None
) -> Iterator[Published]:
    """Everything the scenario's agents and cluster role publish up to :func:`horizon_s`, in the
    order one simulated step after another would publish it (``faults``: by node)."""
    t = 0.0
    cluster = Cluster(scenario, lambda: t)
    api = Models()
    agents = [
        NodeAgent(scenario, cluster, spec, api, (faults or {}).get(spec.name, AgentFaults()))
        for spec in scenario.nodes
    ]
    role = ClusterRole(scenario, api)
    end = horizon_s(scenario)
    steps = round(end / STEP_S)
    every = round(SCRAPE_S / STEP_S)
    for k in range(steps + 1):
        t = k * STEP_S
        on_beat = k % every == 0
        for agent in agents:
            gone = agent.spec.deleted_s is not None and t >= agent.spec.deleted_s
            if not gone:  # a deleted node's agent went with it
                yield from agent.step(t, on_beat)
        yield from role.step(t, on_beat)
