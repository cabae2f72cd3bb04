"""Generate docs/metrics.md from the metric tables: ``python -m gpuledger.metricsdoc > docs/metrics.md``."""

from __future__ import annotations

import sys

from analytics.metrics import families
from exporter.scrape.table import METRICS

HEADER = """# Metrics

Generated from the exporter's one metric table (`exporter/scrape/table.py`, assembled from each
feature's registered rows: the `source` column says where a value comes from) and
`analytics/metrics.py` by `python -m gpuledger.metricsdoc > docs/metrics.md`;
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
    out = [HEADER, "\n".join(rows), "\n", ANALYTICS]
    for f in families():
        shown = ", ".join(f"`{x}`" for x in f.labels) or "—"
        out.append(f"| `{f.name}` | {f.kind} | {shown} | {f.help} |\n")
    return "".join(out)


ANALYTICS = """
## Analytics daemon (`gpuledger analytics`, `gpuledger up`; port 10045)

The latest reports as gauges: `window="week"` is the last weekly report, `window="rolling_7d"` the
7 days up to the last refresh (`[analytics] refresh_minutes`, hourly by default). Rows carry `group`
and `key`: `group` is fleet, host, model, unallocated, or one of `[analytics] group_by` (user,
namespace, account, partition, qos, cluster, `label:<name>`), each of those its top
`group_top_n` keys by total cost and one `(other)` row summing the rest;
per-GPU and per-job figures stay in the report files (they would multiply the series). Money is in
the currency of `gpuledger_report_info`. The prices let dashboards cost live data, e.g. the energy
cost rate of a host: `sum by (instance) (rate(gpuledger_gpu_energy_joules_total[5m])) / 3.6e6 *
on() group_left gpuledger_price_pue * on() group_left gpuledger_price_energy_kwh` (per hour: × 3600).

| metric | type | labels | help |
|---|---|---|---|
"""


if __name__ == "__main__":
    sys.stdout.write(render())
