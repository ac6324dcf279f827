"""The gpu-attribution Grafana dashboard, as code (grafana-foundation-sdk, Grafana 11.6 schema).

    .venv/bin/python deploy/grafana/dashboard.py --write   (make dashboard)

writes deploy/grafana/gpuattr.json and the Helm chart's copy, deploy/helm/gpuattr/files/gpuattr.json
(Helm reads only files inside its chart); without ``--write`` it prints the JSON.

The committed JSON is this module's output; tests/unit/test_dashboard.py fails when it is stale,
re-reads it through the SDK's own models, and tests/integration/test_prometheus_handover.py runs
every panel's query against a real Prometheus scraping two workers.

Honesty on the wall: usage (busy and effective alike) is only ever the device's (or MIG
instance's) figure; the holders of a shared device are a separate table with no usage column;
GPU-hours are *held* (each pod's share of a device, the one accounting figure the report uses
too), never "used" by a pod. A held GPU no sample speaks for is shown with why, never as idle;
a device without a profiling field has no effective figure, never 0. Every table names its
columns (Grafana would otherwise show ``Value #A``). Queries read the recording rules in
deploy/helm/gpuattr/files/prometheus-rules.yaml or take ``max by`` a series' identity first, so
a device whose partition is changing hands between workers is counted once.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import bargauge, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders.common import ReduceDataOptions, VizLegendOptions
from grafana_foundation_sdk.builders.dashboard import (
    Dashboard,
    DatasourceVariable,
    QueryVariable,
    Row,
    ThresholdsConfig,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    BarGaugeDisplayMode,
    BigValueColorMode,
    BigValueGraphMode,
    LegendDisplayMode,
    LegendPlacement,
    VizOrientation,
)
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    DataTransformerConfig,
    GridPos,
    Threshold,
    ThresholdsMode,
    VariableRefresh,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

UID = "gpuattr-attribution"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
NODE = 'node=~"$node"'  # every device series carries its node; the variable narrows them

#: a shared device, by identity (counted once while its partition changes hands)
SHARED = f'max by (node, device_uuid) (gpuattr_device_info{{state="shared", {NODE}}})'
HOLDER_ID = "node, device_uuid, namespace, pod, container, pod_uid, workload_kind, workload_name"
POD_ID = "node, device_uuid, namespace, pod, pod_uid, workload_kind, workload_name, basis"
#: a held device, by identity
HELD = "(max by (node, device_uuid) (gpuattr_device_tenants) > 0)"


def query(expr: str, ref: str, legend: str = "", *, instant: bool = False) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DS)
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant().format(PromQueryFormat.TABLE)
    return q


def at(x: int, y: int, w: int, h: int) -> GridPos:
    return GridPos(h=h, w=w, x=x, y=y)


def merged(panel: table.Panel, values: dict[str, str | None]) -> table.Panel:
    """Several instant queries of one table, joined on their shared labels, each query's value
    column named (``values``: ref id → column name; ``None`` drops an info series' constant 1).
    Without the names Grafana shows ``Value #A``, ``Value #B``…"""
    exclude: dict[str, bool] = {"Time": True}
    rename: dict[str, str] = {}
    for ref, name in values.items():
        if name is None:
            exclude[f"Value #{ref}"] = True
        else:
            rename[f"Value #{ref}"] = name
    return panel.with_transformation(
        DataTransformerConfig(id_val="merge", options={})
    ).with_transformation(
        DataTransformerConfig(
            id_val="organize",
            options={"excludeByName": exclude, "renameByName": rename},
        )
    )


def funnel() -> list[Any]:
    steps = [
        ("GPUs and MIG instances", "gpuattr:devices:count", "blue"),
        ("Allocated", "gpuattr:devices_allocated:count", "purple"),
        ("Active (>= 5 % busy)", "gpuattr:devices_active:count", "green"),
        ("Allocated but idle", "gpuattr:devices_idle:count", "orange"),
        ("Allocated, no reading", "gpuattr:devices_unmeasured:count", "text"),
        ("Requested, not placed", "gpuattr:gpus_requested:count", "red"),
    ]
    stats = [
        stat.Panel()
        .title(title)
        .datasource(DS)
        .with_target(query(expr, "A", title))
        .grid_pos(at(4 * i, 1, 4, 4))
        .color_mode(BigValueColorMode.BACKGROUND)
        .graph_mode(BigValueGraphMode.AREA)
        .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]))
        .thresholds(
            ThresholdsConfig()
            .mode(ThresholdsMode.ABSOLUTE)
            .steps([Threshold(color=color, value=None)])
        )
        for i, (title, expr, color) in enumerate(steps)
    ]
    over_time = (
        timeseries.Panel()
        .title("Fleet funnel over time")
        .description(
            "Whole fleet (the node filter does not apply): devices total, allocated to pods, "
            "active, allocated but idle, and allocated with no reading (exporter unreachable, "
            "refused or without a row: held, never counted idle), and GPUs requested by pods the "
            "scheduler has not placed (Pending: unmet demand, beside the supply). A MIG instance "
            "counts as a device of its own."
        )
        .datasource(DS)
        .grid_pos(at(0, 5, 24, 7))
        .legend(
            VizLegendOptions()
            .display_mode(LegendDisplayMode.LIST)
            .placement(LegendPlacement.BOTTOM)
            .show_legend(True)
        )
    )
    for ref, (title, expr, _) in zip("ABCDEF", steps, strict=True):
        over_time = over_time.with_target(query(expr, ref, title))
    over_time = over_time.with_target(
        query("gpuattr:devices_effective:count", "G", "Effective (>= 15 % SM active)")
    )
    return [*stats, over_time]


