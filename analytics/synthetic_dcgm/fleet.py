"""A generated fleet: its physical model, its scrapes, the series Prometheus stores from them, and
their exact truth."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from analytics.synthetic_dcgm import write
from analytics.synthetic_dcgm.labels import label_sets, target_labels
from analytics.synthetic_dcgm.model import FIELDS, Exporter, Gpu, Holder, Instance, Node, Scrape, SlurmJob
from analytics.synthetic_dcgm.simulate import lost, scrape_times
from analytics.synthetic_dcgm.truth import StallRule, Truth, compute

JOB_INFO = "gpuledger_slurm_job_info"
SLURMCTL = "slurmctl:10044"  # the target that exports the scheduler's records
SLURMCTL_OFFSET = 5.0
JOB_INFO_AFTER = 600.0  # a job's record stays this long after it ends


@dataclass(frozen=True, slots=True)
class JobRecord:
    """The scheduler's record of a Slurm job: from its first device's start to its last's end."""

    job: SlurmJob
    start: float
    end: float


@dataclass
class DcgmFleet:
    start: float
    end: float
    interval: float
    nodes: tuple[Node, ...]
    cluster: str = ""
    job_info: bool = False  # also write gpuledger_slurm_job_info from slurmctl:10044
    scrapes: dict[str, list[Scrape]] = field(default_factory=dict)  # uuid -> its scrapes, in time order

    @property
    def gpus(self) -> list[Gpu]:
        return [g for n in self.nodes for g in n.gpus]

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def truth(self, start: float, end: float, rule: StallRule | None = None) -> Truth:
        """The exact figures of the scrapes in (start, end]."""
        return compute(self.nodes, self.scrapes, self.interval, start, end, rule or StallRule(), self.cluster)

    def jobs(self) -> list[JobRecord]:
        """Every Slurm job's record, by job id."""
        spans: dict[str, tuple[SlurmJob, float, float]] = {}
        for n in self.nodes:
            for ss in n.holders.values():
                for s in ss:
                    if isinstance(s.holder, SlurmJob):
                        j, a, b = spans.get(s.holder.job_id, (s.holder, s.start, s.end))
                        spans[j.job_id] = (j, min(a, s.start), max(b, s.end))
        return [JobRecord(j, a, b) for j, a, b in sorted(spans.values(), key=lambda x: int(x[0].job_id))]

    # --- series --------------------------------------------------------------------------

    def series(self) -> Iterator[write.Series]:
        """(metric, labels text, samples ascending) of every series stored."""
        yield from self._dcgm()
        yield from self._up()
        if self.job_info:
            yield from self._job_info()

    def _dcgm(self) -> Iterator[write.Series]:
        for node in self.nodes:
            for g in node.gpus:
                cache: dict[tuple[Instance, tuple[Holder, ...], Exporter], list[str]] = {}
                out: dict[tuple[str, str], list[write.Point]] = {}
                for s in self.scrapes[g.uuid]:
                    key = (s.instance, s.holders, s.exporter)
                    texts = cache.get(key)
                    if texts is None:
                        texts = cache[key] = [write.text(x) for x in label_sets(node, g, s, self.cluster)]
                    for metric in node.fields_of(g, s.instance):
                        v = getattr(s, FIELDS[metric])
                        for text in texts:
                            out.setdefault((metric, text), []).append((s.t, v))
                for (metric, text), points in out.items():
                    yield metric, text, points

    def _up(self) -> Iterator[write.Series]:
        """``up`` per target per scrape: 1, or 0 where the scrape failed (a gap; the new exporter
        pod's target while it starts)."""
        for node in self.nodes:
            out: dict[str, list[write.Point]] = {}
            for t in scrape_times(node, self.start, self.end, self.interval):
                text = write.text(sorted(target_labels(node, node.exporter(t), self.cluster).items()))
                out.setdefault(text, []).append((t, 0 if lost(node, t, self.interval) else 1))
            for text, points in out.items():
                yield "up", text, points

    def _job_info(self) -> Iterator[write.Series]:
        target = {"instance": SLURMCTL, "job": "gpuledger"} | ({"cluster": self.cluster} if self.cluster else {})
        grid = self._grid(SLURMCTL_OFFSET)
        yield "up", write.text(sorted(target.items())), [(t, 1) for t in grid]
        for r in self.jobs():
            j = r.job
            labels = target | {
                "job_id": j.job_id,
                "user": j.user,
                "account": j.account,
                "partition": j.partition,
                "qos": j.qos,
            }
            points: list[write.Point] = [(t, 1) for t in grid if r.start <= t <= r.end + JOB_INFO_AFTER]
            if points:
                yield JOB_INFO, write.text(sorted(labels.items())), points

    def _grid(self, offset: float) -> list[float]:
        k = math.ceil((self.start - offset) / self.interval)
        out = []
        while (t := round(offset + k * self.interval, 3)) < self.end:
            out.append(t)
            k += 1
        return out

    # --- output --------------------------------------------------------------------------

    def write_openmetrics(self, path: Path) -> int:
        """For ``promtool tsdb create-blocks-from openmetrics``; returns the number of samples."""
        return write.write_openmetrics(self.series(), path)

    def write_import(self, path: Path) -> int:
        """For VictoriaMetrics' ``/api/v1/import/prometheus`` (millisecond timestamps)."""
        return write.write_import(self.series(), path)
