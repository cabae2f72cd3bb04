"""Counter totals from the rollup rules' series: no raw sample decoded.

Two levels (deploy/prometheus/rules/): ``gpuledger:<counter>:increase5m``, each counter's growth
per 5-minute bucket, and ``gpuledger:<counter>:increase1h``, twelve of those summed. A span of time
is read as the hourly buckets inside it plus the 5-minute buckets between the last hour and each
edge, in one PromQL expression (``span``): a week of 10,000 GPUs is 1.7 M hourly samples per
counter, not 20 M. Where the hourly rules have not run over the whole window the 5-minute buckets
alone are read; where those have not either, the raw series (``analytics.sources.counters``).

Both levels give the same sums: an hourly bucket is its twelve 5-minute buckets. Where the
5-minute buckets do not end on the window's edges (a rule group's phase: ``Grid.gap``), the
minutes between are read from the raw series, so the window's totals are the raw series' exactly.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from analytics.sources.counters import DayGrowth, DayTotals, by_uuid, missing_labels
from analytics.sources.promanswer import QueryError
from analytics.sources.promapi import PromAPI, label_value, rng
from domain.week import Window, days

BUCKET = 300.0  # the 5-minute rollups' bucket: their groups' interval, seconds
HOUR = 3600.0  # the hourly rollups' bucket
LAG = 300.0  # an hourly bucket stamped t holds the 5-minute buckets stamped in (t - LAG - HOUR, t - LAG]


def rollup(counter: str) -> str:
    """The 5-minute rollup of a counter: ``gpuledger_gpu_busy_seconds_total`` ->
    ``gpuledger:gpu_busy_seconds:increase5m``."""
    return f"gpuledger:{counter.removeprefix('gpuledger_').removesuffix('_total')}:increase5m"


def hourly_rollup(counter: str) -> str:
    """The hourly rollup of a counter: ``gpuledger:gpu_busy_seconds:increase1h``."""
    return rollup(counter).removesuffix("5m") + "1h"


def _next(x: float, phase: float, period: float) -> float:
    """The first stamp after ``x`` (strictly) of buckets stamped at ``phase`` modulo ``period``."""
    return x + period - ((x - phase) % period)


@dataclass(frozen=True, slots=True)
class Grid:
    """Where one rule group's buckets are stamped. Groups run at a phase of their own (Prometheus
    derives it from the group's name and file; vmalert runs on the clock), the same for each bucket.

    A span of buckets is read with a range that ends between two stamps, never on one: VictoriaMetrics
    leaves out a series whose first sample is exactly at a query's end (a job that began in that
    bucket), and Prometheus before 3.0 includes a range's start where later versions do not."""

    five: float  # a 5-minute bucket's stamp modulo 5 minutes
    hour: float | None = None  # an hourly bucket's stamp modulo an hour; None: hourly buckets not read

    def end(self, x: float) -> float:
        """The end of the last hourly bucket that ends at or before ``x``: the 5-minute buckets
        stamped up to it are in hourly buckets (``hour`` set)."""
        assert self.hour is not None
        return round(x - ((x - (self.hour - LAG)) % HOUR), 3)

    def fives(self, counter: str, a: float, b: float) -> str:
        """PromQL: each series' 5-minute buckets of ``counter`` stamped in (a, b], added up."""
        # moved later by half the room before the next stamp at either end: the same buckets inside
        room = min(_next(a, self.five, BUCKET) - a, _next(b, self.five, BUCKET) - b)
        shift = math.floor(room * 1000 / 2) / 1000
        return f"sum_over_time({rollup(counter)}[{round((b - a) * 1000)}ms] @ {b + shift:.3f})"

    def hours(self, counter: str, a: float, b: float) -> str:
        """PromQL: each series' hourly buckets stamped in (a, b] (two stamps: ``hour`` set), added up."""
        return f"sum_over_time({hourly_rollup(counter)}[{round((b - a) * 1000)}ms] @ {b + HOUR / 2:.3f})"

    def span(self, counter: str, a: float, b: float) -> str:
        """PromQL: each series' growth of ``counter`` in the 5-minute buckets stamped in (a, b]: with
        ``hour``, the hourly buckets inside and the 5-minute ones at the edges (``@``: it may be
        evaluated at any time). Several series with the same labels (one per part): sum them."""
        if self.hour is None or (eb := self.end(b)) <= (ea := self.end(a)):  # or under an hour
            return self.fives(counter, a, b)
        parts = [("h", self.hours(counter, ea + LAG, eb + LAG))]
        if b > eb:
            parts.append(("b", self.fives(counter, eb, b)))
        if a > ea:  # the hourly bucket holding a also holds (ea, a]: taken back out
            parts.append(("a", "-" + self.fives(counter, ea, a)))
        if len(parts) == 1:
            return parts[0][1]
        return " or ".join(f'label_replace({q}, "rollup_part", "{p}", "", "")' for p, q in parts)

    def gap(self, t: float) -> float:
        """Seconds from the last 5-minute bucket stamped at or before ``t`` to ``t``."""
        return round((t - self.five) % BUCKET, 3)