def shared_devices() -> list[Any]:
    devices = merged(
        table.Panel()
        .title("Shared GPUs: tenants and the device's own figures")
        .description(
            "One row per shared device (time-slicing, MPS, a shared DRA claim). Utilisation and "
            "memory are the whole device's: the hardware does not measure a tenant's share, so "
            "none is shown. Who holds each device is the table below."
        )
        .datasource(DS)
        .grid_pos(at(0, 13, 24, 7))
        .with_target(
            query(
                f"max by (node, device_uuid, model, sharing, allocation) "
                f'(gpuattr_device_info{{state="shared", {NODE}}})',
                "A",
                instant=True,
            )
        )
        .with_target(
            query(
                "max by (node, device_uuid) (gpuattr_device_tenants) "
                f"and on (node, device_uuid) {SHARED}",
                "B",
                instant=True,
            )
        )
        .with_target(
            query(
                "max by (node, device_uuid) (gpuattr_device_utilization_ratio) "
                f"and on (node, device_uuid) {SHARED}",
                "C",
                instant=True,
            )
        ),
        {"A": None, "B": "tenants", "C": "utilisation (whole device)"},
    )
    holders = merged(
        table.Panel()
        .title("Who holds what on shared GPUs")
        .description(
            "Every holder of every shared device, from gpu-attribution's own join (the pod UID "
            "is the API server's, never dcgm-exporter's). The allocation share is what the pod "
            "was allocated (its slots or capacity, or an equal split where the allocation has "
            "none: a shared DRA claim; the basis says which), not what it used. Measured "
            "memory and SM are the pod's own processes, where the hardware measured them per "
            "process (dcgm-exporter's virtual-GPU rows or the agent's NVML reading): blank where "
            "not measured, never a split of the device's figure."
        )
        .datasource(DS)
        .grid_pos(at(0, 20, 24, 9))
        .with_target(
            query(
                f"max by ({HOLDER_ID}, claim) (gpuattr_device_holder_info{{{NODE}}}) "
                f"and on (node, device_uuid) {SHARED}",
                "A",
                instant=True,
            )
        )
        .with_target(
            query(
                f"max by ({POD_ID}) (gpuattr_pod_device_share{{{NODE}}}) "
                f"and on (node, device_uuid) {SHARED}",
                "B",
                instant=True,
            )
        )
        .with_target(
            query(
                "max by (node, device_uuid, namespace, pod, pod_uid) "
                f"(gpuattr_pod_device_memory_used_bytes{{{NODE}}}) "
                f"and on (node, device_uuid) {SHARED}",
                "C",
                instant=True,
            )
        )
        .with_target(
            query(
                "max by (node, device_uuid, namespace, pod, pod_uid) "
                f"(gpuattr_pod_device_sm_utilization_ratio{{{NODE}}}) "
                f"and on (node, device_uuid) {SHARED}",
                "D",
                instant=True,
            )
        ),
        {
            "A": None,
            "B": "allocation share (not usage)",
            "C": "measured memory (own processes)",
            "D": "measured SM (own processes)",
        },
    )
    return [devices, holders]


