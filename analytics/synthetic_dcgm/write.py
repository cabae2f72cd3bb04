"""Series to files: OpenMetrics for ``promtool tsdb create-blocks-from openmetrics`` (seconds, each
series' samples together and ascending, ``# EOF`` last) and VictoriaMetrics'
``/api/v1/import/prometheus`` lines (milliseconds)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

Point = tuple[float, float]  # (epoch seconds, value)
Series = tuple[str, str, list[Point]]  # (metric, labels text, samples ascending)


def escape(v: str) -> str:
    """A label value as the text formats (OpenMetrics, Prometheus' import) write it."""
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def text(labels: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels) + "}"


def value(v: float) -> str:
    return str(v) if isinstance(v, int) else f"{v:.12g}"


def write_openmetrics(series: Iterable[Series], path: Path) -> int:
    """Returns the number of samples."""
    n = 0
    with path.open("w") as out:
        for metric, labels, points in series:
            out.writelines(f"{metric}{labels} {value(v)} {t:.3f}\n" for t, v in points)
            n += len(points)
        out.write("# EOF\n")
    return n


def write_import(series: Iterable[Series], path: Path) -> int:
    """Returns the number of samples."""
    n = 0
    with path.open("w") as out:
        for metric, labels, points in series:
            out.writelines(f"{metric}{labels} {value(v)} {round(t * 1000)}\n" for t, v in points)
            n += len(points)
    return n
