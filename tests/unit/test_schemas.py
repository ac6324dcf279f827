"""Output schemas: committed files are current, and real payloads validate against them."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import orjson
import pytest

from contract import codec
from contract.delivery import DeliveryFailure
from contract.inputs import (
    ClockTick,
    DcgmSample,
    DeviceUsage,
    ExporterClaim,
    GpuRequest,
    NodeSupply,
    OperandPods,
    OwnerRef,
    PendingPod,
    PodUsage,
    SupplyDevice,
    SupplyHolder,
)
from contract.inputs import DeviceAssignment as A
from contract.outputs import DeadLetter, OutputRefused, Telemetry, TelemetryRefused
from contract.records import replace
from contract.schemas import OUTPUTS, file_name, json_schema
from infra.settings import AlertSettings
from streams.core.alerts.alerts import step
from streams.core.devices.attribution import DeviceContext, DeviceFacts, attribute, describe
from streams.core.flow.demandstage import DemandStage, DemandTables
from streams.core.stack.operatorstack import node_status

FOLDER = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = orjson.loads((FOLDER / file_name(kind)).read_bytes())
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("kind", list(OUTPUTS))
def test_committed_schema_is_current(kind: str) -> None:
    committed = orjson.loads((FOLDER / file_name(kind)).read_bytes())
    assert committed == json_schema(kind), "run: python -m contract.schemas"


def test_real_payloads_validate_and_broken_ones_do_not() -> None:
    sample = DcgmSample(
        node="n",
        ts_ms=1,
        uuid="GPU-1",
        gpu_index=0,
        model="A100",
        hostname="n",
        util_pct=0.0,
        fb_used_mib=10.0,
        exporter_claims=(ExporterClaim("ns", "ghost", "c"),),
    )
    event, flags = attribute(
        sample, [A("ns", "p", "c", "nvidia.com/gpu", "GPU-1")], DeviceContext()
    )
    shared_reading = DeviceUsage(
        "exporter",
        pods=(PodUsage("0c9d8e7f-6a5b-4c3d-9e2f-1a0b9c8d7e6f", "ns", "ghost", "c", 9, 1),),
    )
    measured, uncredited = attribute(
        replace(sample, usage=shared_reading),
        [A("ns", "p", "c", "nvidia.com/gpu", "GPU-1")],
        DeviceContext(),
    )
    assert measured.per_pod is not None
    state, alerts = None, []
    for ts in range(0, 40_000, 5_000):  # idle past a 10 s window: a firing alert
        state, fired = step(state, replace(event, ts_ms=ts), AlertSettings(idle_window_s=10))
        alerts += fired
    assert alerts
    spine = describe(
        DeviceFacts("n", "GPU-2", 1, "A100"),
        1,
        [A("ns", "q", "c", "nvidia.com/gpu", "GPU-2")],
        DeviceContext(),
        "heartbeat",
        Telemetry("unknown", "exporter-unreachable", "dcgm-exporter failing since …", 0),
    )
    refused = TelemetryRefused(
        "n", 1, "hostname", "reports Hostname other", "other", "http://x", ("GPU-9",), 1
    )
    stack = node_status(
        "n",
        1,
        {"nvidia.com/gpu.deploy.dcgm-exporter": "false", "nvidia.com/mig.config": "all-disabled"},
        None,
        OperandPods("n", 1, "gpu-operator", ()),
    )
    demand = DemandStage(DemandTables(), 10.0)
    gpu = b"nvidia.com/gpu"
    holder = SupplyHolder("ns", "hog", "uid-hog", "Deployment/hog")
    supply = SupplyDevice("GPU-3", "NVIDIA-A100-SXM4-80GB", "", 0, (holder,))
    waiting = PendingPod(
        1,
        "ns",
        "w",
        "uid-w",
        0,
        (GpuRequest("nvidia.com/gpu", 1),),
        workload=OwnerRef("Deployment", "inference"),
        scheduled_status="False",
        scheduled_reason="Unschedulable",
        scheduled_message="0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
    )
    pools = [
        *demand.handle(NodeSupply(0, "n", "nvidia.com/gpu", (supply,)), 0, gpu),
        *demand.handle(waiting, 0, gpu),
        *demand.handle(ClockTick(0, 10_000), 0, None),  # a demand-while-idle alert
    ]
    assert {type(r).__name__ for r in pools} == {"PoolDemand", "Alert"}
    records = [
        *pools,
        event,
        stack,
        spine,
        *flags,
        *uncredited,
        measured,
        refused,
        *alerts,
        DeadLetter("t", 0, 1, "k", "not JSON", "AA==", 1),
        OutputRefused("gpuattr.flags", 3, "gpu-a", 1_120_000, 1_000_000, "too-large", "", 1),
        DeliveryFailure("idle-1", "webhook", 8, "HTTP 500", "{}", 0, 3, 1),
    ]
    assert {codec.kind_of(r).kind for r in records} == set(OUTPUTS)
    for record in records:
        payload = orjson.loads(codec.encode(record))
        validator(payload["schema"]).validate(payload)
        broken = {**payload, "ts_ms": "yesterday"}
        assert not validator(payload["schema"]).is_valid(broken)