def blind() -> list[Any]:
    """Held GPUs no sample speaks for: in every view all the same, with why."""
    return [
        merged(
            table.Panel()
            .title("Held GPUs without a reading, and why")
            .description(
                "Allocation is the spine: a GPU a pod holds is here whether or not its "
                "dcgm-exporter answers. Cause: exporter-unreachable, stack-broken (the exporter "
                "waits on a broken plane of the GPU stack: the event's telemetry.plane names it), "
                "no-exporter (none on the "
                "node), scrape-refused (the answer was another node's), no-row, no-sample-yet, "
                "samples-stopped, unplaced (a held device no GPU key places). Its usage is "
                "unknown, never 0; the attribution events carry the full reason."
            )
            .datasource(DS)
            .grid_pos(at(0, 30, 24, 8))
            .with_target(
                query(
                    "max by (node, device_uuid, cause) "
                    f"(gpuattr_device_telemetry_unknown{{{NODE}}}) and on (node, device_uuid) "
                    f"{HELD}",
                    "A",
                    instant=True,
                )
            )
            .with_target(
                query(
                    f"max by ({POD_ID}) (gpuattr_pod_device_share{{{NODE}}}) "
                    "and on (node, device_uuid) "
                    f"max by (node, device_uuid) (gpuattr_device_telemetry_unknown{{{NODE}}})",
                    "B",
                    instant=True,
                )
            ),
            {"A": None, "B": "allocation share (not usage)"},
        )
    ]


def gpu_hours() -> list[Any]:
    held = (
        timeseries.Panel()
        .title("GPUs held by namespace")
        .description(
            "Each pod counts its share of each device it holds (a whole GPU held alone counts "
            "1; replicas over the device's replicas; consumed capacity; an equal split where no "
            "share exists), at most 1 per device, whatever its containers and claims. Held, not "
            "used: on a shared device no per-pod usage exists. MIG instances are counted apart, "
            "under their profile: a 1g.10gb instance is not a GPU."
        )
        .datasource(DS)
        .grid_pos(at(0, 39, 12, 8))
        .with_target(
            query(
                "sum by (namespace, mig_profile) "
                '(namespace_workload:gpuattr_gpus_held:sum{namespace=~"$namespace"})',
                "A",
                "{{namespace}} {{mig_profile}}",
            )
        )
    )
    hourly = (
        timeseries.Panel()
        .title("GPU-hours held in the trailing hour, by namespace")
        .datasource(DS)
        .grid_pos(at(12, 39, 12, 8))
        .with_target(
            query(
                "sum by (namespace, mig_profile) "
                '(namespace_workload:gpuattr_gpu_hours_held:1h{namespace=~"$namespace"})',
                "A",
                "{{namespace}} {{mig_profile}}",
            )
        )
    )
    in_range = (
        bargauge.Panel()
        .title("GPU-hours held over the dashboard's time range, by workload")
        .description(
            "GPUs held integrated at a 15 s step over the selected range (240 steps per hour): "
            "time Prometheus did not see counts as not held. MIG instance-hours are apart, "
            "named by profile."
        )
        .datasource(DS)
        .grid_pos(at(0, 47, 24, 9))
        .orientation(VizOrientation.HORIZONTAL)
        .display_mode(BarGaugeDisplayMode.BASIC)
        .unit("none")
        .decimals(2)
        .with_target(
            query(
                "sum by (namespace, workload_kind, workload_name, mig_profile) (sum_over_time("
                'namespace_workload:gpuattr_gpus_held:sum{namespace=~"$namespace"}[$__range:15s]'
                ")) / 240",
                "A",
                "{{namespace}} {{workload_kind}}/{{workload_name}} {{mig_profile}}",
                instant=True,
            )
        )
    )
    return [held, hourly, in_range]


