"""THE metric table: every metric the exporter serves, assembled once from the registered features.

Each feature registers its rows (``exporter.registry.Feature``): name, type, unit, help, labels,
where the value comes from (for the docs) and a typed accessor on the feature's snapshot part.
The collector, the renderer and ``docs/metrics.md`` are all generated from ``METRICS``; to find
where a metric comes from, start at the feature that registers it:

- ``exporter`` and ``gpu``: ``exporter.sampling.gpu_metrics`` (the sampler and every per-GPU reading)
- ``history``: ``exporter.history.metrics``
- ``process``: ``exporter.scrape.process_metrics`` (prometheus_client's ProcessCollector)
- ``mig``: ``exporter.sampling.mig_metrics`` (MIG instances; no series for a GPU not in MIG mode)
- ``jobs``: ``exporter.sampling.job_metrics``
- ``slurm``: ``exporter.slurm.metrics``
- ``idle``: ``exporter.slurm.idle_metrics`` (idle Slurm jobs acted on, opt-in)
- ``bench``: ``exporter.benchmarks.metrics``
- ``scaling``: ``exporter.benchmarks.scaling_metrics`` (gpuledger scaling's results in the history)
"""

from __future__ import annotations

from typing import Any

from exporter.benchmarks import metrics as bench
from exporter.benchmarks import scaling_metrics as scaling
from exporter.history import metrics as history
from exporter.registry import Feature, MetricDef, assemble
from exporter.sampling import gpu_metrics, job_metrics, mig_metrics
from exporter.scrape import process_metrics
from exporter.slurm import idle_metrics as idle
from exporter.slurm import metrics as slurm

FEATURES: tuple[Feature[Any], ...] = (
    gpu_metrics.SAMPLER,
    history.FEATURE,
    process_metrics.FEATURE,
    gpu_metrics.GPU,
    mig_metrics.FEATURE,
    job_metrics.FEATURE,
    slurm.FEATURE,
    idle.FEATURE,
    bench.FEATURE,
    scaling.FEATURE,
)
"""Every feature, in the order of the table (and of the exposition)."""

METRICS: tuple[MetricDef, ...] = assemble(FEATURES)
BY_NAME: dict[str, MetricDef] = {m.name: m for m in METRICS}
