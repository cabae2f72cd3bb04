"""gpuledger's own series in Prometheus (or Thanos, VictoriaMetrics, Mimir) as a source.

Aggregation happens in PromQL, summed by GPU, so 1,024 GPUs cost the same queries as one (a
fixed number for a week: ``bench/report_scale.py`` counts them). GPU counters: their values at
the day boundaries (``analytics.sources.counters``: exact, one sample per series read,
``increase()`` only where a counter reset or a series is missing); per-job counters, whose
series begin and end inside the window: ``increase(...[day])``. The days add up to the window
and are the daily figures too. Hourly energy (for time-of-day tariffs) is one range query. Only
plain PromQL and the query/query_range endpoints are used.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from analytics.config import PrometheusSettings
from analytics.sources import counters, kubernetes
from analytics.sources.base import SourceUnavailable
from analytics.sources.promapi import PromAPI, QueryError, rng
from analytics.sources.prometheus_slurm import NO_SLURM, slurm_attributes
from domain import states
from domain.jobs import JobKey
from domain.week import (
    BenchRun,
    BenchWeek,
    FailureWeek,
    GpuDay,
    GpuWeek,
    JobWeek,
    QueueWeek,
    WeekData,
    Window,
    days,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

GPU_COUNTERS = {
    "sampled": "gpuledger_gpu_sampled_seconds_total",
    "busy": "gpuledger_gpu_busy_seconds_total",
    "sm": "gpuledger_gpu_sm_active_seconds_total",
    "alloc": "gpuledger_gpu_allocated_seconds_total",
    "idle": "gpuledger_gpu_allocated_idle_seconds_total",
    "energy": "gpuledger_gpu_energy_joules_total",
    "stalled": "gpuledger_gpu_stalled_seconds_total",
}
JOB_LABELS = ("job_id", "user", "pod", "namespace", "container")
FAILED = states.regex(states.FAILED)


class PrometheusSource:
    name = "prometheus"

    def __init__(
        self,
        settings: PrometheusSettings,
        api: PromAPI | None = None,
        hourly_energy: bool = False,
        pod_labels: Sequence[str] = (),
    ) -> None:
        self.s = settings
        self.api = api or PromAPI(settings)
        self.hourly_energy = hourly_energy  # a tariff needs energy hour by hour
        self.pod_labels = tuple(pod_labels)  # kube_pod_labels names the pod rows carry ([analytics] pod_labels)

    def week(self, w: Window, *, jobs: bool = True) -> WeekData:
        problems: list[str] = []
        gpus, targets = self._gpus(w, problems)
        # the queue, failures, benchmarks and history start need nothing of the per-job figures:
        # asked beside them, in one thread of their own (their problems listed after, in order)
        with ThreadPoolExecutor(1, thread_name_prefix="gpuledger-promql-side") as pool:
            side = pool.submit(self._side, w, bool(gpus))
            per_job: list[JobWeek] = []
            if jobs:
                no_jobs: list[JobWeek] = []
                per_job = _part("per-job figures", lambda: self._jobs(w, gpus, targets), no_jobs, problems)
            if self.pod_labels and any(j.job.pod for j in per_job):
                per_job = self._labelled(w, per_job, gpus, problems)
            queue, failures, bench, started, side_problems = side.result()
        return WeekData(
            w,
            "prometheus",
            tuple(gpus),
            tuple(per_job),
            tuple(queue),
            tuple(failures),
            bench,
            approximations=(
                "pending GPU-hours from the average of the pending-GPUs gauge",
                "queue-wait quantiles estimated from histogram buckets",
            ),
            problems=(*problems, *side_problems),
            history_start=started,
        )

    def _side(
        self, w: Window, has_gpus: bool
    ) -> tuple[list[QueueWeek], list[FailureWeek], BenchWeek | None, float | None, list[str]]:
        problems: list[str] = []
        no_queue: list[QueueWeek] = []
        no_failures: list[FailureWeek] = []
        queue = _part("queue", lambda: self._queue(w), no_queue, problems)
        if self.s.kube_state_metrics:
            label = self.s.cluster_label
            queue += _part("Kubernetes queue wait", lambda: kubernetes.queue_wait(self.api, w, label), [], problems)
        failures = _part("failed jobs", lambda: self._failures(w), no_failures, problems)
        bench = _part("benchmarks", lambda: self._bench(w), None, problems)
        started = _part("history start", lambda: history_start(self.api, w), None, problems) if has_gpus else None
        return queue, failures, bench, started, problems

    # --- GPUs ---------------------------------------------------------------------------

    def _gpus(self, w: Window, problems: list[str]) -> tuple[list[GpuWeek], dict[str, str]]:
        """The GPUs, and each one's scrape target (``instance``: the exporter that wrote its series)."""
        try:
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
                    cluster=labels.get(self.s.cluster_label, "") if self.s.cluster_label else "",
                    daily=tuple(
                        GpuDay(d.get("sampled", uuid) or 0.0, d.get("busy", uuid) or 0.0, d.get("energy", uuid))
                        for d in totals.days
                    ),
                )
            )
        return out, {uuid: labels.get("instance", "") for uuid, labels in totals.labels.items()}

    # --- jobs, queue, failures, benchmarks ---------------------------------------------

    def _jobs(self, w: Window, gpus: Sequence[GpuWeek], targets: Mapping[str, str]) -> list[JobWeek]:
        """By day, as the GPU totals; Slurm's account, partition and QOS joined on the row's own
        job (``SlurmAttributes``)."""
        hosts = {g.uuid: g.host for g in gpus}
        cluster = {g.uuid: g.cluster for g in gpus}
        by = "uuid, " + ", ".join(JOB_LABELS)
        seen: dict[tuple[str, JobKey], None] = {}  # (uuid, job), in the order first answered
        sampled: dict[tuple[str, JobKey], float] = defaultdict(float)
        busy: dict[tuple[str, JobKey], float] = defaultdict(float)
        energy: dict[tuple[str, JobKey], float] = defaultdict(float)
        charged: dict[tuple[str, JobKey], float] = defaultdict(float)  # absent: an exporter before it
        stalled: dict[tuple[str, JobKey], float] = defaultdict(float)  # absent: no GPM
        metrics = (
            ("sampled_seconds", sampled),
            ("busy_seconds", busy),
            ("energy_joules", energy),
            ("charged_seconds", charged),
            ("stalled_seconds", stalled),
        )
        asked = [
            (into, f"sum by ({by}) (increase(gpuledger_job_gpu_{metric}_total[{rng(day.seconds)}]))", day.end)
            for day in days(w)
            for metric, into in metrics
        ]
        keys: dict[tuple[str, ...], tuple[str, JobKey]] = {}  # one key object per series, not one per answer
        # the Slurm attributes' one query runs beside the counters' (its answer is needed only after)
        with ThreadPoolExecutor(1, thread_name_prefix="gpuledger-promql-slurm") as pool:
            attributes = pool.submit(slurm_attributes, self.api, w, self.s.cluster_label)
            for (into, _, _), answer in zip(asked, self.api.query_many([(q, t) for _, q, t in asked]), strict=True):
                for s in answer:
                    get = s.labels.get
                    labels = (get("uuid", ""), *(get(k, "") for k in JOB_LABELS))
                    if (key := keys.get(labels)) is None:
                        key = keys[labels] = (labels[0], JobKey(*labels[1:]))
                    seen[key] = None
                    into[key] += s.value
            slurm = attributes.result() if any(k.job_id for _, k in seen) else None
        out = []
        for u, k in sorted(seen, key=lambda x: x[0]):
            account, partition, qos = (
                slurm.of(cluster.get(u, ""), targets.get(u, ""), k) if slurm and k.job_id else NO_SLURM
            )
            out.append(
                JobWeek(
                    u,
                    hosts.get(u, ""),
                    k,
                    sampled[u, k],
                    busy[u, k],
                    energy[u, k],
                    partition=partition,
                    charged_s=charged.get((u, k)),
                    stalled_s=stalled.get((u, k)),
                    account=account,
                    qos=qos,
                )
            )
        return out

    def _labelled(self, w: Window, rows: list[JobWeek], gpus: list[GpuWeek], problems: list[str]) -> list[JobWeek]:
        """The pod rows with their chosen kube_pod_labels labels (``kubernetes.pod_labels``)."""
        try:
            found = kubernetes.pod_labels(self.api, w, self.pod_labels, self.s.cluster_label)
        except QueryError as e:
            problems.append(f"pod labels: {e}")
            return rows
        if not found:
            problems.append(kubernetes.NO_LABELS)
        return kubernetes.label_rows(rows, gpus, found)

    def _queue(self, w: Window) -> list[QueueWeek]:
        r = rng(w.seconds)
        hist = "gpuledger_queue_wait_seconds"
        count = {
            s.labels.get("partition", ""): s.value
            for s in self.api.query(f"sum by (partition) (increase({hist}_count[{r}]))", w.end)
        }
        total = {
            s.labels.get("partition", ""): s.value
            for s in self.api.query(f"sum by (partition) (increase({hist}_sum[{r}]))", w.end)
        }
        q = {}
        for quantile in (0.5, 0.95):
            expr = f"histogram_quantile({quantile}, sum by (le, partition) (increase({hist}_bucket[{r}])))"
            q[quantile] = {s.labels.get("partition", ""): s.value for s in self.api.query(expr, w.end)}
        buckets: dict[str, list[tuple[float, float]]] = {}
        for s in self.api.query(f"sum by (le, partition) (increase({hist}_bucket[{r}]))", w.end):
            buckets.setdefault(s.labels.get("partition", ""), []).append((float(s.labels["le"]), s.value))
        pending = {
            s.labels.get("partition", ""): s.value * w.hours
            for s in self.api.query(f"sum by (partition) (avg_over_time(gpuledger_queue_pending_gpus[{r}]))", w.end)
        }
        out = []
        for p in sorted(set(count) | set(pending)):
            n = round(count.get(p, 0.0))
            bound = _max_bound(buckets.get(p, []))
            out.append(
                QueueWeek(
                    p,
                    "histogram",
                    n,
                    total.get(p, 0.0) / count[p] if count.get(p) else None,
                    _finite(q[0.5].get(p)) if n else None,
                    _finite(q[0.95].get(p)) if n else None,
                    bound if n else None,
                    True,
                    pending.get(p),
                )
            )
        return out

    def _failures(self, w: Window) -> list[FailureWeek]:
        r = rng(w.seconds)
        states: dict[str, dict[str, int]] = {}
        for s in self.api.query(f"sum by (partition, state) (increase(gpuledger_jobs_finished_total[{r}]))", w.end):
            states.setdefault(s.labels.get("partition", ""), {})[s.labels.get("state", "")] = round(s.value)
        requeued = {
            s.labels.get("partition", ""): round(s.value)
            for s in self.api.query(f"sum by (partition) (increase(gpuledger_jobs_requeued_total[{r}]))", w.end)
        }
        lost_expr = f'sum by (partition) (increase(gpuledger_jobs_gpu_seconds_total{{state=~"{FAILED}"}}[{r}])) / 3600'
        lost = {s.labels.get("partition", ""): s.value for s in self.api.query(lost_expr, w.end)}
        return [
            FailureWeek(p, states.get(p, {}), requeued.get(p, 0), lost.get(p, 0.0))
            for p in sorted(set(states) | set(requeued))
        ]

    def _bench(self, w: Window) -> BenchWeek | None:
        """Every run of the window, from the gauges each run sets: a run is where the fleet's figure
        for a world size changes (two runs in a row with the very same value read as one), dated by
        the first step that sees it. Throughput and model are the last run's."""
        r = rng(w.seconds)
        step = max(60.0, math.ceil(w.seconds / 10000))  # under Prometheus' 11,000 points a series

        def runs(metric: str) -> dict[int, tuple[BenchRun, ...]]:
            out: dict[int, tuple[BenchRun, ...]] = {}
            for series in self.api.query_range(f"max by (world_size) ({metric})", w.start - step, w.end - 1, step):
                if "world_size" not in series.labels:
                    continue
                found, before = [], None  # before: the figure at the end of the previous window
                for t, v in series.points:
                    if t >= w.start and v != before and math.isfinite(v):
                        found.append(BenchRun(t, v))
                    before = v
                if found:
                    out[int(series.labels["world_size"])] = tuple(found)
            return dict(sorted(out.items()))

        def by_size(metric: str) -> dict[int, float]:
            expr = f"max by (world_size) (last_over_time({metric}[{r}]))"
            series = self.api.query(expr, w.end)
            return {int(s.labels["world_size"]): s.value for s in series if "world_size" in s.labels}

        busbw = runs("gpuledger_bench_allreduce_largest_busbw_bytes_per_second")
        speedup = runs("gpuledger_bench_train_speedup_ratio")
        if not busbw and not speedup:
            return None
        throughput = by_size("gpuledger_bench_train_throughput_samples_per_second")
        models = self.api.query(f"last_over_time(gpuledger_bench_train_speedup_ratio[{r}])", w.end)
        model = models[0].labels.get("model", "") if models else ""
        efficiency = runs("gpuledger_bench_train_scaling_efficiency_ratio")
        return BenchWeek.of_runs(busbw, speedup, efficiency, throughput, model)