def _instants(w: Window) -> list[float]:
    """One bucket into each day of ``w``, and its end."""
    return sorted({min(d.start + BUCKET, w.end) for d in days(w)} | {w.end})


def rollups_cover(api: PromAPI, w: Window, counter: str) -> bool:
    """Whether the 5-minute rollup of ``counter`` names every GPU its raw series names one bucket
    into each day of ``w`` and at its end: the rules ran (or were backfilled) over the whole window."""
    queries = [(f"count by (uuid) ({name})", t) for t in _instants(w) for name in (counter, rollup(counter))]
    answers = api.query_many(queries)
    seen = False
    for raw, rolled in zip(answers[::2], answers[1::2], strict=True):
        if set(by_uuid(raw)) - set(by_uuid(rolled)):
            return False
        seen = seen or bool(rolled)
    return seen


def records_cover(api: PromAPI, w: Window, rolled: Mapping[str, str]) -> bool:
    """Whether each record series (a gauge: a job's info) has its 5-minute record ``rolled[raw]``
    where the raw one has samples in the first hour of each day of ``w`` and in its last hour:
    the records' rules ran over the window (a rule file from before them would leave the window's
    jobs without their accounts). The records are looked for up to a bucket later than the raw
    samples (a sample's record is stamped after it). Vacuous where no job ran at those hours, so
    read beside the counters' check, which never is (every GPU has a series)."""
    ends = sorted({min(d.start + HOUR, w.end) for d in days(w)} | {w.end})
    queries = [
        q
        for t in ends
        for raw, roll in rolled.items()
        for q in (
            (f"count(last_over_time({raw}[{rng(HOUR)}]))", t),
            (f"count(last_over_time({roll}[{rng(HOUR)}]))", t + BUCKET),
        )
    ]
    answers = api.query_many(queries)
    return not any(raw and not roll for raw, roll in zip(answers[::2], answers[1::2], strict=True))


def grid(api: PromAPI, w: Window, counter: str, hourly: bool = True) -> Grid:
    """Where the rollups of ``counter`` are stamped; with ``hourly``, the hourly ones too where they
    cover ``w`` (``hours_cover``)."""
    stamp = last_stamp(api, rollup(counter), w.end)
    if stamp is None:  # none in the two hours before the window's end: any in the window
        stamp = last_stamp(api, rollup(counter), w.end, w.seconds)
    if stamp is None:
        stamp = w.end
    five = Grid(round(stamp % BUCKET, 3))
    return (hours_cover(api, w, counter, five) or five) if hourly else five


