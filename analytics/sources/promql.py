"""What gpuledger's own series and dcgm-exporter's share in a Prometheus-compatible store: the
parts that come from gpuledger's Slurm watcher and benchmarks, kube-state-metrics and the store
itself, whichever exporter wrote the GPUs' series. A source on such a store (``prometheus``,
``dcgm``) is this plus its GPU and job figures.

- the Slurm queue (the watcher's wait histograms, pending GPUs) and Kubernetes' (kube-state-metrics);
- failed and requeued jobs (the watcher's counters); the benchmark runs (the exporter's gauges);
- each Slurm job's records: the scheduler's (``gpuledger_slurm_job_info``, the watcher's) and
  what its processes claimed (``gpuledger_job_info``, the node exporters');
- the pods' labels (``kube_pod_labels``); the history's start (the first sample of
  ``first_metric``); where a job ran (``job_span``, by the source's ``job_selectors``).
Only plain PromQL and the query/query_range endpoints are used.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from analytics.config import PrometheusSettings
from analytics.sources import kubernetes
from analytics.sources.base import (
    GpuFigures,
    JobRecords,
    Labels,
    LabelSet,
    PodKey,
    QueuePart,
    RecordSets,
    Span,
    label_sets,
)
from analytics.sources.enrich import Enriched
from analytics.sources.promanswer import QueryError
from analytics.sources.promapi import PromAPI, Series, label_value, rng
from analytics.sources.records import records_of
from domain import states
from domain.jobs import CLUSTER_SEP
from domain.week import BenchRun, BenchWeek, FailureWeek, QueueWeek, ScalingPoint, ScalingRun, Window, days

FAILED = states.regex(states.FAILED)
LOOKBACK = "7d"  # data this long before a window means the history began before it
JOB_LOOKBACK_DAYS = 35  # how far back a job is looked for
SLURM_LABELS = ("job_id", "user", "account", "partition", "qos")  # gpuledger_job_info's and the watcher's
HISTOGRAM_NOTES = (
    "pending GPU-hours from the average of the pending-GPUs gauge",
    "queue-wait quantiles estimated from histogram buckets",
)


class PromQLSource(Enriched):
    name = "prometheus"
    parallel = True
    first_metric = "gpuledger_gpu_sampled_seconds_total"
    always_queue_notes = False  # the histogram notes even where the window has no Slurm queue

    def __init__(self, settings: PrometheusSettings, api: PromAPI | None, pod_labels: Sequence[str]) -> None:
        self.s = settings
        self.api = api or PromAPI(settings)
        self.pod_label_names = tuple(pod_labels)  # kube_pod_labels names the pod rows carry ([analytics] pod_labels)

    # --- the source's plumbing ----------------------------------------------------------

    @contextmanager
    def session(self) -> Iterator[None]:
        with self.api.report():
            yield

    def describe(self) -> str:
        return f"{self.name} at {self.s.url}"

    def close(self) -> None:
        self.api.close()

    def job_states(self, start: float, end: float) -> dict[str, str] | None:
        return None  # the watcher's counters count jobs by state, not job by job

    # --- parts --------------------------------------------------------------------------

    def queue(self, w: Window) -> QueuePart:
        """The watcher's histograms (a failure fails the part), and kube-state-metrics' pods (a
        failure of those is named and the rest kept)."""
        rows = _histogram_queue(self.api, w)
        problems: tuple[str, ...] = ()
        if self.s.kube_state_metrics:
            try:
                rows += kubernetes.queue_wait(self.api, w, self.s.cluster_label)
            except QueryError as e:
                problems = (f"Kubernetes queue wait: {e}",)
        notes = HISTOGRAM_NOTES if self.always_queue_notes or any(r.source == "histogram" for r in rows) else ()
        return QueuePart(rows, notes, problems)

    def failures(self, w: Window) -> list[FailureWeek]:
        r = rng(w.seconds)
        found: dict[str, dict[str, int]] = {}
        for s in self.api.query(f"sum by (partition, state) (increase(gpuledger_jobs_finished_total[{r}]))", w.end):
            found.setdefault(s.labels.get("partition", ""), {})[s.labels.get("state", "")] = round(s.value)
        requeued = {
            s.labels.get("partition", ""): round(s.value)
            for s in self.api.query(f"sum by (partition) (increase(gpuledger_jobs_requeued_total[{r}]))", w.end)
        }
        lost_expr = f'sum by (partition) (increase(gpuledger_jobs_gpu_seconds_total{{state=~"{FAILED}"}}[{r}])) / 3600'
        lost = {s.labels.get("partition", ""): s.value for s in self.api.query(lost_expr, w.end)}
        return [
            FailureWeek(p, found.get(p, {}), requeued.get(p, 0), lost.get(p, 0.0))
            for p in sorted(set(found) | set(requeued))
        ]

    def bench(self, w: Window) -> BenchWeek | None:
        """Every run of the window, from the gauges each run sets: a run is where the fleet's figure
        for a world size changes (two runs in a row with the very same value read as one), dated by
        the first step that sees it. Throughput and model are the last run's."""
        r = rng(w.seconds)
        step = max(60.0, math.ceil(w.seconds / 10000))  # under Prometheus' 11,000 points a series

        def runs(metric: str) -> dict[int, tuple[BenchRun, ...]]:
            out: dict[int, tuple[BenchRun, ...]] = {}
            for series in self.api.query_range(f"max by (world_size) ({metric})", w.start - step, w.end - 1, step):
                world = label_number(series.labels, "world_size")
                if world is None or world != int(world):
                    continue
                found, before = [], None  # before: the figure at the end of the previous window
                for t, v in series.points:
                    if t >= w.start and v != before and math.isfinite(v):
                        found.append(BenchRun(t, v))
                    before = v
                if found:
                    out[int(world)] = tuple(found)
            return dict(sorted(out.items()))

        def by_size(metric: str) -> dict[int, float]:
            series = self.api.query(f"max by (world_size) (last_over_time({metric}[{r}]))", w.end)
            sizes = ((label_number(s.labels, "world_size"), s.value) for s in series)
            return {int(k): v for k, v in sizes if k is not None and k == int(k)}

        busbw = runs("gpuledger_bench_allreduce_largest_busbw_bytes_per_second")
        speedup = runs("gpuledger_bench_train_speedup_ratio")
        scripts = self._scaling_runs(w)
        if not busbw and not speedup:
            return BenchWeek(scaling=scripts) if scripts else None
        throughput = by_size("gpuledger_bench_train_throughput_samples_per_second")
        models = self.api.query(f"last_over_time(gpuledger_bench_train_speedup_ratio[{r}])", w.end)
        model = models[0].labels.get("model", "") if models else ""
        efficiency = runs("gpuledger_bench_train_scaling_efficiency_ratio")
        week = BenchWeek.of_runs(busbw, speedup, efficiency, throughput, model)
        return dataclasses.replace(week, scaling=scripts)

    def _scaling_runs(self, w: Window) -> tuple[ScalingRun, ...]:
        """The users' own scripts (``gpuledger scaling --history``, served by the exporter): the last
        run of each model name that ended in the window, its figures as served (no verdict: the
        command's sentence is not a metric)."""
        r = rng(w.seconds)
        by = "name, scaling, world_size"
        figures = ("step_seconds", "speedup_ratio", "efficiency_ratio", "throughput_samples_per_second")
        asked = [f"max by (name) (last_over_time(gpuledger_scaling_last_run_timestamp_seconds[{r}]))"]
        asked += [f"max by ({by}) (last_over_time(gpuledger_scaling_{f}[{r}]))" for f in figures]
        asked.append(f"max by ({by}, currency) (last_over_time(gpuledger_scaling_cost_per_1000_steps[{r}]))")
        last, *answers, cost = self.api.query_many([(q, w.end) for q in asked])
        ended = {s.labels.get("name", ""): s.value for s in last if w.start <= s.value < w.end}
        values: dict[tuple[str, str, int], list[float | None]] = {}
        currency: dict[str, str] = {}
        for i, answer in enumerate([*answers, cost]):
            for s in answer:
                get = s.labels.get
                if get("name", "") not in ended or not get("world_size", "").isdigit():
                    continue
                key = (get("name", ""), get("scaling", ""), int(get("world_size", "")))
                values.setdefault(key, [None] * (len(figures) + 1))[i] = s.value
                if i == len(figures):
                    currency[key[0]] = get("currency", "")
        by_name: dict[tuple[str, str], list[ScalingPoint]] = {}
        for (name, kind, n), (step, speed, eff, tput, per_k) in sorted(values.items()):
            by_name.setdefault((name, kind), []).append(ScalingPoint(n, "ok", step, speed, eff, tput, per_k))
        return tuple(
            ScalingRun(name, ended[name], kind, "", "GPUs", currency.get(name, ""), tuple(points), ())
            for (name, kind), points in sorted(by_name.items())
        )

    def records_rolled(self, w: Window, gpus: GpuFigures) -> bool:
        """Whether the records' 5-minute rollups (``RECORD_ROLLUPS``) hold the window: not known
        here (the store's own source says)."""
        return False

    def job_records(self, w: Window, gpus: GpuFigures) -> JobRecords:
        """The scheduler's records (``gpuledger_slurm_job_info``) and the claims
        (``gpuledger_job_info``) over the window (``record_sets``), each key's record chosen
        (``records_of``)."""
        return records_of(self.record_sets(w, gpus))

    def record_sets(self, w: Window, gpus: GpuFigures) -> RecordSets:
        """The label sets the window's records have, one query each: from their 5-minute records
        where ``records_rolled`` (and the raw series after the last), else the raw series. A
        window's are the union of its days' (a day kept keeps its own: ``analytics.daycache``)."""
        cl = self.s.cluster_label
        by = ", ".join([*(x for x in (cl,) if x), "instance", *SLURM_LABELS])
        window = rng(w.seconds)
        if self.records_rolled(w, gpus):
            tail = rng(RECORDS_TAIL)
            read = [f"last_over_time({RECORD_ROLLUPS[m]}[{window}]) or last_over_time({m}[{tail}])" for m in RECORDS]
        else:
            read = [f"last_over_time({m}[{window}])" for m in RECORDS]
        asked = [f"max by ({by}) ({x})" for x in read]
        scheduler, claims = self.api.query_many([(q, w.end) for q in asked])
        return RecordSets(cl, _sets(scheduler), _sets(claims))

    def pod_labels(self, w: Window, names: tuple[str, ...]) -> Mapping[PodKey, Labels] | None:
        return kubernetes.pod_labels(self.api, w, names, self.s.cluster_label)

    def history_start(self, w: Window) -> float | None:
        return history_start(self.api, w, self.first_metric)

    # --- where a job ran ----------------------------------------------------------------

    def job_selectors(self, job: str, namespace: str, pod: str) -> list[str]:
        """The label selectors (without braces) that find the job's series: per source."""
        raise NotImplementedError

    def job_span(self, job: str, now: float) -> Span | None:
        """From the job's first sample to its last, over the last ``JOB_LOOKBACK_DAYS``."""
        cluster, job = split_cluster(job)
        label = self.s.cluster_label
        if cluster and not label:
            return None  # clusters are not told apart here: no row is keyed cluster:job
        ns, pod = split_pod(job)
        extra = f', {label}="{label_value(cluster)}"' if cluster else ""
        return self.span_of([f"{sel}{extra}" for sel in self.job_selectors(job, ns, pod)], now)

    def span_of(self, selectors: Sequence[str], now: float) -> Span | None:
        """The first and the end of the last minute of the first selector's series that has any."""
        raise NotImplementedError


