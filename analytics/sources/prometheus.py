"""gpuledger's own series in Prometheus (or Thanos, VictoriaMetrics, Mimir) as a source.

Its GPU and job figures; the rest (queue, failures, benchmarks, Slurm records, pod labels, the
history's start) is ``analytics.sources.promql``'s, which dcgm-exporter's source shares.
Aggregation happens in PromQL, summed by GPU, so 1,024 GPUs cost the same queries as one (a
fixed number for a week: ``bench/report_scale.py`` counts them). GPU counters: their values at
the day boundaries (``analytics.sources.counters``: exact, one sample per series read,
``increase()`` only where a counter reset or a series is missing); per-job counters, whose
series begin and end inside the window: ``increase(...[day])``. The days add up to the window
and are the daily figures too. Hourly energy (for time-of-day tariffs) is one range query. Only
plain PromQL and the query/query_range endpoints are used.

Where the rollup rules run (``deploy/prometheus/rules/gpuledger-rollups.yml`` and
``gpuledger-rollups-1h.yml``) and cover the window, GPU and job counters are read from them instead
(``analytics.sources.rollups``): each day the sum of its hourly buckets and the 5-minute ones at its
edges, no raw sample decoded; the report's approximations say which. All give the same figures on
the same data (``tests/analytics/test_rollups.py``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from analytics.config import PrometheusSettings
from analytics.sources import counters, rollups
from analytics.sources.base import GpuFigures, JobFigures, SourceUnavailable, Span, energy_measure, mig_busy_measure
from analytics.sources.promanswer import QueryError
from analytics.sources.promapi import PromAPI, label_value, rng
from analytics.sources.promql import JOB_LOOKBACK_DAYS, RECORD_ROLLUPS, PromQLSource
from domain.jobs import JobKey
from domain.week import GpuDay, GpuWeek, JobWeek, Window, days, job_clusters

GPU_COUNTERS = {
    "sampled": "gpuledger_gpu_sampled_seconds_total",
    "busy": "gpuledger_gpu_busy_seconds_total",
    "sm": "gpuledger_gpu_sm_active_seconds_total",
    "alloc": "gpuledger_gpu_allocated_seconds_total",
    "idle": "gpuledger_gpu_allocated_idle_seconds_total",
    "energy": "gpuledger_gpu_energy_joules_total",
    "stalled": "gpuledger_gpu_stalled_seconds_total",
    "mig": "gpuledger_gpu_mig_sampled_seconds_total",  # absent for a GPU never in MIG mode
    "integrated": "gpuledger_gpu_energy_integrated_seconds_total",  # absent where the energy counter answers
}
JOB_LABELS = ("job_id", "user", "pod", "namespace", "container")
KEY_LABELS, NO_VALUES = ("uuid", *JOB_LABELS), ("",) * (1 + len(JOB_LABELS))  # a job row's series: its labels
ROLLUP_NOTE = (
    "GPU and job counters read from the 5-minute rollups (gpuledger:*:increase5m recording rules), "
    "not the raw series: the window's totals are exact, a day's figures may be shifted by up to 5 minutes "
    "where the rules run at a phase of their own (Prometheus)"
)
HOURLY_NOTE = (
    "GPU and job counters read from the hourly rollups (gpuledger:*:increase1h recording rules) and the "
    "5-minute rollups at the days' edges, not the raw series: the window's totals are exact, a day's figures "
    "may be shifted by up to 5 minutes where the rules run at a phase of their own (Prometheus)"
)
DAILY = ("sampled", "busy", "energy")  # the counters a day's figures need (GpuDay); the rest: the window's total


@dataclass(frozen=True, slots=True)
class _Rolled:
    """The GPU figures were read from the rollups (``GpuFigures.carry``): so are the jobs'."""

    hourly: bool  # the hourly ones