def hours_cover(api: PromAPI, w: Window, counter: str, five: Grid) -> Grid | None:
    """``five`` with the hourly rollup of ``counter``'s phase, where they cover ``w``: for the first
    hour of the window, its middle day's last hour and its last hour, every GPU with 5-minute buckets
    in the hour has its hourly bucket, stamped where the phase says, holding what the 5-minute
    buckets add up to; and the hour before the window's end holds one bucket per series (not one
    every 5 minutes: a vmalert replay without ``-datasource.queryStep=0s``). Else None.

    Three hours, not every day's: each check reads every series of the day (192,000 job series at
    10,000 GPUs: half a second each); rules that began late (no backfill) fail the first, rules that
    stopped fail the last, and a gap between is what the middle day may catch."""
    name = hourly_rollup(counter)
    stamp = last_stamp(api, name, w.end + LAG)
    if stamp is None:
        return None
    g = Grid(five.five, round(stamp % HOUR, 3))
    spans = days(w)
    ends = {g.end(w.start) + HOUR, g.end(spans[len(spans) // 2].end), g.end(w.end)}
    ends = {e for e in ends if w.start < e <= w.end}
    if not ends:
        return None
    last = g.end(w.end) + LAG
    queries = [(f"max(count_over_time({name}[{HOUR:.0f}s] @ {last + HOUR / 2:.3f}))", w.end)]
    for e in sorted(ends):
        by_five = f"sum by (uuid) ({g.fives(counter, e - HOUR, e)})"
        by_hour = f"sum by (uuid) ({g.hours(counter, e + LAG - HOUR, e + LAG)})"  # the bucket stamped e + LAG
        queries += [(f"count({by_five} unless on (uuid) {by_hour})", e), (f"sum({by_five})", e), (f"sum({by_hour})", e)]
    answers = api.query_many(queries)
    if not answers[0] or answers[0][0].value != 1:
        return None
    for i in range(1, len(answers), 3):
        missing, a, b = answers[i : i + 3]
        total = a[0].value if a else 0.0
        if missing or abs((b[0].value if b else 0.0) - total) > 1e-9 * max(1.0, abs(total)):
            return None
    return g


POINTS = 10_000  # a range query's points at most (Prometheus refuses more than 11,000)


def last_stamp(api: PromAPI, name: str, t: float, span: float = 2 * HOUR) -> float | None:
    """The stamp of the last sample of one series of ``name`` in the ``span`` seconds up to ``t``, to
    the millisecond: ``count_over_time`` over windows as long as the step across the span (the last
    window holding a sample), then across that window at a step a thousand times finer, down to a
    millisecond (two range queries on one series for two hours, three for a week). ``timestamp()``
    tells it in Prometheus, but VictoriaMetrics answers the evaluation's time there."""
    one = api.query(f"topk(1, last_over_time({name}[{rng(span)}]))", t)
    if not one:
        return None
    labels = sorted((k, v) for k, v in one[0].labels.items() if k != "__name__")  # kept by Prometheus
    sel = name + "{" + ", ".join(f'{k}="{label_value(v)}"' for k, v in labels) + "}"
    step = max(1, math.ceil(span * 1000 / POINTS))  # milliseconds
    start, end, pick = t - span, t, max
    while True:
        try:
            counts = api.query_range(f"count_over_time({sel}[{step}ms])", start, end, step / 1000)
        except QueryError:  # a server that cannot answer it: no stamp told (the hours are not read)
            return None
        hits = [t for series in counts for t, n in series.points if n]
        if not hits:
            return None
        found = pick(hits)
        if step == 1:
            return round(found, 3)
        # the window ending there holds it (Prometheus before 3.0 also counts its start: the earliest
        # window that holds it from now on)
        start, end, step, pick = found - step / 1000, found, max(1, step // 1000), min


def fragment(counter: str, gap: float) -> str:
    """A counter's growth per series over the last ``gap`` seconds before the evaluation time, as a
    bucket of the rules is computed: the last sample minus the last sample ``gap`` earlier, or the
    value itself where the series began or reset within those seconds."""
    ago = f"{round(gap * 1000)}ms"
    window = f"{counter}[{BUCKET:.0f}s]"
    return (
        f"((last_over_time({window}) - last_over_time({window} offset {ago})) >= 0 or last_over_time({counter}[{ago}]))"
    )


def rollup_totals(
    api: PromAPI,
    w: Window,
    counters: Mapping[str, str],
    info: str,
    g: Grid,
    daily: Collection[str] | None = None,
) -> DayTotals:
    """As ``counters.day_totals``, from the counters' rollups stamped on ``g`` (the rules have
    handled resets and gaps): each day of the counters in ``daily`` (all where None) and the window
    of the others (``DayTotals.window``); from the hourly buckets and the 5-minute ones at the
    edges where ``g`` has hours (``Grid.span``). The ``info`` labels at the day boundaries, as there.

    Where the buckets do not end on the window's edges (``Grid.gap``), the growth between the
    last bucket and each edge is read from the raw series (two instant queries per counter, each a
    few minutes of samples): the first day loses what its first bucket holds from before the
    window, the last day gains what came after its last bucket, and the window's totals are what
    the raw series give. The days between are shifted by the gap (under one bucket)."""
    spans = days(w)
    by_day = [k for k in counters if daily is None or k in daily]
    whole = [k for k in counters if k not in by_day]
    gap = g.gap(w.end)
    ranges = [(d.start, d.end) for d in spans]
    queries = [(f"sum by (uuid) ({g.span(counters[k], a, b)})", b) for a, b in ranges for k in by_day]
    queries += [(f"sum by (uuid) ({g.span(counters[k], w.start, w.end)})", w.end) for k in whole]
    kinds = [*by_day, *whole]
    if gap:
        queries += [(f"sum by (uuid) ({fragment(counters[k], gap)})", t) for t in (w.start, w.end) for k in kinds]
    bounds = [spans[0].start, *(d.end for d in spans)]
    queries += [(info, t) for t in bounds]
    answers = api.query_many(queries)
    n = len(by_day)
    per_day = [{k: by_uuid(answers[d * n + i]) for i, k in enumerate(by_day)} for d in range(len(spans))]
    rest = answers[len(spans) * n :]
    window = {k: by_uuid(rest[i]) for i, k in enumerate(whole)}
    rest = rest[len(whole) :]
    if gap:
        for i, k in enumerate(kinds):
            first, last = (per_day[0][k], per_day[-1][k]) if k in by_day else (window[k], window[k])
            for u, v in by_uuid(rest[i]).items():  # before the window's start
                if u in first:
                    first[u] -= v
            for u, v in by_uuid(rest[len(kinds) + i]).items():  # after the last bucket
                last[u] = last.get(u, 0.0) + v
        rest = rest[2 * len(kinds) :]
    labels: dict[str, dict[str, str]] = {}
    for series in rest:
        for s in series:
            labels.setdefault(s.labels.get("uuid", ""), s.labels)
    found = {u for day in per_day for k in by_day for u in day[k]} | {u for k in whole for u in window[k]}
    missing_labels(api, w, info, labels, found)
    return DayTotals(tuple(DayGrowth(day, growth) for day, growth in zip(spans, per_day, strict=True)), labels, window)
