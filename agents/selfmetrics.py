"""The agent's own Prometheus metrics (served on its health/metrics port)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

RECORDS_PUBLISHED = Counter(
    "gpuattr_agent_records_published_total", "Records published to Kafka", ["kind"]
)
SOURCE_ERRORS = Counter(
    "gpuattr_agent_source_errors_total",
    "Errors reading a source, by source and kind of error",
    ["source", "error"],
)
EXPORTER_REFUSED = Counter(
    "gpuattr_agent_exporter_candidates_refused_total",
    "Pods labelled as dcgm-exporter on this node that are not the operator's exporter (other "
    "namespace, no DaemonSet controller, another DaemonSet): never scraped, counted once each",
    ["reason"],
)
REJECTED_LINES = Counter(
    "gpuattr_agent_rejected_metric_lines_total", "dcgm-exporter lines that could not be parsed"
)
SOURCE_UP = Gauge(
    "gpuattr_agent_source_up", "1 when the last read of a source succeeded", ["source"]
)
START_GATE_TIMEOUTS = Counter(
    "gpuattr_agent_start_gate_timeouts_total",
    "First samples published before the pod list or PodResources snapshot (gate timed out)",
)
IGNORED_FAMILIES = Counter(
    "gpuattr_agent_ignored_metric_families_total",
    "dcgm-exporter metric families read but not used (per scrape), by reason",
    ["reason"],
)
IGNORED_PODRESOURCES = Counter(
    "gpuattr_agent_ignored_podresources_rows_total",
    "PodResources entries read but not usable (per reply), by reason",
    ["reason"],
)
REFUSED_VALUES = Counter(
    "gpuattr_agent_refused_values_total",
    "Values refused where they enter (not finite, out of range, oversized, not one the API "
    "defines, an entry missing what names it), by what they were",
    ["what"],
)
CUT_VALUES = Counter(
    "gpuattr_agent_cut_values_total",
    "Strings copied from a source cut to contract.bounds.MAX_TEXT_CHARS (agents/bounds.py), by "
    "what they were",
    ["what"],
)
KUBELET_READY = Gauge(
    "gpuattr_agent_kubelet_ready",
    "0 while the kubelet's PodResources answers are held because it is not ready "
    "(just restarted: no pods yet, or device plugins not registered)",
)
KUBELET_ANSWERS_HELD = Counter(
    "gpuattr_agent_kubelet_answers_held_total",
    "PodResources answers not published, by reason (not ready, or awaiting confirmation)",
    ["reason"],
)
KUBELET_READY_TIMEOUTS = Counter(
    "gpuattr_agent_kubelet_ready_timeouts_total",
    "Answers of a kubelet still not ready (or unconfirmed) after the bounded wait, taken as is",
)
NVML_PROCESS_ERRORS = Counter(
    "gpuattr_agent_nvml_process_errors_total",
    "Failed reads of the opt-in NVML per-process source (GPUATTR_AGENT_NVML_PROCESSES), by NVML "
    "call (or cgroup) and reason: that device's per-pod usage, or that round's utilisation, stays "
    "unknown",
    ["call", "reason"],
)
NVML_PROCESSES_VANISHED = Counter(
    "gpuattr_agent_nvml_processes_vanished_total",
    "GPU processes NVML listed that exited before their cgroup was read (left out of that scrape)",
)
