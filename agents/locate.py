"""Which dcgm-exporter to scrape: the operator's one on this node. Pure.

The GPU Operator's ``nvidia-dcgm-exporter`` Service routes to any node's exporter (its traffic
policy is Cluster unless the ClusterPolicy says Local), so the agent does not scrape a Service:
its pod watch finds the exporter pods on its own node (label selector, default
``app in (nvidia-dcgm-exporter,nvidia-dcgm-exporter-dra)``: the DRA stack's GPUCluster names its
exporter ``nvidia-dcgm-exporter-dra``) and it scrapes the best of them by pod IP — ready before not
ready, running before anything else, not terminating, newest first.

A label is anybody's to set, so a candidate is scraped only when the API server says it is the
operator's exporter (:func:`refusal`): in the exporter's namespace (default ``gpu-operator``)
and controlled by its DaemonSet (an ``ownerReference`` of kind DaemonSet, ``controller: true``,
default name ``nvidia-dcgm-exporter``, or the same name with ``-dra`` on the DRA stack).
Tenants cannot create pods there, and only the DaemonSet controller makes pods it controls. Any
other candidate is refused, never scraped, and reported once by the watch
(:class:`agents.kube.watch.ExporterWatcher`).

No such pod is not an outage but nothing to read: the agent says so ("no dcgm-exporter pod on
this node"), and the worker reports the node's GPUs with that reason. Whatever is scraped, the
worker still checks the rows are this node's (:mod:`streams.core.node.telemetry`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal


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
    #: its controller ``ownerReference`` (``controller: true``): kind and name, "" without one
    owner_kind: str = ""
    owner_name: str = ""

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


#: the GPUCluster's operands are the ClusterPolicy's names with this suffix
#: (``manifests/state-dcgm-exporter``: DaemonSet ``nvidia-dcgm-exporter-dra``)
DRA_SUFFIX = "-dra"

#: why a candidate is not the operator's exporter (:func:`refusal`)
RefusedWhy = Literal["other-namespace", "no-daemonset-owner", "other-daemonset"]


def refusal(pod: ExporterPod, namespace: str, daemonset: str) -> RefusedWhy | None:
    """Why ``pod`` is not the exporter of DaemonSet ``namespace/daemonset`` (``None``: it is).

    Namespace and controller come from the API server, not from anything the pod's own labels
    or answers say."""
    if pod.namespace != namespace:
        return "other-namespace"
    if pod.owner_kind != "DaemonSet":
        return "no-daemonset-owner"
    if pod.owner_name not in (daemonset, daemonset + DRA_SUFFIX):
        return "other-daemonset"
    return None


class ExporterLocator:
    """The node's exporter pods (from the watch) and the one to scrape now."""

    def __init__(
        self,
        selector: str,
        *,
        namespace: str,
        daemonset: str,
        scheme: str = "http",
        path: str = "/metrics",
    ) -> None:
        self.selector = selector
        self.namespace = namespace
        self.daemonset = daemonset
        self.scheme = scheme
        self.path = path
        self.pods: dict[str, ExporterPod] = {}  # the operator's exporter pods on this node
        self.refused: dict[str, RefusedWhy] = {}  # other candidates on this node, and why
        self.listed = False  # the watch has listed once: "none" is an answer, not a guess

    def seen(self, pod: ExporterPod, deleted: bool) -> RefusedWhy | None:
        """Take one watch event; returns the reason when it newly refuses the pod (to report
        once), else ``None``."""
        if deleted:
            self.pods.pop(pod.key, None)
            self.refused.pop(pod.key, None)
            return None
        return self._take(pod)

    def relisted(self, pods: Iterable[ExporterPod]) -> list[tuple[ExporterPod, RefusedWhy]]:
        """Take a (re)list whole; returns the pods it newly refuses, with their reasons."""
        before = self.refused
        self.pods, self.refused = {}, {}
        news = []
        for pod in pods:
            why = self._take(pod)
            if why is not None and before.get(pod.key) != why:
                news.append((pod, why))
        self.listed = True
        return news

    def _take(self, pod: ExporterPod) -> RefusedWhy | None:
        why = refusal(pod, self.namespace, self.daemonset)
        if why is None:
            self.refused.pop(pod.key, None)
            self.pods[pod.key] = pod
            return None
        self.pods.pop(pod.key, None)
        known = self.refused.get(pod.key)
        self.refused[pod.key] = why
        return why if known != why else None

    def target(self) -> Target | NotFound:
        if not self.pods:
            if not self.listed:
                return NotFound("discovering", "the exporter pod watch has not listed yet")
            owner = f"DaemonSet {self.namespace}/{self.daemonset}"
            refused = (
                f" ({len(self.refused)} other pod(s) labelled so refused)" if self.refused else ""
            )
            return NotFound(
                "no-exporter-pod",
                f"no pod labelled {self.selector} of {owner} runs on this node{refused}",
            )
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
