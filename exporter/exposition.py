"""Render a snapshot as Prometheus text (0.0.4) or OpenMetrics, straight from the metric table.

prometheus_client renders the same families (``collector.SnapshotCollector``), but its
OpenMetrics path takes ~6 ms for 8 GPUs on this project's machines; this renderer takes a small
fraction of that, and a test holds its output byte-identical to prometheus_client's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.utils import floatToGoString

from exporter.metrics import METRICS, MetricDef
from exporter.state import GpuSnapshot, Snapshot

TEXT = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def _esc_label(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _esc_help(v: str, openmetrics: bool) -> str:
    v = v.replace("\\", r"\\").replace("\n", r"\n")
    return v.replace('"', r"\"") if openmetrics else v


def _labels(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    if not names:
        return ""
    pairs = sorted(zip(names, values, strict=True))
    return "{" + ",".join(f'{k}="{_esc_label(v)}"' for k, v in pairs) + "}"


def _samples(m: MetricDef, s: Snapshot) -> Iterator[tuple[str, float]]:
    targets: list[tuple[GpuSnapshot | None, tuple[str, ...]]] = (
        [(g, (str(g.info.index), g.info.uuid)) for g in s.gpus] if m.per_gpu else [(None, ())]
    )
    for g, base in targets:
        value = m.value(s, g)
        if value is None:
            continue
        items = value.items() if isinstance(value, Mapping) else [((), value)]
        for extra, v in items:
            if v is not None:
                yield _labels(m.labels, base + tuple(extra)), float(v)


def render(s: Snapshot, openmetrics: bool = False) -> bytes:
    out: list[str] = []
    for m in METRICS:
        samples = list(_samples(m, s))
        if not samples:
            continue
        if openmetrics:
            fam = m.family
            out.append(f"# HELP {fam} {_esc_help(m.help, True)}\n# TYPE {fam} {m.kind}\n")
            if m.unit:
                out.append(f"# UNIT {fam} {m.unit}\n")
        else:
            kind = "gauge" if m.kind == "info" else m.kind
            out.append(f"# HELP {m.name} {_esc_help(m.help, False)}\n# TYPE {m.name} {kind}\n")
        out.extend(f"{m.name}{labels} {floatToGoString(v)}\n" for labels, v in samples)  # type: ignore[no-untyped-call]
    if openmetrics:
        out.append("# EOF\n")
    return "".join(out).encode()
