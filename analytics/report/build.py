"""Week data + cost model -> the report. Pure arithmetic, no I/O.

Per GPU: hardware cost = the matching rule's hourly rate × the window's charged hours (a GPU costs
whether or not it works; only what happened: from the first data, when the history begins inside
the window, up to now, when the window ends later); energy cost from its energy (flat price or
tariff, × PUE); emissions from the same energy × PUE × the grid's carbon intensity (hour by hour
where it varies and the source has hourly energy; None where no intensity is set); useful hours =
busy hours less the stalled ones, or SM-active hours (``cost.useful``; GPU by GPU, and every row
says which it counted: ``analytics.report.useful``); effective cost per useful
GPU-hour = total / useful (None below ``cost.min_useful_gpu_hours``); idle cost = the hardware (or
rental) rate × the charged hours that were not useful (so it adds up across GPUs and across days;
the energy an idle GPU draws stays in the energy cost). Groups (host, model, fleet) sum their GPUs.

Chargeback conserves cost: a job pays its GPU's rate for its *charged* time (its share of the
GPU's rounds when jobs share it; the held time where the source has no shares) plus its
apportioned energy (and the same share of the GPU's emissions); on each GPU, its jobs together
never pay more, in any column, than the GPU costs (scaled down where a source's figures would say
otherwise), and what no job paid is the ``unallocated`` row. Users + unallocated = jobs +
unallocated = hosts = fleet.

Groupings (``group_by``, from ``[analytics] group_by``; each a row of the table in
:mod:`analytics.report.groupings`): a job grouping (user, namespace, account, partition, qos,
``label:<name>`` for a chosen pod label) sums the jobs' charged figures as the jobs do, so each +
unallocated = the fleet; a job without the attribute goes to the row's none key ``(none)`` (a
user-less job to ``(unknown)``). A GPU grouping (cluster) sums its GPUs' figures, as host: the
clusters = the fleet. A grouping whose only key is ``(none)`` (no job or GPU has its attribute) has
no rows.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from analytics.cost import CostModel, PriceRule, gpu_co2e, gpu_cost
from analytics.report import groupings, judge
from analytics.report.chargeback import Charged, Ints, Sums, charge_all, keyed, summed
from analytics.report.groupings import GROUP_BY as GROUP_BY
from analytics.report.groupings import NONE as NONE
from analytics.report.groupings import UNKNOWN_USER, Grouping
from analytics.report.ledger import Acc, Fig, ratio, sum_known
from analytics.report.model import (
    TOP_IDLE,
    TOP_LINKS,
    TOP_STALLED,
    UNALLOCATED,
    CostRow,
    IdleRow,
    LinkRow,
    PriceRow,
    Report,
    StalledRow,
    window_notes,
)
from analytics.report.useful import sm_gpus, useful_seconds
from analytics.report.week_rows import _daily, _failures, _queue, _rent
from domain.jobs import CLUSTER_SEP
from domain.week import JobAttrs, WeekData

GROUPINGS = GROUP_BY  # every grouping name but label:<name> (its old name here)
JobAttr = tuple[str, Callable[[JobAttrs], str], str]  # (grouping, the job's attribute, its none key)


def build(
    data: WeekData,
    cost: CostModel,
    *,
    previous: WeekData | None = None,
    min_coverage: float = 0.99,
    now: float | None = None,
    group_by: Sequence[str] = GROUP_BY,
) -> Report:
    w = data.window
    chosen = groupings.chosen(group_by)
    attrs: list[JobAttr] = [(g.name, g.job, g.none) for g in chosen if g.job is not None]
    by_gpu = [(g.name, g.gpu, g.none) for g in chosen if g.gpu is not None]
    generated = now or time.time()
    # only what happened: charge from the first data (a window starting before the history) up
    # to now (a window ending later)
    first = data.history_start
    clipped = first is not None and first > w.start
    start = min(first, w.end) if first is not None and clipped else w.start
    end = max(start, min(w.end, generated))
    charged_s = end - start
    groups: dict[str, dict[str, Acc]] = defaultdict(lambda: defaultdict(Acc))
    fleet = Acc()
    gpu_figs: dict[str, Fig] = {}
    hourly: dict[str, float] = {}  # uuid -> hardware cost of an hour
    per_joule: dict[str, float] = {}  # uuid -> the GPU's effective energy price (tariff included)
    co2e_per_joule: dict[str, float | None] = {}  # uuid -> kg CO2e per joule (None: no intensity or energy)
    mean_intensity: list[str] = []  # GPUs whose hourly intensity was applied at the window's mean
    mean_tariff: list[str] = []  # GPUs whose energy the tariff priced at its mean (no hourly energy)
    unpriced: set[str] = set()
    priced: dict[tuple[str, str], PriceRule] = {}  # (host, model) -> the rule that prices its GPUs
    priced_gpus: Counter[tuple[str, str]] = Counter()
    by_sm, measure_notes = sm_gpus(data, cost)  # the GPUs whose useful hours are SM-active ones
    for g in data.gpus:
        rule = cost.rule_for(g.model, g.host)
        if rule is None:
            unpriced.add(f"{g.model} on {g.host}")
        else:
            priced.setdefault((g.host, g.model), rule)
            priced_gpus[(g.host, g.model)] += 1
        hourly[g.uuid] = rule.hourly() if rule is not None else 0.0
        charged = (start, round(charged_s / 3600))
        c = gpu_cost(cost, rule, charged_s / 3600, g.energy_j, g.energy_by_hour, w.start, w.timezone, charged)
        if c.tariff_mean:
            mean_tariff.append(g.uuid)
        per_joule[g.uuid] = c.energy / g.energy_j if g.energy_j else 0.0
        co2e = gpu_co2e(cost, g.host, g.energy_j, g.energy_by_hour, w.start, w.timezone, charged)
        if co2e.mean_applied:
            mean_intensity.append(g.uuid)
        co2e_per_joule[g.uuid] = None if co2e.co2e_kg is None else co2e.co2e_kg / g.energy_j if g.energy_j else 0.0
        useful = useful_seconds(g.busy_s, g.sm_active_s, g.stalled_s, g.uuid in by_sm)
        fig = Fig(
            gpus=1,
            available_s=charged_s,
            sampled_s=g.sampled_s,
            busy_s=g.busy_s,
            useful_s=useful,
            sm_s=g.sm_active_s,
            alloc_s=g.allocated_s,
            idle_s=g.allocated_idle_s,
            energy_j=g.energy_j,
            hardware=c.hardware,
            energy_cost=c.energy,
            idle_cost=hourly[g.uuid] * max(0.0, charged_s - useful) / 3600,
            stalled_s=g.stalled_s,
            co2e_kg=co2e.co2e_kg,
            use_sm=g.uuid in by_sm,
            busy_measure=g.busy_measure,
            energy_measure=g.energy_measure,
        )
        gpu_figs[g.uuid] = fig
        fleet.add(fig)
        for group, key in (("host", g.host), ("model", g.model), ("gpu", f"{g.host}/{g.gpu} {g.uuid}")):
            groups[group][key].add(fig)
        for name, attr, none in by_gpu:
            groups[name][attr(g) or none].add(fig)
    # every job row charged on its GPU at once (columns), then added up by job and by the key tuple
    # of its groupings (user, account, ...: a few hundred at most), which go into each grouping's rows
    ch = charge_all(data.jobs, gpu_figs, hourly, per_joule, co2e_per_joule)
    unallocated = ch.unallocated
    job_keys, at_job = keyed(ch, job_key)
    jobs = summed(ch, at_job, len(job_keys))
    tuples, at_keys = keyed(ch, lambda j: tuple(attr(j) or none for _, attr, none in attrs))
    by_keys = summed(ch, at_keys, len(tuples), uuids=True)
    for i, keys in enumerate(tuples):
        acc = by_keys.acc(i)
        for (group, _, _), k in zip(attrs, keys, strict=True):
            groups[group][k].merge(acc)
    holders = Holders(ch, at_job, job_keys)
    # jobs on a GPU the source has no figures for: nothing to charge them, and their hours are
    # not the fleet's; left out, and said so (every grouping still adds up to the fleet)
    orphans = Counter(j.uuid for j in ch.orphans)
    min_h = cost.min_useful_gpu_hours
    rows = [
        acc.row(group, key, min_h) for group in ("host", "model", "gpu") for key, acc in sorted(groups[group].items())
    ]
    ordered = sorted(chosen, key=lambda g: g.scope != groupings.JOB)  # the job groupings, then the GPU ones
    rows += _grouping_rows(groups, [g for g in ordered if g.first], min_h)
    by_key = sorted(range(len(job_keys)), key=job_keys.__getitem__)
    rows += jobs.rows("job", [job_keys[i] for i in by_key], by_key, min_h)
    rows += _grouping_rows(groups, [g for g in ordered if not g.first], min_h)
    rows.append(unallocated.row(UNALLOCATED, UNALLOCATED, min_h))
    fleet_row = fleet.row("fleet", "fleet", min_h)
    reasons = list(data.problems)
    if not data.gpus:
        reasons.append("no GPU data in this window")
    elif fleet_row.coverage < min_coverage:
        gaps = sum(1 for g in data.gpus if g.sampled_s < min_coverage * charged_s)
        reasons.append(
            f"coverage {100 * fleet_row.coverage:.1f} % (< {100 * min_coverage:.0f} %): "
            f"{gaps} of {len(data.gpus)} GPUs have gaps"
        )
    if unpriced:
        reasons.append("no price for " + ", ".join(sorted(unpriced)))
    prev_report = (  # for the fleet's and queue's week-over-week figures only: no groupings
        build(previous, cost, min_coverage=min_coverage, now=generated, group_by=()) if previous is not None else None
    )
    in_progress = w.end > generated
    elapsed = (end - w.start) / w.seconds if w.seconds > 0 else 1.0
    notes = ["example prices: set [cost] for yours"] if cost.example_prices else []
    notes += window_notes(in_progress, elapsed, start if clipped else None, w.timezone)
    notes += measure_notes
    return Report(
        week=w.label,
        start=w.start,
        end=w.end,
        timezone=w.timezone,
        generated_at=generated,
        currency=cost.currency,
        useful_measure=fleet_row.useful_measure,
        source=data.source,
        approximations=[
            *data.approximations,
            *_mean_applied(mean_intensity, "emissions", "hourly carbon intensity"),
            *_mean_applied(mean_tariff, "energy cost", "tariff"),
            *_orphan_note(orphans),
            *_integrated_note(data),
        ],
        example_prices=cost.example_prices,
        complete=not reasons,
        incomplete_reasons=reasons,
        coverage=fleet_row.coverage,
        fleet=fleet_row,
        rows=rows,
        daily=_daily(data),
        queue=_queue(data),
        failures=_failures(data),
        benchmarks=judge.benchmarks(data.bench, previous.bench if previous else None, data.window.timezone),
        multi_gpu=judge.multi_gpu(data.bench, fleet_row),
        scaling=judge.scaling(data.bench, data.window.timezone),
        rent_vs_buy=_rent(data, cost, rows),
        deltas=judge.deltas(
            fleet_row,
            prev_report.fleet if prev_report else None,
            _queue(data),
            prev_report.queue if prev_report else [],
        ),
        notes=notes,
        prices=[
            PriceRow(
                host,
                model,
                rule.kind,
                priced_gpus[(host, model)],
                rule.hourly(),
                rule.energy_included,
                cost.example_prices,
            )
            for (host, model), rule in sorted(priced.items())
        ],
        charged_start=start,
        charged_end=end,
        history_start=start if clipped else None,
        in_progress=in_progress,
        elapsed=elapsed,
        idle_holders=_idle_holders(jobs, job_keys, holders),
        stalled_jobs=_stalled_jobs(jobs, job_keys, holders),
        link_jobs=_link_jobs(jobs, job_keys, holders, ch, at_job),
    )


def job_key(j: JobAttrs) -> str:
    """A job row's key: the Slurm job id, else ``namespace/pod``, else the user's unattributed
    time; ``cluster:`` before it where the window spans several clusters (``site-a:1001``)."""
    k = j.job
    key = k.job_id or (f"{k.namespace}/{k.pod}" if k.pod else f"{k.user or '?'} (no job)")
    return f"{j.cluster}{CLUSTER_SEP}{key}" if j.cluster else key


def _grouping_rows(groups: dict[str, dict[str, Acc]], chosen: Iterable[Grouping], min_h: float) -> list[CostRow]:
    """Each grouping's rows by key, ``(none)`` last; none for a grouping whose only key is ``(none)``
    (no job or GPU has the attribute; a user-less job's ``(unknown)`` is a user's key like any)."""
    out: list[CostRow] = []
    for group in (g.name for g in chosen):
        accs = groups.get(group, {})
        if not accs or set(accs) == {NONE}:
            continue
        out += [acc.row(group, key, min_h) for key, acc in sorted(accs.items(), key=lambda kv: (kv[0] == NONE, kv[0]))]
    return out


def _integrated_note(data: WeekData) -> list[str]:
    """The GPUs whose energy was integrated from power samples (no energy counter), named."""
    gpus = sorted(f"{g.host}/{g.gpu}" for g in data.gpus if g.energy_measure)
    if not gpus:
        return []
    shown = ", ".join(gpus[:10]) + (f" and {len(gpus) - 10} more" if len(gpus) > 10 else "")
    return [
        f"energy of {len(gpus)} GPU(s) integrated from power samples, not read from an energy counter "
        f"(they have none: before Volta): {shown}"
    ]


def _orphan_note(rows: Counter[str]) -> list[str]:
    """The job rows on GPUs without figures (their count by GPU), left out."""
    if not rows:
        return []
    n, first = sum(rows.values()), min(rows)
    return [f"{n} job rows on {len(rows)} GPUs without GPU figures in this window are left out (e.g. {first})"]


class Holders:
    """Each job's (user, partition), asked for the few jobs a table shows: its first charged row's
    user (``(unknown)`` where it has none) and the first partition its rows name."""

    def __init__(self, ch: Charged, at: Ints, keys: Sequence[str]) -> None:
        self.ch, self.at, self.index = ch, at, {k: i for i, k in enumerate(keys)}
        self.known: dict[str, tuple[str, str]] = {}

    def __getitem__(self, key: str) -> tuple[str, str]:
        if (got := self.known.get(key)) is None:
            rows = [self.ch.row(p) for p in np.flatnonzero(self.at == self.index[key]).tolist()]
            got = self.known[key] = (
                rows[0].job.user or UNKNOWN_USER,
                next((j.partition for j in rows if j.partition), ""),
            )
        return got


def _mean_applied(uuids: list[str], what: str, hourly: str) -> list[str]:
    """The approximation note where an hourly table (a tariff, carbon windows) met GPUs without
    hourly energy: ``what`` of them was taken at the table's mean over the charged hours."""
    if not uuids:
        return []
    return [
        f"{what} of {len(uuids)} GPUs at the {hourly}'s mean over the charged hours: the source has no hourly "
        f"energy for them, so the {hourly} could not be applied hour by hour"
    ]


