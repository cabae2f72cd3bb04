"""NVIDIA dcgm-exporter's series in the shapes real clusters store them, with the exact truth they
hold, for tests of the dcgm source.

The shapes are modelled from dcgm-exporter's own source (NVIDIA/dcgm-exporter:
internal/pkg/rendermetrics, hostname, transformation/kubernetes.go and hpc.go, collector,
etc/default-counters.csv, the Helm chart) and from how Prometheus stores a scrape (a
kube-prometheus-stack ServiceMonitor, or a bare-metal static target):

- ``model``: the physical model (nodes, GPUs, MIG layouts, exporters over time, holders, scrapes);
- ``activity`` and ``simulate``: what each device-instance reads at each scrape, power and energy;
- ``labels``: a scrape's label sets (copies per Slurm job or time-sliced pod, ``exported_*``);
- ``kubernetes`` and ``slurm``: the two ready-made fleets;
- ``fleet``: the fleet, its series (dcgm-exporter's, ``up``, the scheduler's job records) and writers;
- ``truth``: the exact figures over a window, from the model, independent of any source.

Deterministic for a seed; no wall clock.
"""

from __future__ import annotations

from analytics.synthetic_dcgm.fleet import DcgmFleet, JobRecord
from analytics.synthetic_dcgm.kubernetes import kubernetes_fleet
from analytics.synthetic_dcgm.model import (
    Exporter,
    Gpu,
    Holder,
    Instance,
    Layout,
    Node,
    Pod,
    Scrape,
    SlurmJob,
    Span,
)
from analytics.synthetic_dcgm.slurm import slurm_fleet
from analytics.synthetic_dcgm.truth import GpuFigures, HolderFigures, StallRule, Truth
from analytics.synthetic_dcgm.write import escape

__all__ = [
    "DcgmFleet",
    "Exporter",
    "Gpu",
    "GpuFigures",
    "Holder",
    "HolderFigures",
    "Instance",
    "JobRecord",
    "Layout",
    "Node",
    "Pod",
    "Scrape",
    "SlurmJob",
    "Span",
    "StallRule",
    "Truth",
    "escape",
    "generate",
    "kubernetes_fleet",
    "slurm_fleet",
]


def generate(
    start: float,
    days: float,
    interval: float = 30.0,
    seed: int = 7,
    cluster: str = "",
    nodes: tuple[str, ...] | None = None,
) -> DcgmFleet:
    """The Kubernetes fleet (``kubernetes_fleet``), as callers of the first generator use it."""
    return kubernetes_fleet(start, days, interval, seed, cluster, nodes)
