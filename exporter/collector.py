"""Scrape side: the render cache behind /metrics, and a prometheus_client collector over the
same snapshot (for embedding in another registry, and as the reference the renderer is tested
against)."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from exporter import exposition
from exporter.exposition import go_float
from exporter.metrics import METRICS
from exporter.registry import MetricDef, samples
from exporter.state import Histogram, Snapshot


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


class Exposition:
    """Renders the latest snapshot once per (snapshot, format, compression) and serves the
    cached bytes to every scrape after that. ``prepare`` renders ahead, in the sampler's thread,
    the variants scraped in the last ``ahead_seconds``, so a scrape finds its bytes ready."""

    def __init__(self, snapshot: Callable[[], Snapshot], ahead_seconds: float = 300.0) -> None:
        self._snapshot = snapshot
        self._ahead = ahead_seconds
        self._lock = threading.Lock()
        self._cache: dict[tuple[bool, bool], tuple[int, bytes]] = {}
        self._asked: dict[tuple[bool, bool], float] = {}

    def render(self, accept: str | None, gzip_ok: bool) -> tuple[bytes, str]:
        """(body, content type) for a scrape with this Accept header."""
        om = wants_openmetrics(accept)
        key = (om, gzip_ok)
        self._asked[key] = time.monotonic()
        snap = self._snapshot()
        hit = self._cache.get(key)
        if hit is None or hit[0] != snap.seq:
            with self._lock:
                hit = self._cache.get(key)
                if hit is None or hit[0] != snap.seq:
                    hit = self._cache[key] = (snap.seq, _encode(snap, om, gzip_ok))
        return hit[1], exposition.OPENMETRICS if om else exposition.TEXT

    def prepare(self, snap: Snapshot) -> None:
        """Render ``snap`` in every variant scraped recently (called after each sampling round)."""
        now = time.monotonic()
        with self._lock:
            for key, asked in list(self._asked.items()):
                if now - asked <= self._ahead:
                    self._cache[key] = (snap.seq, _encode(snap, *key))


def _encode(snap: Snapshot, om: bool, gzip_ok: bool) -> bytes:
    body = exposition.render(snap, openmetrics=om)
    return gzip.compress(body, compresslevel=5) if gzip_ok else body


def wants_openmetrics(accept: str | None) -> bool:
    return any(part.strip().startswith("application/openmetrics-text") for part in (accept or "").split(","))
