"""``gpuledger statement``: one group's jobs of a month or an ISO week (a user's, account's or
namespace's: the groupings of analytics.report.groupings with a ``statement``), each its row of the
report for that window, with totals (the sum of those rows), the idle and failed-job cost where
known and the scaling advice. A job's key is the grouping's, as in the report (a job without the
attribute is under the row's none key: ``(none)``, a user ``(unknown)``)."""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from analytics.config import FullSettings
from analytics.report import groupings
from analytics.report.build import job_key
from analytics.report.groupings import UNKNOWN_USER, Grouping
from analytics.report.model import CostRow, Report
from analytics.sources import Source
from analytics.statements.advice import efficiencies, scaling_advice
from analytics.statements.locate import job_states
from analytics.statements.read import read
from domain.states import FAILED
from domain.week import JobWeek, Window, iso_week

_MONTH = re.compile(r"(\d{4})-(\d{2})")


def by(grouping: str) -> Grouping:
    """The row of a grouping statements are made by; ValueError naming those there are."""
    g = groupings.find(grouping)
    if g is None or not g.statement:
        raise ValueError(f"unknown grouping {grouping!r}; choose from {', '.join(names())}")
    return g


def names() -> list[str]:
    """The groupings statements are made by (``gpuledger statement --<name>``, ``[statements] by``)."""
    return groupings.names(lambda g: bool(g.statement))