SCHEDULER = "gpuledger_slurm_job_info"  # the Slurm watcher's record of each job, as slurmctld knows it
CLAIMS = "gpuledger_job_info"  # what a job's processes named, per Slurm job and host
RECORDS = (SCHEDULER, CLAIMS)
# their 5-minute records (deploy/prometheus/rules/gpuledger-rollups.yml, group gpuledger-rollup-records)
RECORD_ROLLUPS = {m: f"gpuledger:{m.removeprefix('gpuledger_')}:last_over_time5m" for m in RECORDS}
RECORDS_TAIL = 15 * 60  # the raw records read after the last 5-minute record: a bucket, the rule's lag and more


def _sets(series: Sequence[Series]) -> frozenset[LabelSet]:
    return label_sets(sorted(s.labels.items()) for s in series)


def split_cluster(job: str) -> tuple[str, str]:
    """``cluster:job`` -> (cluster, job), as a report over several clusters keys its job rows;
    anything else -> ("", job)."""
    cluster, sep, rest = job.partition(CLUSTER_SEP)
    return (cluster, rest) if sep and cluster and rest and "/" not in cluster else ("", job)


def split_pod(job: str) -> tuple[str, str]:
    """``namespace/pod`` -> (namespace, pod); anything else names a Slurm job id or a pod."""
    ns, sep, pod = job.partition("/")
    return (ns, pod) if sep and ns and pod else ("", "")


