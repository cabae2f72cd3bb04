"""NVIDIA dcgm-exporter's series as a source, for teams that run it and want the analytics alone.

Its series are not one per GPU: a GPU's labels change each time the pod holding it changes
(``namespace``/``pod``/``container``, or ``exported_*`` where they collided with the target's),
the no-pod series recurs between pods, and an exporter restart changes ``Hostname`` and the
target's labels. Every figure is therefore aggregated by the device (``UUID``) first:

- time covered: the scrapes of all the GPU's series × ``prometheus.dcgm_scrape_interval``;
- utilisation and SM activity: ``sum_over_time`` of all its series' samples over their count
  (weighted by samples, never a mean of per-series means);
- energy: the growth of the device counter ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ) across
  its series: the largest of its series' last values at each day boundary, differenced (a series
  that recurs holds the others' growth too, so per-series ``increase()`` would count it twice);
  on the GPU's first day, from the day's first reading; a counter reset falls back to the growth
  since the reset; without the counter, average power × time covered;
- per pod: the same figures over the scrapes carrying that pod (one ``JobWeek`` per GPU and pod,
  no user or job id), held time = those scrapes × the interval;
- stalled: busy seconds of scrapes with utilisation ≥ 90 % while SM activity < 0.25, tensor
  activity < 0.05 and DRAM activity < 0.05 (where the profiling fields exist);
- host: the first of ``prometheus.dcgm_host_labels`` present on the GPU's most recent series
  (``Hostname`` is the exporter pod's name, so a node label comes first); cluster: that series'
  ``prometheus.cluster_label``;
- pod labels (``[analytics] pod_labels``): from kube-state-metrics' ``kube_pod_labels``
  (``analytics.sources.kubernetes.pod_labels``), by cluster, namespace and pod.

Each query groups by the device and workload labels and covers one day (a range of the day less
1 ms, so a sample at midnight counts in one day only, in Prometheus 2 and 3 and VictoriaMetrics
alike): the number of queries depends on the days, never on the GPUs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from analytics.config import PrometheusSettings
from analytics.sources import kubernetes
from analytics.sources.base import SourceUnavailable
from analytics.sources.promapi import PromAPI, QueryError, Series
from analytics.week_data import Day, GpuDay, GpuWeek, JobWeek, WeekData, Window, days
from exporter.attribution.shares import JobKey

UTIL = "DCGM_FI_DEV_GPU_UTIL"
SM = "DCGM_FI_PROF_SM_ACTIVE"
TENSOR = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
DRAM = "DCGM_FI_PROF_DRAM_ACTIVE"
POWER = "DCGM_FI_DEV_POWER_USAGE"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
WORKLOAD = ("pod", "namespace", "container")
IDENTITY = ("UUID", "gpu", "modelName", "Hostname")
STALLED_UTIL, STALLED_SM, STALLED_TENSOR, STALLED_DRAM = 90, 0.25, 0.05, 0.05
BEFORE = 7 * 86400  # history_start: data this long before the window means it began earlier

APPROXIMATIONS = (
    "dcgm-exporter: utilisation is the DCGM_FI_DEV_GPU_UTIL gauge averaged over scrapes (aliased)",
    "dcgm-exporter: time covered = scrapes x the configured scrape interval",
    "dcgm-exporter: SM activity from DCGM_FI_PROF_SM_ACTIVE where profiling metrics are enabled",
    "dcgm-exporter: energy from DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION per GPU across its series, "
    "else average power x time",
    "dcgm-exporter: stalled = scrapes with utilisation >= 90 % and SM < 0.25, tensor < 0.05, DRAM < 0.05 "
    "(no minimum duration), where profiling metrics are enabled",
    "dcgm-exporter: per-pod rows from the pod labels (held time = scrapes carrying the pod); "
    "no allocation, queue, failure or benchmark figures",
)
RESET = "dcgm-exporter: an energy counter reset: that day counts the growth since the reset"

K = TypeVar("K", bound=Hashable)


def _ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def workload(labels: Mapping[str, str]) -> JobKey | None:
    """The pod holding the GPU: ``exported_*`` where Prometheus renamed them (the plain ones are
    then the target's); else the plain labels, unless they name the exporter's own pod (the
    target's labels of a series no pod holds, where ``pod`` = ``Hostname``)."""
    if labels.get("exported_pod"):
        return JobKey(
            pod=labels["exported_pod"],
            namespace=labels.get("exported_namespace", ""),
            container=labels.get("exported_container", ""),
        )
    pod = labels.get("pod", "")
    if pod and pod != labels.get("Hostname"):
        return JobKey(pod=pod, namespace=labels.get("namespace", ""), container=labels.get("container", ""))
    return None


@dataclass
class _Acc:
    """One key's (a GPU, or a GPU and pod) figures over a day."""

    count: float = 0.0
    util: float = 0.0
    sm: float | None = None
    stalled: float | None = None
    power: float | None = None
    energy_min: float | None = None


class _DayFigures(NamedTuple):
    sampled: float
    busy: float
    sm: float | None
    stalled: float | None
    energy: float | None  # joules


NO_DATA = _DayFigures(0.0, 0.0, None, None, None)


@dataclass
class _Key:
    """A GPU's or a pod's figures, day by day."""

    days: dict[int, _Acc] = field(default_factory=dict)


def _add(d: dict[K, float], key: K, v: float) -> None:
    d[key] = d.get(key, 0.0) + v


def _growth(before: float | None, after: float | None, low: float | None) -> tuple[float | None, bool]:
    """A counter's growth over a day: its value at the day's end minus at its start; on the first
    day (no start value), minus the day's lowest; after a reset, the growth since it. And whether
    it was a reset."""
    if after is None:
        return None, False
    if before is None:
        return (after - low if low is not None else None), False
    if after < before:
        return (after - low if low is not None else after), True
    return after - before, False


class DcgmSource:
    name = "dcgm"

    def __init__(
        self, settings: PrometheusSettings, api: PromAPI | None = None, pod_labels: Sequence[str] = ()
    ) -> None:
        self.s = settings
        self.api = api or PromAPI(settings)
        self.pod_labels = tuple(pod_labels)  # kube_pod_labels names the pod rows carry ([analytics] pod_labels)
        hosts = [h for h in settings.dcgm_host_labels if h not in IDENTITY]
        cluster = [settings.cluster_label] if settings.cluster_label else []
        self.by = ", ".join(
            dict.fromkeys([*IDENTITY, *hosts, *cluster, *WORKLOAD, *(f"exported_{x}" for x in WORKLOAD)])
        )

    # --- queries -------------------------------------------------------------------------

    def _day_queries(self, day: Day) -> list[tuple[str, float]]:
        r, by = _ms(day.seconds - 0.001), self.by
        return [
            (f"sum by ({by}) (count_over_time({UTIL}[{r}]))", day.end),
            (f"sum by ({by}) (sum_over_time({UTIL}[{r}]))", day.end),
            (f"sum by ({by}) (sum_over_time({SM}[{r}]))", day.end),
            (f"sum by ({by}) (sum_over_time({POWER}[{r}]))", day.end),
            (f"min by ({by}) (min_over_time({ENERGY}[{r}]))", day.end),
        ]

    def _stalled_queries(self, day: Day) -> list[tuple[str, float]]:
        r, i, by = _ms(day.seconds - 0.001), _ms(self.s.dcgm_scrape_interval), self.by
        # each step's window (t - interval, t] holds one scrape: every scrape counts once, a gap none
        last = _ms(self.s.dcgm_scrape_interval - 0.001)
        cond = (
            f"last_over_time({UTIL}[{last}]) >= {STALLED_UTIL} and last_over_time({SM}[{last}]) < {STALLED_SM}"
            f" and last_over_time({TENSOR}[{last}]) < {STALLED_TENSOR}"
            f" and last_over_time({DRAM}[{last}]) < {STALLED_DRAM}"
        )
        return [
            (f"sum by ({by}) (sum_over_time(({cond})[{r}:{i}]))", day.end),
            (
                f"count by (UUID) (last_over_time({TENSOR}[{r}])) and count by (UUID) (last_over_time({DRAM}[{r}]))",
                day.end,
            ),
        ]

    def week(self, w: Window, *, jobs: bool = True) -> WeekData:
        spans = days(w)
        bounds = [spans[0].start, *(d.end for d in spans)]
        problems: list[str] = []
        notes = list(APPROXIMATIONS)
        per_day = [self._day_queries(d) for d in spans]
        n = len(per_day[0])
        queries = [q for qs in per_day for q in qs]
        queries += [(f"max by ({self.by}) (last_over_time({ENERGY}[1d]))", t) for t in bounds]
        queries.append((f"count(last_over_time({UTIL}[{BEFORE}s]))", w.start))
        try:
            answers = self.api.query_many(queries)
        except QueryError as e:
            raise SourceUnavailable(f"prometheus {self.s.url}: dcgm-exporter series: {e}") from e
        day_answers = [answers[i * n : (i + 1) * n] for i in range(len(spans))]
        at_bounds = answers[len(spans) * n : len(spans) * n + len(bounds)]
        earlier = bool(answers[-1])

        stalled: list[tuple[list[Series], list[Series]]] | None = None
        try:
            got = self.api.query_many([q for d in spans for q in self._stalled_queries(d)])
            stalled = [(got[2 * i], got[2 * i + 1]) for i in range(len(spans))]
        except QueryError as e:
            problems.append(f"dcgm-exporter stalled time: {e}")

        fig = _Figures(self.s.dcgm_scrape_interval, spans, self.s.dcgm_host_labels, self.s.cluster_label)
        for d, (count, util, sm, power, emin) in enumerate(day_answers):
            fig.day(d, count, util, sm, power, emin, stalled[d] if stalled else None)
        for b, series in enumerate(at_bounds):
            fig.bound(b, series)

        gpus, resets = fig.gpus()
        rows = fig.pods(gpus) if jobs else []
        if self.pod_labels and rows:
            try:
                found = kubernetes.pod_labels(self.api, w, self.pod_labels, self.s.cluster_label)
            except QueryError as e:
                problems.append(f"pod labels: {e}")
            else:
                rows = kubernetes.label_rows(rows, gpus, found)
                if not found:
                    problems.append(kubernetes.NO_LABELS)
        if resets:
            notes.append(RESET)
        history_start = None
        first = next((i for i, a in enumerate(day_answers) if a[0]), None)
        if not earlier and first is not None:
            history_start = self._first_sample(spans[first], problems)
        queue = []
        if self.s.kube_state_metrics:
            try:
                queue = kubernetes.queue_wait(self.api, w, self.s.cluster_label)
            except QueryError as e:
                problems.append(f"Kubernetes queue wait: {e}")
        return WeekData(
            w,
            "dcgm",
            tuple(gpus),
            jobs=tuple(rows),
            queue=tuple(queue),
            approximations=tuple(notes),
            problems=tuple(problems),
            history_start=history_start,
        )

    def _first_sample(self, day: Day, problems: list[str]) -> float | None:
        """The fleet's first scrape in ``day`` (the first day with data)."""
        r, i = _ms(day.seconds - 0.001), _ms(self.s.dcgm_scrape_interval)
        try:
            found = self.api.query(f"min(min_over_time(timestamp({UTIL})[{r}:{i}]))", day.end)
        except QueryError as e:
            problems.append(f"dcgm-exporter history start: {e}")
            return None
        return min((s.value for s in found), default=None)


class _Figures:
    """The answers, regrouped in Python by GPU and by GPU and pod (summed over series)."""

    def __init__(self, interval: float, spans: Sequence[Day], host_labels: Sequence[str], cluster_label: str) -> None:
        self.interval, self.spans, self.host_labels, self.cluster_label = interval, spans, host_labels, cluster_label
        self.gpu: dict[str, _Key] = defaultdict(_Key)
        self.pod: dict[tuple[str, JobKey], _Key] = defaultdict(_Key)
        self.prof: list[set[str] | None] = [None] * len(spans)  # day -> GPUs with tensor and DRAM fields
        self.bounds: list[dict[Hashable, float]] = [{} for _ in range(len(spans) + 1)]  # key -> counter max
        self.latest: dict[str, tuple[int, float, dict[str, str]]] = {}  # uuid -> (day, energy, labels)

    def _keys(self, labels: Mapping[str, str]) -> list[Hashable]:
        uuid = labels.get("UUID", "")
        pod = workload(labels)
        return [uuid] if pod is None else [uuid, (uuid, pod)]

    def _acc(self, key: Hashable, d: int) -> _Acc:
        store = self.gpu[key] if isinstance(key, str) else self.pod[key]  # type: ignore[index]
        return store.days.setdefault(d, _Acc())

    def day(
        self,
        d: int,
        count: list[Series],
        util: list[Series],
        sm: list[Series],
        power: list[Series],
        emin: list[Series],
        stalled: tuple[list[Series], list[Series]] | None,
    ) -> None:
        for s in count:
            for k in self._keys(s.labels):
                self._acc(k, d).count += s.value
            uuid = s.labels.get("UUID", "")
            last = self.latest.get(uuid)
            if last is None or last[0] < d:  # days come in order: the GPU's last day so far
                self.latest[uuid] = (d, float("-inf"), s.labels)
        for s in util:
            for k in self._keys(s.labels):
                self._acc(k, d).util += s.value
        for s in sm:
            for k in self._keys(s.labels):
                a = self._acc(k, d)
                a.sm = (a.sm or 0.0) + s.value
        for s in power:
            for k in self._keys(s.labels):
                a = self._acc(k, d)
                a.power = (a.power or 0.0) + s.value
        for s in emin:
            for k in self._keys(s.labels):
                a = self._acc(k, d)
                a.energy_min = s.value if a.energy_min is None else min(a.energy_min, s.value)
        if stalled is None:
            return
        values, prof = stalled
        self.prof[d] = {s.labels.get("UUID", "") for s in prof}
        for s in values:
            for k in self._keys(s.labels):
                a = self._acc(k, d)
                a.stalled = (a.stalled or 0.0) + s.value

    def bound(self, b: int, series: Iterable[Series]) -> None:
        at = self.bounds[b]
        for s in series:
            for k in self._keys(s.labels):
                at[k] = max(at.get(k, s.value), s.value)
            uuid = s.labels.get("UUID", "")
            last = self.latest.get(uuid)  # the GPU's most recent series: the highest counter on its last day
            if last is not None and b == last[0] + 1 and s.value > last[1]:
                self.latest[uuid] = (last[0], s.value, s.labels)

    def _series(self, key: Hashable, k: _Key, resets: list[bool]) -> list[_DayFigures]:
        """The key's figures per day of the window (seconds and joules); ``resets`` gets one
        entry per day with data: whether the energy counter reset."""
        out = []
        i = self.interval
        for d, span in enumerate(self.spans):
            a = k.days.get(d)
            if a is None or a.count == 0:
                out.append(NO_DATA)
                continue
            energy, reset = _growth(self.bounds[d].get(key), self.bounds[d + 1].get(key), a.energy_min)
            resets.append(reset)
            joules = energy / 1000 if energy is not None else a.power * i if a.power is not None else None
            uuid = key if isinstance(key, str) else key[0]  # type: ignore[index]
            prof = self.prof[d]
            measured = a.sm is not None and prof is not None and uuid in prof
            out.append(
                _DayFigures(
                    sampled=min(a.count * i, span.seconds),
                    busy=a.util / 100 * i,
                    sm=a.sm * i if a.sm is not None else None,
                    stalled=(a.stalled or 0.0) / 100 * i if measured else None,
                    energy=joules,
                )
            )
        return out

    def gpus(self) -> tuple[list[GpuWeek], bool]:
        """Each GPU with data; and whether an energy counter reset."""
        out: list[GpuWeek] = []
        resets: list[bool] = []
        for uuid in sorted(self.gpu):
            daily = self._series(uuid, self.gpu[uuid], resets)
            if not any(x.sampled for x in daily):
                continue
            labels = self.latest.get(uuid, (0, 0.0, {}))[2]
            out.append(
                GpuWeek(
                    uuid=uuid,
                    host=next((labels[h] for h in self.host_labels if labels.get(h)), ""),
                    model=labels.get("modelName", ""),
                    gpu=labels.get("gpu", ""),
                    sampled_s=sum(x.sampled for x in daily),
                    busy_s=sum(x.busy for x in daily),
                    sm_active_s=_total(x.sm for x in daily),
                    allocated_s=None,
                    allocated_idle_s=None,
                    energy_j=_total(x.energy for x in daily),
                    daily=tuple(GpuDay(x.sampled, x.busy, x.energy) for x in daily),
                    stalled_s=_total(x.stalled for x in daily),
                    cluster=labels.get(self.cluster_label, "") if self.cluster_label else "",
                )
            )
        return out, any(resets)

    def pods(self, gpus: Sequence[GpuWeek]) -> list[JobWeek]:
        """One row per GPU and pod that held it: held (and charged) time = its scrapes x interval."""
        hosts = {g.uuid: g.host for g in gpus}
        out: list[JobWeek] = []
        resets: list[bool] = []
        for uuid, pod in sorted(self.pod, key=lambda k: (k[0], k[1].namespace, k[1].pod, k[1].container)):
            daily = self._series((uuid, pod), self.pod[uuid, pod], resets)
            sampled = sum(x.sampled for x in daily)
            if not sampled or uuid not in hosts:
                continue
            out.append(
                JobWeek(
                    uuid=uuid,
                    host=hosts[uuid],
                    job=pod,
                    sampled_s=sampled,
                    busy_s=sum(x.busy for x in daily),
                    energy_j=_total(x.energy for x in daily) or 0.0,
                    sm_active_s=_total(x.sm for x in daily),
                    charged_s=sampled,
                    stalled_s=_total(x.stalled for x in daily),
                )
            )
        return out


def _total(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None
