"""The attribution series (:mod:`streams.present.promseries`) rendered by prometheus_client, for the
worker's ``/metrics`` beside its own metrics: built at scrape time from the devices (and pools) it
owns. Each family function gives name, help, type and samples; this module only renders them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streams.present.noderows import NodeRow
from streams.present.poolrows import PoolRow
from streams.present.promseries import Family, FamilyType, families
from streams.present.views import DeviceRow

#: the prometheus_client family each of our family types renders as
_RENDER: dict[FamilyType, type[GaugeMetricFamily]] = {"gauge": GaugeMetricFamily}


def _metric(family: Family) -> Metric:
    labels = [k for k, _ in family.samples[0][0]] if family.samples else []
    metric = _RENDER[family.type](family.name, family.help, labels=labels)
    for sample_labels, value in family.samples:
        metric.add_metric([v for _, v in sample_labels], value)
    return metric


class _Rows(Collector):
    def __init__(
        self, rows: Iterable[DeviceRow], nodes: Iterable[NodeRow], pools: Iterable[PoolRow]
    ) -> None:
        self.rows = rows
        self.nodes = nodes
        self.pools = pools

    def collect(self) -> Iterator[Metric]:
        for family in families(self.rows, self.nodes, self.pools):
            yield _metric(family)


def exposition(
    rows: Iterable[DeviceRow], nodes: Iterable[NodeRow] = (), pools: Iterable[PoolRow] = ()
) -> bytes:
    """The attribution series (and the nodes' GPU stack series, and the pools' demand series) in
    Prometheus text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Rows(list(rows), list(nodes), list(pools)))
    return generate_latest(registry)
