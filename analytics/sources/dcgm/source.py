"""NVIDIA dcgm-exporter's series as a source, for teams that run it and want the analytics alone.

What the series look like and why each figure is read as it is: ``labels`` (devices, holders,
hosts), ``queries`` (one scrape at a time, copies counted once), ``figures`` and ``rows`` (MIG
instances as shares of their GPU, holders' equal shares), ``stalls`` (the exporter's stall rule).
Per day of the window a fixed set of queries, whatever the GPUs, pods and jobs: their number
depends on the days. The rest (queue, failures, benchmarks from gpuledger's watcher and exporters
where they run beside it, Slurm records, pod labels, the history's start by ``POWER``) is
``analytics.sources.promql``'s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import cast

from analytics.config import PrometheusSettings
from analytics.sources.base import GpuFigures, JobFigures, SourceUnavailable, Span
from analytics.sources.dcgm import rows, stalls
from analytics.sources.dcgm.figures import Again, Figures, Options
from analytics.sources.dcgm.labels import GROUP, HPC_JOB, POD_SETS, POWER, uuid_of
from analytics.sources.dcgm.queries import CHEAP_KINDS, Only, Queries, Reread
from analytics.sources.promanswer import QueryError
from analytics.sources.promapi import PromAPI, Series, label_value
from analytics.sources.promql import JOB_LOOKBACK_DAYS, PromQLSource
from domain.week import Window, days
from exporter.sampling.stalls import StallRule

APPROXIMATIONS = (
    "dcgm-exporter: utilisation is the DCGM_FI_DEV_GPU_UTIL gauge at each scrape (aliased between scrapes); "
    "a GPU's series repeated for several jobs or pods (hpc_job, time-slicing) count once",
    "dcgm-exporter: time covered = the GPU's scrapes x the configured scrape interval",
    "dcgm-exporter: SM activity from DCGM_FI_PROF_SM_ACTIVE where profiling metrics are enabled",
    "dcgm-exporter: energy from DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION per GPU across its series, "
    "else average power x time",
    "dcgm-exporter: per-pod and per-job rows from the pod and hpc_job labels: each holds its device (or MIG "
    "slice) for the scrapes it is listed in; holders listed together share it equally (no per-holder activity)",
)
MIG_NOTE = (
    "dcgm-exporter: {n} GPU(s) in MIG mode: one identity each; busy time from DCGM_FI_PROF_GR_ENGINE_ACTIVE of "
    "their instances (there is no DCGM_FI_DEV_GPU_UTIL under MIG), each instance weighted by its compute slices "
    "over the GPU's; a pod or job on an instance holds that share"
)
RESET = (
    "dcgm-exporter: an energy counter reset (a driver reload): that day's energy is the counter's growth scrape "
    "by scrape, each reading after the reset counted from it"
)
NO_UP = (
    "dcgm-exporter: no `up` series for its scrape targets: the exporter's own pod told from a workload "
    "by its container name ({containers}) or its host label"
)


def _reread(again: Again, label: str) -> Reread:
    def only(uuids: set[str]) -> Only | None:
        return Only(uuids, label) if uuids else None

    return Reread(only(again.copies), only(again.energy), only(again.gpus))


class DcgmSource(PromQLSource):
    name = "dcgm"
    first_metric = POWER

    def __init__(
        self,
        settings: PrometheusSettings,
        api: PromAPI | None = None,
        pod_labels: Sequence[str] = (),
        stall: StallRule | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(settings, api, pod_labels)
        self.stall = stall or StallRule()
        self.clock = clock
        cluster = [settings.cluster_label] if settings.cluster_label else []
        self.q = Queries(
            settings.dcgm_scrape_interval, [*GROUP, *settings.dcgm_host_labels, *cluster], settings.cluster_label
        )

    def gpus(self, w: Window) -> GpuFigures:
        """The GPUs and (carried to ``jobs``) their holders: both from the same answers."""
        spans = days(w)
        problems: list[str] = []
        notes = list(APPROXIMATIONS)
        s, n = self.s, len(CHEAP_KINDS)
        fig = Figures(
            spans, Options(s.dcgm_scrape_interval, s.dcgm_host_labels, s.cluster_label, s.dcgm_exporter_containers)
        )
        answers = self._ask([*(q for d in spans for q in self.q.cheap(d)), self.q.start_counter(w.start)])
        for d in range(len(spans)):
            fig.cheap(d, dict(zip(CHEAP_KINDS, answers[d * n : (d + 1) * n], strict=True)))
        fig.start = {uuid_of(x.labels): x.value for x in answers[-1]}
        targets = {v for groups in fig.groups for items in groups for k, v in items if k == "job"}  # scrape jobs
        rounds = [  # (day, its GPUs to read again, their (kind, query)s)
            (d, again, self.q.exact(spans[d], _reread(again, label)))
            for d in range(len(spans))
            for label, again in sorted(fig.to_read_again(d).items())
        ]
        second = self._ask(
            [q for _, _, asked in rounds for _, q in asked] + ([self.q.targets(w, targets)] if targets else [])
        )
        fig.scrape_targets(second[-1] if targets else [])
        fig.fold()
        answered = iter(second)
        for d, again, asked in rounds:
            fig.exact(d, again, {kind: next(answered) for kind, _ in asked})
        self._stalls(w, fig, problems)
        gpus, energy_of = rows.gpus(fig)
        if any(facts.resets for day in fig.days for facts in day.gpus.values()):
            notes.append(RESET)
        if mig := [g for g in gpus if g.busy_measure in (rows.GR_ENGINE, "mixed")]:
            notes.append(MIG_NOTE.format(n=len(mig)))
        if fig.unknown_profiles:
            problems.append(
                f"dcgm-exporter: MIG profiles not understood ({', '.join(sorted(fig.unknown_profiles))}): "
                "each counted as one compute slice"
            )
        return GpuFigures(tuple(gpus), tuple(notes), tuple(problems), carry=(fig, energy_of))

    def jobs(self, w: Window, g: GpuFigures) -> JobFigures:
        fig, energy_of = cast(tuple[Figures, dict[tuple[str, int], float]], g.carry)
        held = rows.holders(fig, g.gpus, energy_of)
        notes = []
        if any(j.job.pod for j in held) and not fig.targets:
            notes.append(NO_UP.format(containers=", ".join(self.s.dcgm_exporter_containers)))
        return JobFigures(tuple(held), tuple(notes))

    def _ask(self, queries: list[tuple[str, float]]) -> list[list[Series]]:
        try:
            return self.api.query_many(queries)
        except QueryError as e:
            raise SourceUnavailable(f"prometheus {self.s.url}: dcgm-exporter series: {e}") from e

    # --- where a job ran -------------------------------------------------------------------

    def job_selectors(self, job: str, namespace: str, pod: str) -> list[str]:
        """A Slurm job id (``hpc_job``) or a pod, under any of dcgm-exporter's and Prometheus' spellings."""
        if namespace:
            return [f'{p}="{label_value(pod)}", {n}="{label_value(namespace)}"' for p, n, _ in POD_SETS]
        return [f'{HPC_JOB}="{label_value(job)}"', *(f'{p}="{label_value(job)}"' for p, _, _ in POD_SETS)]

    def span_of(self, selectors: Sequence[str], now: float) -> Span | None:
        """From the first to the end of the last scrape that lists the job, over any selector."""
        stamps = " or ".join(f"timestamp({POWER}{{{sel}}})" for sel in selectors)
        over = f"[{JOB_LOOKBACK_DAYS}d:1m]"
        with self.api.report():
            got = self.api.query_many(
                [(f"min(min_over_time(({stamps}){over}))", now), (f"max(max_over_time(({stamps}){over}))", now)]
            )
        if not got[0] or not got[1]:
            return None
        start = got[0][0].value // 60 * 60
        return Span(start, max(start + 60.0, math.ceil(got[1][0].value / 60) * 60.0))

    def _stalls(self, w: Window, fig: Figures, problems: list[str]) -> None:
        """Stalled scrapes, scrape by scrape, where a coarse search (blocks of half the rule's
        minimum: range functions only) found a device stalled a whole block; everywhere where the
        minimum is too short for that."""
        i, rule, now = self.s.dcgm_scrape_interval, self.stall, self.clock()
        profiled: dict[str, set[str]] = {}  # the GPUs with SM activity, by the label that names them
        for day in fig.days:
            for dev in day.profiled:
                profiled.setdefault(day.gpus[dev.uuid].spelling, set()).add(dev.uuid)
        grid = stalls.chunks(w, i, rule.min_seconds, now)
        size = stalls.block(i, rule.min_seconds)
        spans: list[tuple[float, float, Only | None]]
        try:
            if not profiled:
                return
            if size is None:
                spans = [(a, b, None) for a, b in grid]
            else:
                coarse = [
                    (self.q.stalled_blocks(rule, size, Only(uuids, label)), a, b, size)
                    for label, uuids in sorted(profiled.items())
                    for a, b in stalls.chunks(w, size, rule.min_seconds, now)
                ]
                blocks = [s for got in self.api.query_range_many(coarse) for s in got]
                spans = [
                    (a, b, Only(uuids, label))
                    for a, b, by_label in stalls.candidates(blocks, size, i, grid, rule.min_seconds)
                    for label, uuids in sorted(by_label.items())
                ]
            answers = self.api.query_range_many([(self.q.stalled(rule, only), a, b, i) for a, b, only in spans])
            listed = [
                (self.q.stalled_copies(rule, only), a, b, i)
                for (a, b, only), got in zip(spans, answers, strict=True)
                if got
            ]
            found = [s for got in answers for s in got]
            copies = [s for got in self.api.query_range_many(listed) for s in got]
        except QueryError as e:
            problems.append(f"dcgm-exporter stalled time: {e}")
            return
        # one pass over all of them: a run that crosses two range queries is judged whole
        stalls.apply(found, copies, w, i, rule.min_seconds, fig.holder_of, fig.add_stalled)
