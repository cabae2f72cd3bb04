"""``gpuledger job ID``: one job's figures, like Slurm's ``seff`` with money: its row of a report
over a window around it (first to last minute, in whole hours), so its hours and cost are the
report's own; a verdict in plain words and the scaling advice where benchmarks measured it."""

from __future__ import annotations

from dataclasses import dataclass

from analytics.config import FullSettings
from analytics.report.build import job_key
from analytics.report.model import CostRow
from analytics.sources import Source
from analytics.statements.advice import efficiencies, scaling_advice
from analytics.statements.locate import job_span
from analytics.statements.read import read
from domain.week import JobWeek, Window

MOSTLY_IDLE = 0.20  # busy under this share of the charged time: mostly idle
STALLED = 0.10  # stalled over this share: a hang or a spin-wait


class UnknownJob(LookupError):
    """The source has no data of the job."""


class AmbiguousJob(UnknownJob):
    """Several clusters ran a job of this id: ``keys`` are their rows' keys (``cluster:job``)."""

    def __init__(self, job: str, keys: list[str]) -> None:
        super().__init__(job)
        self.keys = keys


@dataclass(frozen=True)
class JobFigures:
    job: str
    user: str
    account: str
    namespace: str
    partition: str
    gpus: int
    start: float  # the job's first minute and the end of its last (epoch seconds)
    end: float
    row: CostRow  # the job's row of the report over ``window``
    window: Window
    currency: str
    verdict: str
    advice: str

    @property
    def idle_share(self) -> float | None:
        """Charged time that was not useful (stalled time included)."""
        r = self.row
        return None if r.sampled_gpu_hours <= 0 else max(0.0, 1 - r.useful_gpu_hours / r.sampled_gpu_hours)

    @property
    def stalled_share(self) -> float | None:
        return stalled_share(self.row)


def stalled_share(r: CostRow) -> float | None:
    """Stalled share of the charged time; None where not measured."""
    if r.stalled_gpu_hours is None or r.sampled_gpu_hours <= 0:
        return None
    return r.stalled_gpu_hours / r.sampled_gpu_hours


def verdict(row: CostRow) -> str:
    """The efficiency verdict in plain words."""
    busy, stalled = row.utilization, stalled_share(row)
    if busy is None:
        return "no utilisation measured"
    if stalled is not None and stalled > STALLED:
        return (
            f"stalled {100 * stalled:.0f} % of its time (busy while the SMs, tensor cores and memory were quiet): "
            "a hang or a spin-wait"
        )
    if busy < MOSTLY_IDLE:
        return (
            f"mostly idle: busy {100 * busy:.0f} % of the time it held its GPUs; ask for fewer or release them sooner"
        )
    return f"kept its GPUs busy ({100 * busy:.0f} %)"


def _matches(j: JobWeek, job: str) -> bool:
    k = j.job
    return job in (k.job_id, job_key(j)) or (not k.job_id and job in (k.pod, f"{k.namespace}/{k.pod}"))


def job_figures(source: Source, job: str, s: FullSettings, now: float) -> JobFigures:
    """The job's figures; UnknownJob where the source has none of it."""
    span = job_span(source, job, now)
    if span is None:
        raise UnknownJob(job)
    start, end = span.window_bounds()
    got = read(source, Window(start, end, f"job-{job}", s.analytics.timezone), s, now=now)
    mine = [j for j in got.data.jobs if _matches(j, job)]
    keys = {job_key(j) for j in mine}
    rows = got.job_rows()
    if len(keys) > 1:
        raise AmbiguousJob(job, sorted(keys))
    if len(keys) != 1 or (key := keys.pop()) not in rows:
        raise UnknownJob(job)
    row = rows[key]
    first = mine[0]
    return JobFigures(
        job=key,
        user=first.job.user,
        account=next((j.account for j in mine if j.account), ""),
        namespace=first.job.namespace,
        partition=next((j.partition for j in mine if j.partition), ""),
        gpus=row.gpus,
        start=span.first,
        end=span.last,
        row=row,
        window=got.data.window,
        currency=got.report.currency,
        verdict=verdict(row),
        advice=scaling_advice(row.gpus, efficiencies(got.report)),
    )
