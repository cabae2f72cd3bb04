"""A prometheus_client collector over the snapshot: for embedding the exporter's metrics in another
registry, and the reference that the fast renderer (``exporter.scrape.render``) is tested against."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from exporter.registry import MetricDef, samples
from exporter.scrape.render import go_float
from exporter.scrape.table import METRICS
from exporter.snapshot import Histogram, Snapshot


class SnapshotCollector(Collector):
    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self._snapshot()
        for m in METRICS:
            fam = _family(m)
            for labels, v in samples(m, s):
                if isinstance(fam, InfoMetricFamily):
                    fam.add_metric(labels, {})
                elif isinstance(fam, HistogramMetricFamily) and isinstance(v, Histogram):
                    buckets = [(go_float(u), float(c)) for u, c in zip(v.uppers, v.cumulative, strict=True)]
                    fam.add_metric(labels, [*buckets, ("+Inf", float(v.count))], v.sum)
                elif not isinstance(v, Histogram):
                    fam.add_metric(labels, v)  # type: ignore[attr-defined]
            if fam.samples:
                yield fam


def _family(m: MetricDef) -> Metric:
    if m.kind == "counter":
        return CounterMetricFamily(m.family, m.help, labels=m.labels, unit=m.unit)
    if m.kind == "info":
        return InfoMetricFamily(m.family, m.help, labels=m.labels)
    if m.kind == "histogram":
        return HistogramMetricFamily(m.family, m.help, labels=m.labels, unit=m.unit)
    return GaugeMetricFamily(m.family, m.help, labels=m.labels, unit=m.unit)