def misattribution() -> list[Any]:
    devices = (
        timeseries.Panel()
        .title("Devices whose dcgm-exporter pod labels misattribute, by verdict")
        .description(
            "Checked against gpu-attribution's join on each device's latest sample: "
            "shared-device (a device-wide figure stamped on one tenant, or copied onto each), "
            "stranger (a pod that holds no slot there), wrong-claim (DRA), per-process "
            "(per-process rows, no device reading), uncredited (no pod although pods hold it)."
        )
        .datasource(DS)
        .grid_pos(at(0, 57, 12, 8))
        .with_target(
            query("verdict:gpuattr_devices_exporter_misattributed:count", "A", "{{verdict}}")
        )
    )
    rate = (
        timeseries.Panel()
        .title("Attributed samples per second, by what the exporter's labels amounted to")
        .datasource(DS)
        .grid_pos(at(12, 57, 12, 8))
        .unit("ops")
        .with_target(
            query(
                "sum by (verdict) (rate(gpuattr_exporter_samples_total[$__rate_interval]))",
                "A",
                "{{verdict}}",
            )
        )
    )
    return [devices, rate]


def idle() -> list[Any]:
    return [
        merged(
            table.Panel()
            .title("Allocated GPUs idle now, and open alerts")
            .description(
                "Idle seconds of each held device in an idle episode (event time), and the "
                "alerts open on it (idle, orphaned-memory, xid-N, low-efficiency, thermal, "
                "memory-fault, pcie-replays)."
            )
            .datasource(DS)
            .grid_pos(at(0, 66, 24, 8))
            .unit("s")
            .with_target(
                query(
                    f"max by (node, device_uuid) (gpuattr_device_idle_seconds{{{NODE}}})",
                    "A",
                    instant=True,
                )
            )
            .with_target(
                query(
                    f"max by (node, device_uuid, alert) (gpuattr_device_open_alerts{{{NODE}}})",
                    "B",
                    instant=True,
                )
            ),
            {"A": "idle for", "B": None},
        )
    ]


