"""The worker's own Prometheus metrics."""

from __future__ import annotations

import functools
from typing import Any

from prometheus_client import Counter, Gauge

EVENTS_IN = Counter("gpuattr_worker_events_in_total", "Input records read", ["topic"])
EVENTS_OUT = Counter("gpuattr_worker_events_out_total", "Output records sent", ["kind"])
ERRORS = Counter("gpuattr_worker_errors_total", "Errors by kind", ["kind"])
DEAD_LETTERED = Counter(
    "gpuattr_worker_dead_lettered_total", "Inputs sent to the dead-letter topic", ["topic"]
)
OUTPUTS_REFUSED = Counter(
    "gpuattr_worker_outputs_refused_total",
    "Outputs and changelog records not written for their size, dead-lettered as output.refused "
    "(too-large: over the worker's max_record_bytes; broker-refused: the producer or broker said "
    "too large)",
    ["cause"],
)
TABLE_KEYS = Gauge(
    "gpuattr_worker_table_keys", "Keys held in this worker's table partitions", ["table"]
)
CONSUMER_LAG = Gauge(
    "gpuattr_worker_consumer_lag", "Input records not yet processed", ["partition"]
)
EXPORTER_VERDICTS = Counter(
    "gpuattr_exporter_samples_total",
    "Attributed samples by what dcgm-exporter's own pod labels amounted to (verdict): "
    "trusted, unchecked, or how they misattribute",
    ["verdict"],
)
SCRAPES_REFUSED = Counter(
    "gpuattr_worker_scrapes_refused_total",
    "dcgm-exporter answers (or rows of them) refused as not provably their node's, by cause",
    ["cause"],
)
SPINE_EVENTS = Counter(
    "gpuattr_worker_spine_events_total",
    "Attribution events no sample made, by origin (allocation, heartbeat, stale, gone)",
    ["origin"],
)
USAGE_UNCREDITED = Counter(
    "gpuattr_worker_usage_uncredited_total",
    "Per-process readings credited to no holder and flagged (usage.uncredited), by reason: "
    "not-a-holder (its pod holds no slot on the device), no-pod (an orphan process)",
    ["reason"],
)
MALLOC_TRIMS = Counter(
    "gpuattr_worker_malloc_trims_total",
    "Times the worker handed the C allocator's free pages back (malloc_trim)",
)
MALLOC_RELEASED = Counter(
    "gpuattr_worker_malloc_released_bytes",
    "Resident memory given back by malloc_trim (the resident set's fall across each trim)",
)
API_REFUSED = Counter(
    "gpuattr_worker_api_refused_total",
    "Query-API requests refused: no or wrong credentials (401), not allowed (403), "
    "the API server could not review the token (503)",
    ["status"],
)


@functools.cache
def child(metric: Any, value: str) -> Any:
    """``metric.labels(value)``, made once per value: the record loop counts every record, and
    ``labels`` takes a lock and builds its key on each call. For labels of a small fixed set
    (topics, verdicts, origins), never an unbounded one."""
    return metric.labels(value)