def _part(what: str, fn: Callable[[], T], empty: T, problems: list[str]) -> T:
    """One part of a window: its value, or ``empty`` with the query's error added to ``problems``
    (the report is then marked incomplete, the rest still read)."""
    try:
        return fn()
    except QueryError as e:
        problems.append(f"{what}: {e}")
        return empty


LOOKBACK = "7d"  # data this long before a window means the history began before it


def history_start(api: PromAPI, w: Window) -> float | None:
    """When gpuledger's series begin inside ``w``: the time of the first sample of
    ``gpuledger_gpu_sampled_seconds_total`` in it; None when there are samples in the ``LOOKBACK``
    before the window (a gap longer than that reads as a fresh start) or none in it. In turn, each
    asked only while the answer is still open: a sample at the window's start (the common
    answer: one query, one sample a series read); any in the lookback; which of the window's days
    has data (one query a day); the first day's first minute (a 1-minute subquery of
    ``timestamp()``); that minute's first second (a 1-second one). A week: at most 12 queries."""
    sampled = GPU_COUNTERS["sampled"]
    if api.query(f"count({sampled})", w.start) or api.query(f"count(last_over_time({sampled}[{LOOKBACK}]))", w.start):
        return None
    spans = days(w)
    found = api.query_many([(f"count(last_over_time({sampled}[{rng(d.seconds)}]))", d.end) for d in spans])
    first = next((d for d, answer in zip(spans, found, strict=True) if answer), None)
    if first is None:
        return None
    minute = api.query(f"min(min_over_time(timestamp({sampled})[{rng(first.seconds)}:1m]))", first.end)
    if not minute:
        return None
    # the first minute step that sees a sample sees one at most a minute after the first
    at = minute[0].value
    second = api.query(f"min(min_over_time(timestamp({sampled})[1m:1s]))", at)
    return max(w.start, min([at, *(s.value for s in second)]))


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def _max_bound(buckets: list[tuple[float, float]]) -> float | None:
    """The smallest bucket bound that holds every observation: the maximum is at most this."""
    if not buckets:
        return None
    buckets.sort()
    total = buckets[-1][1]
    for le, c in buckets:
        if c >= total - 0.5:
            return le if math.isfinite(le) else None
    return None