def month(label: str, timezone: str = "UTC") -> Window:
    """'2026-11' -> the 1st 00:00 to the next month's 1st 00:00 in ``timezone``."""
    m = _MONTH.fullmatch(label)
    if m is None or not 1 <= int(m[2]) <= 12:
        raise ValueError(f"{label!r} is not a month like 2026-11")
    year, mon = int(m[1]), int(m[2])
    tz = zoneinfo.ZoneInfo(timezone)
    start = dt.datetime(year, mon, 1, tzinfo=tz)
    end = dt.datetime(year + mon // 12, mon % 12 + 1, 1, tzinfo=tz)
    return Window(start.timestamp(), end.timestamp(), label, timezone)


def previous_month(now: float, timezone: str = "UTC") -> Window:
    """The calendar month before the one ``now`` falls in."""
    d = dt.datetime.fromtimestamp(now, zoneinfo.ZoneInfo(timezone))
    y, m = (d.year, d.month - 1) if d.month > 1 else (d.year - 1, 12)
    return month(f"{y:04d}-{m:02d}", timezone)


def period(month_label: str | None, week_label: str | None, timezone: str) -> Window:
    """The statement's window from ``--month`` or ``--week`` (exactly one)."""
    if (month_label is None) == (week_label is None):
        raise ValueError("give one of --month YYYY-MM and --week YYYY-Www")
    return month(month_label, timezone) if month_label else iso_week(week_label or "", timezone)


@dataclass(frozen=True)
class JobLine:
    job: str
    user: str
    partition: str
    state: str  # the final state where the source records it, else ""
    row: CostRow


@dataclass(frozen=True)
class Totals:
    jobs: int
    held_gpu_hours: float
    charged_gpu_hours: float
    busy_gpu_hours: float
    sm_active_gpu_hours: float | None
    useful_gpu_hours: float
    stalled_gpu_hours: float | None
    energy_kwh: float | None
    hardware_cost: float
    energy_cost: float
    total_cost: float
    idle_cost: float
    failed_cost: float | None  # None: the source does not record jobs' states
    co2e_kg: float | None


@dataclass(frozen=True)
class Statement:
    grouping: str  # user | account | namespace: a grouping with a statement (analytics.report.groupings)
    key: str
    window: Window
    currency: str
    source: str
    complete: bool
    incomplete_reasons: list[str]
    jobs: list[JobLine]
    totals: Totals
    advice: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _opt_sum(values: list[float | None]) -> float | None:
    return None if not values or all(v is None for v in values) else sum(v or 0.0 for v in values)


def totals(lines: list[JobLine], states_known: bool) -> Totals:
    """The sum of the jobs' rows, column by column (None where no row measured it)."""
    rows = [x.row for x in lines]
    return Totals(
        jobs=len(rows),
        held_gpu_hours=sum(r.allocated_gpu_hours or 0.0 for r in rows),
        charged_gpu_hours=sum(r.sampled_gpu_hours for r in rows),
        busy_gpu_hours=sum(r.busy_gpu_hours for r in rows),
        sm_active_gpu_hours=_opt_sum([r.sm_active_gpu_hours for r in rows]),
        useful_gpu_hours=sum(r.useful_gpu_hours for r in rows),
        stalled_gpu_hours=_opt_sum([r.stalled_gpu_hours for r in rows]),
        energy_kwh=_opt_sum([r.energy_kwh for r in rows]),
        hardware_cost=sum(r.hardware_cost for r in rows),
        energy_cost=sum(r.energy_cost for r in rows),
        total_cost=sum(r.total_cost for r in rows),
        idle_cost=sum(r.idle_cost for r in rows),
        failed_cost=sum(x.row.total_cost for x in lines if x.state in FAILED) if states_known else None,
        co2e_kg=_opt_sum([r.co2e_kg for r in rows]),
    )


def advice(lines: list[JobLine], eff: dict[int, float]) -> list[str]:
    """One sentence per GPU count of the group's multi-GPU jobs that the benchmarks measured."""
    counts = Counter(x.row.gpus for x in lines if x.row.gpus >= 2)
    return [a for n in sorted(counts) if (a := scaling_advice(n, eff, many=True))]


def statement(
    source: Source, grouping: str, key: str, window: Window, s: FullSettings, now: float | None = None
) -> Statement:
    """The group's statement for ``window`` (its jobs may be none: a statement of no jobs)."""
    by(grouping)
    got = read(source, window, s, now=now)
    return statement_of(got.data.jobs, got.report, grouping, key, job_states(source, window.start, window.end))


def statement_of(
    jobs: Sequence[JobWeek],
    report: Report,
    grouping: str,
    key: str,
    states: dict[str, str] | None,
) -> Statement:
    """The statement from a window's job figures and its report (one read serves many groups)."""
    g = by(grouping)
    mine = _Group()
    for j in jobs:
        if g.of_job(j) == key:
            mine.add(j)
    return _Shared(report, states).statement(grouping, key, mine)


def statements_of(
    jobs: Sequence[JobWeek], report: Report, grouping: str, states: dict[str, str] | None
) -> Iterator[Statement]:
    """Every key's statement (``keys`` order) from one pass over the jobs, each yielded as it is
    made: a month of 100,000 jobs is written statement by statement, never held all at once, and
    costs one pass, not one per key (``bench/statements_scale.py``)."""
    g = by(grouping)
    groups: dict[str, _Group] = {}
    for j in jobs:
        k = g.of_job(j)
        if (mine := groups.get(k)) is None:
            mine = groups[k] = _Group()
        mine.add(j)
    if set(groups) <= {g.none}:
        return  # no job has the attribute: no statements, as keys() says
    shared = _Shared(report, states)
    for key in sorted(groups):
        yield shared.statement(grouping, key, groups.pop(key))


class _Group:
    """One key's jobs: each job's first figures and its first partition named."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobWeek] = {}
        self.partitions: dict[str, str] = {}

    def add(self, j: JobWeek) -> None:
        k = job_key(j)
        self.jobs.setdefault(k, j)
        self.partitions[k] = self.partitions.get(k) or j.partition


class _Shared:
    """What every statement of one window reads from its report, computed once."""

    def __init__(self, report: Report, states: dict[str, str] | None) -> None:
        self.report = report
        self.states = states
        self.rows = {r.key: r for r in report.group("job")}
        self.notes = list(report.window_notes())
        if states is None:
            self.notes.append("failed-job cost not known: this source does not record each job's final state")
        self.eff = efficiencies(report)

    def statement(self, grouping: str, key: str, mine: _Group) -> Statement:
        rows, states, report = self.rows, self.states or {}, self.report

        def worst_waste_first(kv: tuple[str, JobWeek]) -> tuple[float, float, str]:
            """The jobs whose hours were least useful, by what those hours cost (idle cost), then cost."""
            r = rows.get(kv[0])
            return (-r.idle_cost, -r.total_cost, kv[0]) if r is not None else (0.0, 0.0, kv[0])

        lines = [
            JobLine(
                k,
                j.job.user or UNKNOWN_USER,
                mine.partitions[k],
                states.get(j.job.job_id, "") if j.job.job_id else "",
                rows[k],
            )
            for k, j in sorted(mine.jobs.items(), key=worst_waste_first)
            if k in rows
        ]
        return Statement(
            grouping=grouping,
            key=key,
            window=Window(report.start, report.end, report.week, report.timezone),
            currency=report.currency,
            source=report.source,
            complete=report.complete,
            incomplete_reasons=list(report.incomplete_reasons),
            jobs=lines,
            totals=totals(lines, self.states is not None),
            advice=advice(lines, self.eff),
            notes=list(self.notes),
        )


def keys(jobs: Sequence[JobWeek], grouping: str) -> list[str]:
    """Every key of ``grouping`` among the window's jobs; none where no job has the attribute
    (a grouping without data, as the report shows no section for it)."""
    g = by(grouping)
    found = {g.of_job(j) for j in jobs}
    return [] if found <= {g.none} else sorted(found)