def label_number(labels: Mapping[str, str], name: str) -> float | None:
    """A label that holds a number (``le``, ``world_size``), or None where the series lacks it or
    it holds something else: a server's odd series is skipped, never a crash."""
    try:
        v = float(labels[name])
    except (KeyError, ValueError):
        return None
    return v if not math.isnan(v) and (name == "le" or math.isfinite(v)) else None


def _histogram_queue(api: PromAPI, w: Window) -> list[QueueWeek]:
    r = rng(w.seconds)
    hist = "gpuledger_queue_wait_seconds"
    count = {
        s.labels.get("partition", ""): s.value
        for s in api.query(f"sum by (partition) (increase({hist}_count[{r}]))", w.end)
    }
    total = {
        s.labels.get("partition", ""): s.value
        for s in api.query(f"sum by (partition) (increase({hist}_sum[{r}]))", w.end)
    }
    q = {}
    for quantile in (0.5, 0.95):
        expr = f"histogram_quantile({quantile}, sum by (le, partition) (increase({hist}_bucket[{r}])))"
        q[quantile] = {s.labels.get("partition", ""): s.value for s in api.query(expr, w.end)}
    buckets: dict[str, list[tuple[float, float]]] = {}
    for s in api.query(f"sum by (le, partition) (increase({hist}_bucket[{r}]))", w.end):
        le = label_number(s.labels, "le")
        if le is not None:  # a server's series without a bound is no bucket
            buckets.setdefault(s.labels.get("partition", ""), []).append((le, s.value))
    pending = {
        s.labels.get("partition", ""): s.value * w.hours
        for s in api.query(f"sum by (partition) (avg_over_time(gpuledger_queue_pending_gpus[{r}]))", w.end)
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


def history_start(api: PromAPI, w: Window, metric: str = PromQLSource.first_metric) -> float | None:
    """When the series begin inside ``w``: the time of the first sample of ``metric`` in it; None
    when there are samples in the ``LOOKBACK`` before the window (a gap longer than that reads as
    a fresh start) or none in it. In turn, each asked only while the answer is still open: a
    sample at the window's start (the common answer: one query, one sample a series read); any in
    the lookback; which of the window's days has data (one query a day); the first day's first
    minute (a 1-minute subquery of ``timestamp()``); that minute's first second (a 1-second one).
    A week: at most 12 queries."""
    if api.query(f"count({metric})", w.start) or api.query(f"count(last_over_time({metric}[{LOOKBACK}]))", w.start):
        return None
    spans = days(w)
    found = api.query_many([(f"count(last_over_time({metric}[{rng(d.seconds)}]))", d.end) for d in spans])
    first = next((d for d, answer in zip(spans, found, strict=True) if answer), None)
    if first is None:
        return None
    minute = api.query(f"min(min_over_time(timestamp({metric})[{rng(first.seconds)}:1m]))", first.end)
    if not minute:
        return None
    # the first minute step that sees a sample sees one at most a minute after the first
    at = minute[0].value
    second = api.query(f"min(min_over_time(timestamp({metric})[1m:1s]))", at)
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