def stack() -> list[Any]:
    """Each node's GPU Operator stack (its node-status, as the worker judges it): how many nodes
    are broken, the stack-broken alerts open, and which planes broke over time. Every query
    answers 0 where no node is judged (``or on() vector(0)``): a cluster without the GPU Operator
    has no node-status at all. The per-node line, broken boundary first, is in ``gpuattr top``
    and the query API."""
    broken = f'max by (node) (gpuattr_node_stack_state{{state="broken", {NODE}}})'
    alert = f"max by (node) (gpuattr_node_stack_alert_open{{{NODE}}})"
    stats = [
        ("Nodes whose GPU stack is broken", f"count({broken} == 1) or on() vector(0)", "red"),
        (
            "Open stack-broken alerts (GPUs held)",
            f"count({alert} == 1) or on() vector(0)",
            "orange",
        ),
    ]
    panels: list[Any] = [
        stat.Panel()
        .title(title)
        .description(
            "A node's stack is broken when a plane the GPU Operator was meant to run there "
            "(ClusterPolicy and the node's nvidia.com/gpu.deploy.* labels) is not ready at its "
            "own boundary; a plane disabled on purpose never counts. The stack-broken alert is "
            "open while such a node has GPUs held."
        )
        .datasource(DS)
        .with_target(query(expr, "A", title))
        .grid_pos(at(6 * i, 75, 6, 4))
        .color_mode(BigValueColorMode.BACKGROUND)
        .graph_mode(BigValueGraphMode.AREA)
        .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]))
        .thresholds(
            ThresholdsConfig()
            .mode(ThresholdsMode.ABSOLUTE)
            .steps([Threshold(color="green", value=None), Threshold(color=color, value=1.0)])
        )
        for i, (title, expr, color) in enumerate(stats)
    ]
    states = (
        timeseries.Panel()
        .title("Nodes by GPU stack state, and broken planes")
        .description(
            "Nodes in each stack state (ready, broken, reconciling: a MIG reconfiguration, "
            "disabled: every plane off on purpose, unknown), and how many nodes have each plane "
            "broken at its own boundary (a plane waiting on a lower broken one is not counted: "
            "the lowest is the one to fix)."
        )
        .datasource(DS)
        .grid_pos(at(12, 75, 12, 8))
        .legend(
            VizLegendOptions()
            .display_mode(LegendDisplayMode.LIST)
            .placement(LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .with_target(
            query(
                "count by (state) "
                f"(max by (node, state) (gpuattr_node_stack_state{{{NODE}}}) == 1) "
                "or on() vector(0)",
                "A",
                "{{state}}",
            )
        )
        .with_target(
            query(
                "count by (plane) "
                f"(max by (node, plane) (gpuattr_node_plane_broken{{{NODE}}}) == 1) "
                "or on() vector(0)",
                "B",
                "{{plane}} broken",
            )
        )
    )
    return [*panels, states]


def effective() -> list[Any]:
    """Busy versus effective, and health. Busy (GPU_UTIL) is any kernel running;
    effective is SM active (else graphics-engine active), only where dcgm-exporter exports a
    profiling field — never derived from busy, absent where unknown. Both are the device's
    figures; health marks and alerts are joined to the device's holders (who owns the
    failure), never a usage figure."""
    stats = [
        (
            "Effective (>= 15 % SM active)",
            "gpuattr:devices_effective:count",
            "green",
            "Of the active held devices (at or over 5 % busy), those whose effective activity (SM "
            "active, else graphics-engine active) is at or over 15 %, the low-efficiency "
            "alert's default threshold.",
        ),
        (
            "Busy, not effective",
            "gpuattr:devices_ineffective:count",
            "orange",
            "Active held devices whose effective activity is under 15 %: a kernel runs, the "
            "GPU does little (the low-efficiency alert fires once it lasts its window).",
        ),
        (
            "Active, effective unknown",
            "gpuattr:devices_effective_unknown:count",
            "text",
            "Active held devices whose dcgm-exporter exports no profiling field "
            "(DCGM_FI_PROF_SM_ACTIVE, DCGM_FI_PROF_GR_ENGINE_ACTIVE): neither effective nor "
            "not, never counted as 0. The attribution events say why.",
        ),
        (
            "Devices with a health mark",
            f"count(max by (node, device_uuid) (gpuattr_device_health{{{NODE}}}) == 1) "
            "or on() vector(0)",
            "red",
            "Devices hot, throttled, with memory faults or PCIe replays rising, as of their "
            "latest sample.",
        ),
    ]
    panels: list[Any] = [
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .with_target(query(expr, "A", title))
        .grid_pos(at(6 * i, 84, 6, 4))
        .color_mode(BigValueColorMode.BACKGROUND)
        .graph_mode(BigValueGraphMode.AREA)
        .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]))
        .thresholds(
            ThresholdsConfig()
            .mode(ThresholdsMode.ABSOLUTE)
            .steps([Threshold(color=color, value=None)])
        )
        for i, (title, expr, color, description) in enumerate(stats)
    ]
    versus = (
        timeseries.Panel()
        .title("Busy versus effective, per held device")
        .description(
            "Each held device's busy ratio (any kernel running, GPU_UTIL) and its effective "
            "activity (SM active, else graphics-engine active): the whole device's or MIG "
            "instance's figures, never a pod's. A device without an effective line exports no "
            "profiling field: unknown, not 0."
        )
        .datasource(DS)
        .grid_pos(at(0, 88, 12, 8))
        .unit("percentunit")
        .with_target(
            query(
                f"max by (node, device_uuid) (gpuattr_device_utilization_ratio{{{NODE}}}) "
                f"and on (node, device_uuid) {HELD}",
                "A",
                "{{node}} {{device_uuid}} busy",
            )
        )
        .with_target(
            query(
                f"max by (node, device_uuid) (gpuattr_device_effective_ratio{{{NODE}}}) "
                f"and on (node, device_uuid) {HELD}",
                "B",
                "{{node}} {{device_uuid}} effective",
            )
        )
    )
    work = (
        timeseries.Panel()
        .title("Held devices by kind of work")
        .description(
            "tensor (tensor pipes busy), memory-bound (memory interface busy while compute "
            "stays low), compute, light, unknown (no profiling field)."
        )
        .datasource(DS)
        .grid_pos(at(12, 88, 12, 8))
        .with_target(
            query(
                "count by (work) ("
                f"max by (node, device_uuid, work) (gpuattr_device_work{{{NODE}}}) == 1 "
                f"and on (node, device_uuid) {HELD})",
                "A",
                "{{work}}",
            )
        )
    )
    owners = merged(
        table.Panel()
        .title("Health marks of held devices, with their holders")
        .description(
            "Each held device with a reading, each health mark (hot, throttled, memory-fault, "
            "pcie-replays) as of its latest sample: 1 set, 0 clear (a field the exporter does "
            "not export cannot set one); and who holds the device now, from gpu-attribution's "
            "own join: the owner of the failure. The condition alerts (low-efficiency, thermal, "
            "memory-fault, pcie-replays: the worker's, joined to the holders at the time and "
            "never inherited by a later holder) are in the open alerts table. Where the kubelet "
            "(a holder's pod status, its allocatable list) or a DRA taint speaks for a device, "
            "each source's word is "
            "a row of its own: 1 unhealthy, 0 healthy, absent when it cannot tell (DCGM's "
            "beside them; the device-unhealthy alert fires on any 1)."
        )
        .datasource(DS)
        .grid_pos(at(0, 96, 24, 8))
        .with_target(
            query(
                f"max by (node, device_uuid, mark) (gpuattr_device_health{{{NODE}}}) "
                f"and on (node, device_uuid) {HELD}",
                "A",
                instant=True,
            )
        )
        .with_target(
            query(
                f"max by ({HOLDER_ID}) (gpuattr_device_holder_info{{{NODE}}}) "
                "and on (node, device_uuid) "
                f"max by (node, device_uuid) (gpuattr_device_health{{{NODE}}})",
                "B",
                instant=True,
            )
        )
        .with_target(
            query(
                f"max by (node, device_uuid, source) (gpuattr_device_source_unhealthy{{{NODE}}}) "
                f"and on (node, device_uuid) {HELD}",
                "C",
                instant=True,
            )
        ),
        {"A": "set (1) or clear (0)", "B": None, "C": "source says unhealthy (1) or healthy (0)"},
    )
    return [*panels, versus, work, owners]


