"""The PCI-bus-id locality check: an exporter's ``pci_bus_id`` labels against the bus ids NVML
gave the node's inventory. UUIDs are anybody's to read; where a GPU sits on the bus is not."""

from __future__ import annotations

import pytest

from contract.inputs import DcgmSample as S
from contract.inputs import DcgmScrape, DeviceInventory, GpuInfo, NodeRecord
from contract.outputs import TelemetryRefused
from streams.core.flow.processor import inventory_of
from streams.core.node.telemetry import pci_address, verify
from tests.unit.test_spine import NODE, T0, new

G0, G1 = "GPU-00000000-aaaa", "GPU-11111111-bbbb"
BUS0, BUS1 = "00000000:3B:00.0", "00000000:86:00.0"
BUSES = {G0: BUS0, G1: BUS1}


def scrape(*rows: tuple[str, str], ts: int = T0) -> DcgmScrape:
    samples = tuple(
        S(NODE, ts, uuid, i, "H100", NODE, pci_bus_id=bus) for i, (uuid, bus) in enumerate(rows)
    )
    return DcgmScrape(NODE, ts, samples, "http://10.1.2.3:9400/metrics", "gpu-operator/e-1")


@pytest.mark.parametrize(
    ("raw", "address"),
    [
        pytest.param("00000000:3B:00.0", "0:3b:0.0", id="nvml"),
        pytest.param("0000:3b:00.0", "0:3b:0.0", id="legacy-lower-case"),
        pytest.param("3B:00.0", "0:3b:0.0", id="no-domain"),
        pytest.param("00000001:3B:00.1", "1:3b:0.1", id="domain-and-function"),
        pytest.param(" Not-A-Bus ", "not-a-bus", id="not-an-address"),
    ],
)
def test_pci_address(raw: str, address: str) -> None:
    assert pci_address(raw) == address


@pytest.mark.parametrize(
    ("rows", "buses", "cause", "accepted"),
    [
        pytest.param(((G0, BUS0), (G1, BUS1)), BUSES, None, 2, id="both-where-nvml-has-them"),
        pytest.param(((G0, "0000:3b:00.0"),), BUSES, None, 1, id="legacy-spelling-agrees"),
        pytest.param(((G0, BUS1), (G1, BUS0)), BUSES, "pci-bus-id", 0, id="swapped"),
        pytest.param(((G0, BUS0), (G1, BUS0)), BUSES, "pci-bus-id", 0, id="one-moved"),
        pytest.param(((G0, ""),), BUSES, None, 1, id="exporter-prints-no-bus-id"),
        pytest.param(((G0, BUS1),), {}, None, 1, id="inventory-without-bus-ids"),
        pytest.param(((G0, BUS1),), {G1: BUS1}, None, 1, id="inventory-lacks-this-gpu"),
    ],
)
def test_bus_ids_must_agree_with_the_inventory(
    rows: tuple[tuple[str, str], ...], buses: dict[str, str], cause: str | None, accepted: int
) -> None:
    verdict = verify(scrape(*rows), frozenset(BUSES), [NODE], buses)
    assert (verdict.cause, len(verdict.accepted)) == (cause, accepted)
    if cause is not None:
        assert len(verdict.refused) == len(rows)  # the whole answer: not this node's exporter
        assert "at PCI bus ids this node's inventory does not have them at" in verdict.reason


def test_an_answer_at_other_bus_ids_is_refused_with_its_reason() -> None:
    """Through the processor: the inventory's NVML bus ids travel with it, and a scrape naming
    the node's GPU UUIDs at other bus ids is a ``telemetry.refused`` record, cause and reason."""
    proc = new()
    inventory = DeviceInventory(
        NODE, T0, "nvml", (GpuInfo(0, G0, "H100", BUS0), GpuInfo(1, G1, "H100", BUS1))
    )
    proc.handle(NodeRecord(NODE, T0, ()), 0)
    proc.handle(inventory, 0)
    out = proc.handle(scrape((G0, BUS1), ts=T0 + 1000), 0)
    (refused,) = [o for o in out if isinstance(o, TelemetryRefused)]
    assert (refused.cause, refused.uuids, refused.rows) == ("pci-bus-id", (G0,), 1)
    assert f"{G0} at {BUS1}, not {BUS0}" in refused.reason


def test_inventory_of_keeps_nvml_bus_ids() -> None:
    record = DeviceInventory(NODE, T0, "nvml", (GpuInfo(0, G0, "H100", BUS0), GpuInfo(1, G1)))
    assert inventory_of(record).pci_buses == {G0: BUS0}
