"""Generate docs/metrics.md from the metric table: ``python -m exporter.metricsdoc > docs/metrics.md``."""

from __future__ import annotations

import sys

from exporter.metrics import METRICS

HEADER = """# Metrics

Generated from `exporter/metrics.py` by `python -m exporter.metricsdoc > docs/metrics.md`;
a test fails when this file is stale. Per-GPU metrics carry `gpu` (index) and `uuid`;
identity details live on `gpuledger_gpu_info` only, so join on them:
`... * on (gpu, uuid) group_left (model, hostname) gpuledger_gpu_info`.

**Utilisation without aliasing.** The `*_seconds_total` counters grow by the sampler's own
integration (1 s by default, from the sub-second samples buffer where NVML has one), so
`rate(gpuledger_gpu_busy_seconds_total[w]) / rate(gpuledger_gpu_sampled_seconds_total[w])` is the
exact mean over any window `w`, whatever the scrape interval. Divide by the `sampled` rate, not by
wall time: it excludes the time a GPU was lost or unreadable.

| metric | type | unit | labels | help | source |
|---|---|---|---|---|---|
"""


def render() -> str:
    rows = []
    for m in METRICS:
        labels = ", ".join(f"`{x}`" for x in m.labels) or "—"
        rows.append(f"| `{m.name}` | {m.kind} | {m.unit or '—'} | {labels} | {m.help} | {m.source} |")
    return HEADER + "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
