"""Scrape side: a prometheus_client collector over the latest snapshot, and a render cache.

The sampler publishes at most one snapshot per tick; every scrape of the same snapshot gets
the same bytes, rendered once per (snapshot, format, compression).
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from exporter.metrics import METRICS, MetricDef, Value
from exporter.state import Snapshot


class SnapshotCollector(Collector):
    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self._snapshot()
        for m in METRICS:
            fam = _family(m)
            if m.per_gpu:
                for g in s.gpus:
                    _add(fam, m.value(s, g), (str(g.info.index), g.info.uuid))
            else:
                _add(fam, m.value(s, None), ())
            if fam.samples:
                yield fam


def _family(m: MetricDef) -> Metric:
    if m.kind == "counter":
        return CounterMetricFamily(m.family, m.help, labels=m.labels, unit=m.unit)
    if m.kind == "info":
        return InfoMetricFamily(m.family, m.help, labels=m.labels)
    return GaugeMetricFamily(m.family, m.help, labels=m.labels, unit=m.unit)


def _add(fam: Metric, value: Value, base: tuple[str, ...]) -> None:
    if value is None:
        return
    items: Iterable[tuple[tuple[str, ...], float | None]] = (
        value.items() if isinstance(value, Mapping) else [((), value)]
    )
    for extra, v in items:
        if v is None:
            continue
        labels = base + tuple(extra)
        if isinstance(fam, InfoMetricFamily):
            fam.add_metric(labels, {})
        else:
            fam.add_metric(labels, float(v))  # type: ignore[attr-defined]


class Exposition:
    """Renders the registry for a snapshot once and serves the cached bytes after that."""

    def __init__(self, snapshot: Callable[[], Snapshot], *, process_metrics: bool = True) -> None:
        self._snapshot = snapshot
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(snapshot))
        if process_metrics:
            ProcessCollector(registry=self.registry)
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, bool], tuple[int, bytes]] = {}

    def render(self, accept: str | None, gzip_ok: bool) -> tuple[bytes, str]:
        """(body, content type) for a scrape with this Accept header."""
        encoder, content_type = choose_encoder(accept or "")
        key = (content_type, gzip_ok)
        seq = self._snapshot().seq
        hit = self._cache.get(key)
        if hit is not None and hit[0] == seq:
            return hit[1], content_type
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] == seq:
                return hit[1], content_type
            body = encoder(self.registry)
            if gzip_ok:
                body = gzip.compress(body, compresslevel=5)
            self._cache[key] = (seq, body)
        return body, content_type
