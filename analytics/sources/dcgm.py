"""NVIDIA dcgm-exporter's series as a source, for teams that run it and want the analytics alone.

What its data allows, and how (each listed in the report's approximations):
- utilisation: ``avg_over_time(DCGM_FI_DEV_GPU_UTIL)`` over the scrapes: a gauge read every scrape
  interval, so it aliases the way gpuledger's counters avoid;
- time covered: scrapes counted × the scrape interval (``prometheus.dcgm_scrape_interval``);
- SM activity: ``DCGM_FI_PROF_SM_ACTIVE`` where profiling metrics are on;
- energy: ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ), else average power × time covered;
- no allocation, per-job, queue, failure or benchmark figures.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from analytics.config import PrometheusSettings
from analytics.sources import kubernetes
from analytics.sources.base import SourceUnavailable
from analytics.sources.promapi import PromAPI, QueryError, rng
from analytics.week_data import GpuDay, GpuWeek, WeekData, Window, days

UTIL = "DCGM_FI_DEV_GPU_UTIL"

APPROXIMATIONS = (
    "dcgm-exporter: utilisation is the DCGM_FI_DEV_GPU_UTIL gauge averaged over scrapes (aliased)",
    "dcgm-exporter: time covered = scrapes x the configured scrape interval",
    "dcgm-exporter: SM activity from DCGM_FI_PROF_SM_ACTIVE where profiling metrics are enabled",
    "dcgm-exporter: energy from DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, else average power x time",
    "dcgm-exporter: no allocation, per-job, queue, failure or benchmark figures",
)


@dataclass(frozen=True, slots=True)
class _Figures:
    """One GPU's figures over a span, from dcgm-exporter's gauges."""

    sampled: float  # seconds covered: scrapes x the scrape interval
    busy: float
    sm: float | None  # None without profiling metrics
    energy: float | None  # joules: the energy counter, else average power x time covered


def _total(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


class DcgmSource:
    name = "dcgm"

    def __init__(self, settings: PrometheusSettings, api: PromAPI | None = None) -> None:
        self.s = settings
        self.api = api or PromAPI(settings)

    def _by_uuid(self, expr: str, at: float) -> dict[str, float]:
        return {s.labels.get("UUID", ""): s.value for s in self.api.query(expr, at)}

    def _figures(self, start: float, end: float) -> dict[str, _Figures]:
        r = rng(end - start)
        interval = self.s.dcgm_scrape_interval
        count = self._by_uuid(f"sum by (UUID) (count_over_time({UTIL}[{r}]))", end)
        util = self._by_uuid(f"avg by (UUID) (avg_over_time({UTIL}[{r}]))", end)
        sm = self._by_uuid(f"avg by (UUID) (avg_over_time(DCGM_FI_PROF_SM_ACTIVE[{r}]))", end)
        energy = self._by_uuid(f"sum by (UUID) (increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[{r}])) / 1000", end)
        power = self._by_uuid(f"avg by (UUID) (avg_over_time(DCGM_FI_DEV_POWER_USAGE[{r}]))", end)
        out = {}
        for uuid, n in count.items():
            sampled = min(n * interval, end - start)
            out[uuid] = _Figures(
                sampled=sampled,
                busy=util.get(uuid, 0.0) / 100 * sampled,
                sm=sm[uuid] * sampled if uuid in sm else None,
                energy=energy[uuid] if uuid in energy else power[uuid] * sampled if uuid in power else None,
            )
        return out

    def week(self, w: Window, *, jobs: bool = True) -> WeekData:  # dcgm-exporter has no per-job series
        problems: list[str] = []
        labels: dict[str, dict[str, str]] = {}
        try:  # day by day, as the gpuledger source: each query's samples stay bounded
            per_day: list[dict[str, _Figures]] = []  # day -> uuid -> figures
            for day in days(w):
                for series in self.api.query(f"last_over_time({UTIL}[{rng(day.seconds)}])", day.end):
                    labels.setdefault(series.labels.get("UUID", ""), series.labels)
                per_day.append(self._figures(day.start, day.end))
        except QueryError as e:
            raise SourceUnavailable(f"prometheus {self.s.url}: dcgm-exporter series: {e}") from e

        gpus = []
        for uuid in sorted({u for d in per_day for u in d}):
            lab = labels.get(uuid, {})
            mine = [d[uuid] for d in per_day if uuid in d]
            gpus.append(
                GpuWeek(
                    uuid=uuid,
                    host=lab.get("Hostname", lab.get("instance", "")),
                    model=lab.get("modelName", ""),
                    gpu=lab.get("gpu", ""),
                    sampled_s=sum(f.sampled for f in mine),
                    busy_s=sum(f.busy for f in mine),
                    sm_active_s=_total(f.sm for f in mine),
                    allocated_s=None,
                    allocated_idle_s=None,
                    energy_j=_total(f.energy for f in mine),
                    daily=tuple(
                        GpuDay(f.sampled, f.busy, f.energy) if (f := d.get(uuid)) else GpuDay(0.0, 0.0, None)
                        for d in per_day
                    ),
                )
            )
        queue = []
        if self.s.kube_state_metrics:
            try:
                queue = kubernetes.queue_wait(self.api, w)
            except QueryError as e:
                problems.append(f"Kubernetes queue wait: {e}")
        return WeekData(
            w, "dcgm", tuple(gpus), queue=tuple(queue), approximations=APPROXIMATIONS, problems=tuple(problems)
        )