def demand() -> list[Any]:
    """Pods waiting for GPUs, per pool: a resource, and the product or MIG profile a
    pod asks for. Whole fleet (pools have no node). Waiting pods and GPUs requested add up across
    pools; allocated and idle GPUs overlap (a device of a product is in its product's pool and in
    the any-product pool), so they are shown per pool, never summed. Every query answers 0 where
    nobody waits (``or on() vector(0)``). Which pods wait, and which pods hold the idle GPUs, are
    in ``gpuattr top`` and ``/api/v1/demand``: no pod is a label."""
    waiting_while_idle = (
        "count(((max by (pool) (gpuattr_pool_pending_pods) "
        "+ max by (pool) (gpuattr_pool_queued_workloads)) > 0) "
        "and on (pool) (max by (pool) (gpuattr_pool_idle_gpus) > 0)) or on() vector(0)"
    )
    stats = [
        ("Pods waiting for GPUs", "gpuattr:pods_pending:count", "orange", ""),
        ("Kueue Workloads queued for quota", "gpuattr:workloads_queued:count", "orange", ""),
        ("Oldest wait", "max(gpuattr_pool_oldest_wait_seconds) or on() vector(0)", "orange", "s"),
        ("Pools waiting while GPUs idle", waiting_while_idle, "red", ""),
    ]
    panels: list[Any] = []
    for i, (title, expr, color, unit) in enumerate(stats):
        panel = (
            stat.Panel()
            .title(title)
            .description(
                "Pods the scheduler has not placed that ask for GPUs (device-plugin resources or "
                "DRA claims), and Kueue Workloads not admitted (no pods yet: they wait for "
                "quota), counted per pool; the oldest wait is since creation (a Workload's: or its "
                "requeue). A pool waits while idle when either waits for it and allocated GPUs of "
                "the same pool are measured idle (usage unknown is never idle)."
            )
            .datasource(DS)
            .with_target(query(expr, "A", title))
            .grid_pos(at(3 * i, 105, 3, 8))
            .color_mode(BigValueColorMode.BACKGROUND)
            .graph_mode(BigValueGraphMode.AREA)
            .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]))
            .thresholds(
                ThresholdsConfig()
                .mode(ThresholdsMode.ABSOLUTE)
                .steps([Threshold(color="green", value=None), Threshold(color=color, value=1.0)])
            )
        )
        panels.append(panel.unit(unit) if unit else panel)
    by_pool = (
        timeseries.Panel()
        .title("GPUs requested and allocated GPUs idle, by pool")
        .description(
            "Per pool: GPUs (or MIG instances) its waiting pods ask for, and of its allocated "
            "GPUs those measured idle. Both high at once is the waste this row is for: demand "
            "the scheduler cannot place while GPUs it could have had sit idle."
        )
        .datasource(DS)
        .grid_pos(at(12, 105, 12, 8))
        .legend(
            VizLegendOptions()
            .display_mode(LegendDisplayMode.LIST)
            .placement(LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .with_target(
            query(
                "max by (pool) (gpuattr_pool_gpus_requested) or on() vector(0)",
                "A",
                "{{pool}} requested",
            )
        )
        .with_target(
            query(
                "max by (pool) (gpuattr_pool_idle_gpus) or on() vector(0)",
                "B",
                "{{pool}} allocated idle",
            )
        )
    )
    return [*panels, by_pool]


def build() -> dict[str, Any]:
    dashboard = (
        Dashboard("GPU attribution")
        .uid(UID)
        .description(
            "Who holds which GPU, what each GPU does, which allocated GPUs sit idle, and where "
            "dcgm-exporter's pod labels misattribute: from gpu-attribution's workers."
        )
        .tags(["gpu", "gpu-attribution", "kubernetes"])
        .editable()
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .with_variable(DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(
            QueryVariable("node")
            .label("Node")
            .datasource(DS)
            .query("label_values(gpuattr_device_info, node)")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )
        .with_variable(
            QueryVariable("namespace")
            .label("Namespace (holders)")
            .datasource(DS)
            .query("label_values(namespace_workload:gpuattr_gpus_held:sum, namespace)")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )
    )
    sections = [
        ("Fleet funnel", funnel()),
        ("Shared GPUs: who holds what", shared_devices()),
        ("Held GPUs without a reading", blind()),
        ("GPU-hours held (chargeback)", gpu_hours()),
        ("dcgm-exporter misattribution over time", misattribution()),
        ("Idle allocated GPUs", idle()),
        ("GPU Operator stack per node", stack()),
        ("Busy versus effective, and health", effective()),
        ("Pods waiting for GPUs while allocated GPUs idle", demand()),
    ]
    ids = iter(range(1, 1000))
    for title, panels in sections:
        dashboard = dashboard.with_row(Row(title).id(next(ids)))
        for panel in panels:
            dashboard = dashboard.with_panel(panel.id(next(ids)))
    encoded: dict[str, Any] = json.loads(json.dumps(dashboard.build(), cls=JSONEncoder))
    return encoded


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


HERE = Path(__file__).resolve().parent
#: the dashboard's two copies: for `kubectl apply -k deploy/grafana` and for the chart
OUTPUTS = (HERE / "gpuattr.json", HERE.parent / "helm" / "gpuattr" / "files" / "gpuattr.json")

if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        text = render()
        for path in OUTPUTS:
            path.write_text(text)
    else:
        sys.stdout.write(render())