def _stalled_jobs(jobs: Sums, keys: Sequence[str], holders: Holders) -> list[StalledRow]:
    """The jobs with the most stalled GPU-hours, worst first."""
    stalled, cost = jobs.known["stalled"].tolist(), jobs.summed["stalled_cost"].tolist()
    top = heapq.nsmallest(TOP_STALLED, ((-(s / 3600), key, i) for i, key in enumerate(keys) if (s := stalled[i]) > 0))
    return [StalledRow(holders[key][0], key, holders[key][1], jobs.gpus[i], -h, cost[i]) for h, key, i in top]


def _link_jobs(
    jobs: Sums,
    keys: Sequence[str],
    holders: Holders,
    ch: Charged,
    at: Ints,
) -> list[LinkRow]:
    """The multi-GPU jobs with the most GPU-hours, and their links' traffic per charged GPU-hour
    (where the source measured it on some GPU of the job; ``at``: each charged row's job)."""
    sampled = jobs.summed["time"]
    top = heapq.nsmallest(
        TOP_LINKS, ((-sampled[i], key, i) for i, key in enumerate(keys) if jobs.gpus[i] >= 2 and sampled[i] > 0)
    )
    nvlink: dict[int, list[float | None]] = {i: [] for _, _, i in top}
    pcie: dict[int, list[float | None]] = {i: [] for _, _, i in top}
    for p in np.flatnonzero(np.isin(at, list(nvlink))).tolist():
        j = ch.row(p)
        nvlink[int(at[p])].append(j.nvlink_bytes)
        pcie[int(at[p])].append(j.pcie_bytes)

    def per_hour(values: list[float | None], h: float) -> float | None:
        total = sum_known(values)
        return None if total is None or h <= 0 else total / 1e9 / h

    out = []
    for _, key, i in top:
        h = sampled[i] / 3600
        user, part = holders[key]
        util = ratio(jobs.summed["busy"][i], sampled[i])
        out.append(LinkRow(user, key, part, jobs.gpus[i], h, util, per_hour(nvlink[i], h), per_hour(pcie[i], h)))
    return out


def _idle_holders(jobs: Sums, keys: Sequence[str], holders: Holders) -> list[IdleRow]:
    """The jobs that held GPUs idle, worst (highest idle cost) first: whatever their total cost."""
    sampled, useful, cost = jobs.summed["time"], jobs.summed["useful"], jobs.summed["idle_cost"]
    top = heapq.nsmallest(
        TOP_IDLE,
        ((-cost[i], -(sampled[i] - useful[i]), key, i) for i, key in enumerate(keys) if sampled[i] > useful[i]),
    )
    return [
        IdleRow(holders[key][0], key, holders[key][1], jobs.gpus[i], -idle_s / 3600, -c) for c, idle_s, key, i in top
    ]
