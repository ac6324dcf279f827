"""The attribution series (:mod:`streams.core.promseries`) rendered by prometheus_client, for the
worker's ``/metrics`` beside its own metrics: built at scrape time from the devices it owns."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streams.core.promseries import families
from streams.core.views import DeviceRow


class _Rows(Collector):
    def __init__(self, rows: Iterable[DeviceRow]) -> None:
        self.rows = rows

    def collect(self) -> Iterator[Metric]:
        for family in families(self.rows):
            labels = [k for k, _ in family.samples[0][0]] if family.samples else []
            gauge = GaugeMetricFamily(family.name, family.help, labels=labels)
            for sample_labels, value in family.samples:
                gauge.add_metric([v for _, v in sample_labels], value)
            yield gauge


def exposition(rows: Iterable[DeviceRow]) -> bytes:
    """The attribution series in Prometheus text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Rows(list(rows)))
    return generate_latest(registry)
