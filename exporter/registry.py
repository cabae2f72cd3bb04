"""How a feature registers its metric rows, in the manner of node_exporter's collectors.

A feature (GPU sampling, jobs, the Slurm queue, benchmarks, history, the process itself) owns a
``Feature``: its name, the type of the part it adds to each snapshot, and its rows of the metric
table. Each row says how to take its value from the snapshot, through a typed accessor on the
feature's part. ``exporter.scrape.table`` assembles the one table from the registered features; the
composition root (``exporter.app``) hands the sampler the parts of the features it enabled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from exporter.snapshot import GpuSnapshot, Histogram, Snapshot

Kind = Literal["counter", "gauge", "info", "histogram"]
Value = float | None | Mapping[Any, float | Histogram]
"""A plain value, or label values (beyond gpu/uuid) -> value."""
GPU_LABELS = ("gpu", "uuid")
P = TypeVar("P")


@dataclass(frozen=True)
class MetricDef:
    name: str  # as exposed (counters end in _total, info metrics in _info)
    kind: Kind
    unit: str  # Prometheus base unit, "" for plain counts and states
    help: str
    labels: tuple[str, ...]  # every label, in exposition order
    source: str  # where the value comes from, for docs/metrics.md
    per_gpu: bool
    value: Callable[[Snapshot, GpuSnapshot | None], Value]

    @property
    def family(self) -> str:
        """The family name prometheus_client wants (without _total / _info)."""
        for suffix in ("_total", "_info"):
            if self.kind in ("counter", "info") and self.name.endswith(suffix):
                return self.name[: -len(suffix)]
        return self.name


@dataclass(frozen=True)
class Feature(Generic[P]):
    """One feature's registration: its snapshot part (None: it reads the core snapshot) and its rows."""

    name: str
    part: type[P] | None
    metrics: tuple[MetricDef, ...]


def gpu_row(
    name: str,
    kind: Kind,
    unit: str,
    help: str,
    source: str,
    fn: Callable[[GpuSnapshot], Value],
    extra: tuple[str, ...] = (),
) -> MetricDef:
    """A per-GPU row (labels gpu, uuid and ``extra``)."""
    return MetricDef(
        name, kind, unit, help, GPU_LABELS + extra, source, True, lambda s, g: None if g is None else fn(g)
    )


def row(
    name: str,
    kind: Kind,
    unit: str,
    help: str,
    source: str,
    fn: Callable[[Snapshot], Value],
    labels: tuple[str, ...] = (),
) -> MetricDef:
    """A row of the exporter itself, read from the core snapshot."""
    return MetricDef(name, kind, unit, help, labels, source, False, lambda s, g: fn(s))


def part_row(
    part: type[P],
    name: str,
    kind: Kind,
    unit: str,
    help: str,
    source: str,
    fn: Callable[[P], Value],
    labels: tuple[str, ...] = (),
) -> MetricDef:
    """A row read from one feature's snapshot part; absent while the feature is off."""

    def value(s: Snapshot, g: GpuSnapshot | None) -> Value:
        p = s.part(part)
        return None if p is None else fn(p)

    return MetricDef(name, kind, unit, help, labels, source, False, value)


def assemble(features: Iterable[Feature[Any]]) -> tuple[MetricDef, ...]:
    """The one metric table, from the features' rows in registration order (names unique)."""
    rows = tuple(m for f in features for m in f.metrics)
    seen: set[str] = set()
    for m in rows:
        if m.name in seen:
            raise ValueError(f"metric {m.name} is registered twice")
        seen.add(m.name)
    return rows


def samples(m: MetricDef, s: Snapshot) -> Iterator[tuple[tuple[str, ...], float | Histogram]]:
    """Every (label values, value) of one metric in a snapshot, labels in ``m.labels`` order."""
    targets: list[tuple[GpuSnapshot | None, tuple[str, ...]]] = (
        [(g, (str(g.info.index), g.info.uuid)) for g in s.gpus] if m.per_gpu else [(None, ())]
    )
    for g, base in targets:
        value = m.value(s, g)
        if value is None:
            continue
        items: Iterable[tuple[tuple[str, ...], float | Histogram | None]] = (
            value.items() if isinstance(value, Mapping) else [((), value)]
        )
        for extra, v in items:
            if v is not None:
                yield base + tuple(extra), v if isinstance(v, Histogram) else float(v)
