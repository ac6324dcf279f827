"""Which dcgm-exporter to scrape: the one on this node. Pure.

The GPU Operator's ``nvidia-dcgm-exporter`` Service routes to any node's exporter (its traffic
policy is Cluster unless the ClusterPolicy says Local), so the agent does not scrape a Service:
its pod watch finds the exporter pods on its own node (label selector, default
``app=nvidia-dcgm-exporter``) and it scrapes the best of them by pod IP — ready before not
ready, running before anything else, not terminating, newest first. No such pod is not an
outage but nothing to read: the agent says so ("no dcgm-exporter pod on this node"), and the
worker reports the node's GPUs with that reason. Whatever is scraped, the worker still checks
the rows are this node's (:mod:`streams.core.telemetry`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ExporterPod:
    """A dcgm-exporter pod on the agent's node, as its pod watch sees it: where to scrape it."""

    namespace: str
    name: str
    ip: str  # status.podIP ("" until it has one)
    port: int
    phase: str
    ready: bool
    terminating: bool
    created_ms: int | None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    pod: str  # namespace/name, "" for a URL given in the settings


@dataclass(frozen=True, slots=True)
class NotFound:
    reason: str  # one word: no-exporter-pod, no-pod-ip
    detail: str


class ExporterLocator:
    """The node's exporter pods (from the watch) and the one to scrape now."""

    def __init__(self, selector: str, *, scheme: str = "http", path: str = "/metrics") -> None:
        self.selector = selector
        self.scheme = scheme
        self.path = path
        self.pods: dict[str, ExporterPod] = {}
        self.listed = False  # the watch has listed once: "none" is an answer, not a guess

    def seen(self, pod: ExporterPod, deleted: bool) -> None:
        if deleted:
            self.pods.pop(pod.key, None)
        else:
            self.pods[pod.key] = pod

    def relisted(self, pods: Iterable[ExporterPod]) -> None:
        self.pods = {p.key: p for p in pods}
        self.listed = True

    def target(self) -> Target | NotFound:
        if not self.pods:
            if not self.listed:
                return NotFound("discovering", "the exporter pod watch has not listed yet")
            return NotFound("no-exporter-pod", f"no pod labelled {self.selector} runs on this node")
        best = min(
            self.pods.values(),
            key=lambda p: (
                not p.ready,
                p.phase != "Running",
                p.terminating,
                -(p.created_ms or 0),
                p.key,
            ),
        )
        if not best.ip:
            return NotFound(
                "no-pod-ip", f"dcgm-exporter pod {best.key} has no IP yet (phase {best.phase})"
            )
        host = f"[{best.ip}]" if ":" in best.ip else best.ip
        return Target(f"{self.scheme}://{host}:{best.port}{self.path}", best.key)