class PrometheusSource(PromQLSource):
    name = "prometheus"
    always_queue_notes = True

    def __init__(
        self,
        settings: PrometheusSettings,
        api: PromAPI | None = None,
        hourly_energy: bool = False,
        pod_labels: Sequence[str] = (),
        rollups: bool = True,
    ) -> None:
        super().__init__(settings, api, pod_labels)
        self.hourly_energy = hourly_energy  # a tariff needs energy hour by hour
        self.rollups = rollups  # read the rollup rules' series where they cover the window

    # --- GPUs ---------------------------------------------------------------------------

    def gpus(self, w: Window) -> GpuFigures:
        """The GPUs, and each one's scrape target (``instance``: the exporter that wrote its series)."""
        problems: list[str] = []
        notes: tuple[str, ...] = ()
        try:
            rolled = self.rollups and rollups.rollups_cover(self.api, w, GPU_COUNTERS["sampled"])
            if rolled:
                g = rollups.grid(self.api, w, GPU_COUNTERS["sampled"])
                totals = rollups.rollup_totals(self.api, w, GPU_COUNTERS, "gpuledger_gpu_info", g, DAILY)
                notes = (HOURLY_NOTE if g.hour is not None else ROLLUP_NOTE,)
            else:
                totals = counters.day_totals(self.api, w, GPU_COUNTERS, "sampled", "gpuledger_gpu_info")
        except QueryError as e:
            raise SourceUnavailable(f"prometheus {self.s.url}: GPU totals: {e}") from e
        total = totals.total
        hourly: dict[str, list[float]] = {}
        if self.hourly_energy:
            try:
                hourly = counters.hourly(self.api, w, GPU_COUNTERS["energy"])
            except QueryError as e:
                problems.append(f"hourly energy (for the tariff): {e}")
        out = []
        for uuid in sorted(set(totals.labels) | totals.uuids("sampled")):
            labels = totals.labels.get(uuid, {})
            energy = total("energy", uuid)
            hours = hourly.get(uuid)
            if hours and energy is not None and sum(hours) > 0:  # the hours, scaled to the exact total
                hours = [h * energy / sum(hours) for h in hours]
            out.append(
                GpuWeek(
                    uuid=uuid,
                    host=labels.get("hostname", labels.get("instance", "")),
                    model=labels.get("model", ""),
                    gpu=labels.get("gpu", ""),
                    sampled_s=total("sampled", uuid) or 0.0,
                    busy_s=total("busy", uuid) or 0.0,
                    sm_active_s=total("sm", uuid),
                    allocated_s=total("alloc", uuid),
                    allocated_idle_s=total("idle", uuid),
                    energy_j=energy,
                    energy_by_hour=tuple(hours) if hours else None,
                    stalled_s=total("stalled", uuid),
                    busy_measure=mig_busy_measure(total("sampled", uuid) or 0.0, total("mig", uuid) or 0.0),
                    energy_measure=energy_measure(total("sampled", uuid) or 0.0, total("integrated", uuid) or 0.0),
                    cluster=labels.get(self.s.cluster_label, "") if self.s.cluster_label else "",
                    daily=tuple(
                        GpuDay(d.get("sampled", uuid) or 0.0, d.get("busy", uuid) or 0.0, d.get("energy", uuid))
                        for d in totals.days
                    ),
                )
            )
        targets = {uuid: labels.get("instance", "") for uuid, labels in totals.labels.items()}
        carry = _Rolled(g.hour is not None) if rolled else None
        return GpuFigures(tuple(out), notes, tuple(problems), targets=targets, carry=carry)

    def carry_state(self, carry: object) -> str:
        """How the GPU figures were read, as a word kept with a day's figures (``analytics.daycache``)."""
        return ("hourly" if carry.hourly else "5m") if isinstance(carry, _Rolled) else ""

    def carry_from(self, state: str) -> object:
        return _Rolled(state == "hourly") if state in ("hourly", "5m") else None

    # --- jobs, queue, failures, benchmarks ---------------------------------------------

    def records_rolled(self, w: Window, gpus: GpuFigures) -> bool:
        """The GPUs were read from the rollups (the record rules are in the same file) and every
        job record seen at the checked instants has its 5-minute record."""
        return isinstance(gpus.carry, _Rolled) and rollups.records_cover(self.api, w, RECORD_ROLLUPS)

    def jobs(self, w: Window, g: GpuFigures) -> JobFigures:
        """By day, as the GPU totals (their Slurm records are joined by the enrichment step)."""
        try:
            grid = None  # the GPUs were read from the rollups: the jobs too (their groups have phases of their own)
            if isinstance(g.carry, _Rolled):
                grid = rollups.grid(self.api, w, "gpuledger_job_gpu_sampled_seconds_total", g.carry.hourly)
            return JobFigures(tuple(self._jobs(w, g.gpus, grid)))
        except QueryError as e:
            return JobFigures(problems=(f"per-job figures: {e}",))

    def _jobs(self, w: Window, gpus: Sequence[GpuWeek], grid: rollups.Grid | None = None) -> list[JobWeek]:
        """``grid``: read the rollups stamped there, else the raw series."""
        hosts = {g.uuid: g.host for g in gpus}
        clusters = job_clusters(gpus)  # set here, not copied over by WeekData
        by = "uuid, " + ", ".join(JOB_LABELS)
        seen: dict[tuple[str, JobKey], None] = {}  # (uuid, job), in the order first answered
        sampled: dict[tuple[str, JobKey], float] = defaultdict(float)
        busy: dict[tuple[str, JobKey], float] = defaultdict(float)
        energy: dict[tuple[str, JobKey], float] = defaultdict(float)
        charged: dict[tuple[str, JobKey], float] = defaultdict(float)  # absent: an exporter before it
        stalled: dict[tuple[str, JobKey], float] = defaultdict(float)  # absent: no GPM
        links: dict[tuple[str, JobKey], float] = defaultdict(float)  # keyed (uuid, job) per link below
        by_link: dict[str, dict[tuple[str, JobKey], float]] = {"nvlink": defaultdict(float), "pcie": defaultdict(float)}
        metrics: tuple[tuple[str, dict[tuple[str, JobKey], float]], ...] = (
            ("sampled_seconds", sampled),
            ("busy_seconds", busy),
            ("energy_joules", energy),
            ("charged_seconds", charged),
            ("stalled_seconds", stalled),
            ("link_bytes", links),  # by link: sent + received over NVLink or PCIe, times the job's share
        )

        def grouping(metric: str) -> str:
            return f"{by}, link" if metric == "link_bytes" else by

        def growth(metric: str, a: float, b: float) -> str:
            if grid:  # the rollups' buckets in (a, b]
                return grid.span(f"gpuledger_job_gpu_{metric}_total", a, b)
            return f"increase(gpuledger_job_gpu_{metric}_total[{rng(b - a)}])"

        # from the rollups the window at once (a job's series is in them only while it ran, and
        # JobWeek has no days); from the raw series day by day, as the GPUs
        spans = [(w.start, w.end)] if grid else [(d.start, d.end) for d in days(w)]
        asked = [
            (into, 1.0, f"sum by ({grouping(metric)}) ({growth(metric, a, b)})", b)
            for a, b in spans
            for metric, into in metrics
        ]
        gap = grid.gap(w.end) if grid else 0.0
        if gap:  # the buckets onto the window's edges, as for the GPUs (counters.rollup_totals)
            asked += [
                (
                    into,
                    sign,
                    f"sum by ({grouping(metric)}) ({rollups.fragment(f'gpuledger_job_gpu_{metric}_total', gap)})",
                    t,
                )
                for sign, t in ((-1.0, w.start), (1.0, w.end))
                for metric, into in metrics
            ]
        keys: dict[tuple[str, ...], tuple[str, JobKey]] = {}  # one key object per series, not one per answer
        answers = self.api.query_many([(q, t) for _, _, q, t in asked])
        for (into, sign, _, _), answer in zip(asked, answers, strict=True):
            for s in answer:
                get = s.labels.get
                labels = tuple(map(get, KEY_LABELS, NO_VALUES))
                if (key := keys.get(labels)) is None:
                    key = keys[labels] = (labels[0], JobKey(*labels[1:]))
                target = into if into is not links else by_link.get(get("link", ""))
                if target is None:
                    continue  # a link this report does not know
                if sign > 0:
                    seen[key] = None
                    target[key] += s.value
                elif key in seen:  # growth before the window: of a job the window's buckets hold
                    target[key] -= s.value
        return [
            JobWeek(
                u,
                hosts.get(u, ""),
                k,
                sampled[u, k],
                busy[u, k],
                energy[u, k],
                charged_s=charged.get((u, k)),
                stalled_s=stalled.get((u, k)),
                nvlink_bytes=by_link["nvlink"].get((u, k)),
                pcie_bytes=by_link["pcie"].get((u, k)),
                cluster=clusters.get(u, ""),
            )
            for u, k in sorted(seen, key=lambda x: x[0])
        ]

    # --- where a job ran -------------------------------------------------------------------

    def job_selectors(self, job: str, namespace: str, pod: str) -> list[str]:
        if namespace:
            return [f'namespace="{label_value(namespace)}", pod="{label_value(pod)}"']
        return [f'job_id="{label_value(job)}"', f'job_id="", pod="{label_value(job)}"']  # a Slurm job id, else a pod

    def span_of(self, selectors: Sequence[str], now: float) -> Span | None:
        """From the job's first sample to the last that grew: the exporter keeps a finished job's
        series a while (``GRACE``), flat, and those minutes are not the job's."""
        with self.api.report():
            for sel in selectors:
                first = self.api.query(_first(sel), now)
                if first:
                    break
            else:
                return None
            held = f"gpuledger_job_gpu_sampled_seconds_total{{{sel}}}"
            grew = f"timestamp({held}) and ({held} > {held} offset 1m)"  # the samples that grew: their times
            last = self.api.query(f"max(max_over_time(({grew})[{JOB_LOOKBACK_DAYS}d:1m]))", now)
        start = first[0].value // 60 * 60
        if not last:  # it never grew: its first minute
            return Span(start, start + 60.0)
        return Span(start, max(start + 60.0, math.ceil(last[0].value / 60) * 60.0))  # the end of its minute


def _first(sel: str) -> str:
    t = f"timestamp(gpuledger_job_gpu_sampled_seconds_total{{{sel}}})"
    return f"min(min_over_time({t}[{JOB_LOOKBACK_DAYS}d:1m]))"
