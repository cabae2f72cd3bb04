"""Per-GPU counter totals per day from Prometheus, reading as few samples as possible.

A counter's growth over a day is its value at the day's end minus its value at the day's start:
two instant queries (each reads one sample per series), so a day of 1,024 GPUs costs the same as
a day of one, where ``increase(counter[1d])`` decodes every sample of the day (5.9 M per counter
at 15 s). The difference is exact, with no extrapolation: every increment lands in exactly one
day, and the days add up to the window.

It is wrong in two cases, which are detected and handed to ``increase()`` for that GPU and day:
- the counter reset during the day (an exporter restart): ``resets()`` of the ``sampled`` counter
  finds it (one counter's samples read, not six);
- the series is missing at one of the two instants (a GPU that appeared or left during the day,
  or a scrape gap of more than the lookback around midnight), or at both (a GPU that came and
  went within the day: the ``resets()`` query names every GPU with samples in the day).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from analytics.sources.promapi import PromAPI, Series, label_value, rng
from domain.week import Day, Window, days

BUCKET = 300.0  # the rollups' bucket: their groups' interval, seconds
MANY = 64  # more GPUs than this to redo in a day: select them all rather than by a long regex


def _any_of(values: set[str]) -> str:
    """A PromQL regex matching exactly these label values (escaped for RE2, then for a PromQL string:
    a value may hold a quote, a backslash or a newline)."""
    return "|".join(label_value(re.escape(v)) for v in sorted(values))


def _only(uuids: set[str]) -> str:
    """A selector for these GPUs; for many of them, none (the query reads every GPU's samples for
    that day, as it would anyway, and the caller keeps those it asked for)."""
    return f'{{uuid=~"{_any_of(uuids)}"}}' if len(uuids) <= MANY else ""


def _by_uuid(series: list[Series]) -> dict[str, float]:
    return {s.labels.get("uuid", ""): s.value for s in series}


@dataclass(frozen=True, slots=True)
class DayGrowth:
    """One local day of the window: each counter's growth per GPU (a GPU without data that day
    is absent)."""

    day: Day
    growth: Mapping[str, Mapping[str, float]]  # counter kind -> uuid -> growth

    def get(self, kind: str, uuid: str) -> float | None:
        return self.growth[kind].get(uuid)


@dataclass(frozen=True, slots=True)
class DayTotals:
    """What ``day_totals`` found: the window's days, and each GPU's ``info`` labels."""

    days: tuple[DayGrowth, ...]
    labels: Mapping[str, Mapping[str, str]]  # uuid -> labels

    def total(self, kind: str, uuid: str) -> float | None:
        """The counter's growth over the window; None when no day has data for this GPU."""
        values = [v for d in self.days if (v := d.get(kind, uuid)) is not None]
        return sum(values) if values else None

    def uuids(self, kind: str) -> set[str]:
        """GPUs with growth of ``kind`` on some day."""
        return {u for d in self.days for u in d.growth[kind]}


def day_totals(api: PromAPI, w: Window, counters: Mapping[str, str], reset_kind: str, info: str) -> DayTotals:
    """Growth of each counter per GPU and local day of ``w``; and each GPU's ``info`` labels."""
    spans = days(w)
    bounds = [spans[0].start, *(d.end for d in spans)]
    kinds = list(counters)
    queries = [(f"sum by (uuid) ({counters[k]})", t) for t in bounds for k in kinds]
    queries += [(info, t) for t in bounds]
    queries += [(f"max by (uuid) (resets({counters[reset_kind]}[{rng(d.seconds)}]))", d.end) for d in spans]
    answers = api.query_many(queries)
    n = len(kinds)
    at = [dict(zip(kinds, map(_by_uuid, answers[i * n : (i + 1) * n]), strict=True)) for i in range(len(bounds))]
    labels: dict[str, dict[str, str]] = {}
    for series in answers[len(bounds) * n : len(bounds) * (n + 1)]:
        for s in series:
            labels.setdefault(s.labels.get("uuid", ""), s.labels)
    resets = [_by_uuid(a) for a in answers[len(bounds) * (n + 1) :]]

    per_day: list[dict[str, dict[str, float]]] = []  # day -> counter kind -> uuid -> growth
    redo: list[tuple[int, set[str]]] = []
    for d in range(len(spans)):
        a, b = at[d], at[d + 1]
        r, main = resets[d], reset_kind
        seen = {u for k in kinds for u in (*a[k], *b[k])} | set(r)  # resets() names every GPU with samples
        bad = {
            u
            for u in seen
            if r.get(u, 0.0) > 0
            or u not in a[main]
            or u not in b[main]
            or any((u in a[k]) != (u in b[k]) for k in kinds)
        }
        per_day.append({k: {u: b[k][u] - a[k][u] for u in b[k] if u in a[k] and u not in bad} for k in kinds})
        if bad:
            redo.append((d, bad))
    if redo:
        fix = [
            (f"sum by (uuid) (increase({counters[k]}{_only(bad)}[{rng(spans[d].seconds)}]))", spans[d].end)
            for d, bad in redo
            for k in kinds
        ]
        for i, series in enumerate(api.query_many(fix)):
            d, bad = redo[i // n]
            per_day[d][kinds[i % n]].update((u, v) for u, v in _by_uuid(series).items() if u in bad)
    _missing_labels(api, w, info, labels, {u for day in per_day for u in day[reset_kind]})
    return DayTotals(tuple(DayGrowth(day, growth) for day, growth in zip(spans, per_day, strict=True)), labels)


def _missing_labels(api: PromAPI, w: Window, info: str, labels: dict[str, dict[str, str]], uuids: set[str]) -> None:
    """GPUs present in the counters but never in ``info`` at an instant: their last info sample in
    the window."""
    missing = uuids - set(labels)
    if missing:
        for s in api.query(f"last_over_time({info}{_only(missing)}[{rng(w.seconds)}])", w.end):
            if s.labels.get("uuid", "") in missing:
                labels.setdefault(s.labels.get("uuid", ""), s.labels)


def rollup(counter: str) -> str:
    """The rollup rule's series for a counter: ``gpuledger_gpu_busy_seconds_total`` ->
    ``gpuledger:gpu_busy_seconds:increase5m``."""
    return f"gpuledger:{counter.removeprefix('gpuledger_').removesuffix('_total')}:increase5m"


def whole_buckets(seconds: float) -> str:
    """A range holding the buckets stamped in (end - seconds, end]: a millisecond short, since
    Prometheus before 3.0 includes both ends of a range and the bucket stamped at the start
    belongs to the span before."""
    return f"{max(1, round(seconds * 1000) - 1)}ms"


def rollups_cover(api: PromAPI, w: Window, counter: str) -> bool:
    """Whether the rollup of ``counter`` names every GPU its raw series names one bucket into each
    day of ``w`` and at its end: the rules ran (or were backfilled) over the whole window."""
    instants = sorted({min(d.start + BUCKET, w.end) for d in days(w)} | {w.end})
    queries = [(f"count by (uuid) ({name})", t) for t in instants for name in (counter, rollup(counter))]
    answers = api.query_many(queries)
    seen = False
    for raw, rolled in zip(answers[::2], answers[1::2], strict=True):
        if set(_by_uuid(raw)) - set(_by_uuid(rolled)):
            return False
        seen = seen or bool(rolled)
    return seen


def bucket_gap(api: PromAPI, rollup_series: str, w: Window) -> float:
    """Seconds from the last bucket of ``rollup_series`` stamped at or before ``w``'s end to its end:
    0 where the rules' evaluations are aligned to the clock (vmalert), up to one bucket where they
    run at a phase of their own (Prometheus, and promtool's backfill, derive it from the group's name
    and file). The phase is the same for every bucket of a group: any stamp near a day's end, or
    failing that any in the window, tells it."""
    instants = [w.end, *(d.start for d in days(w))]
    answers = api.query_many([(f"max(timestamp({rollup_series}))", t) for t in instants])
    found = [(t, a[0].value) for t, a in zip(instants, answers, strict=True) if a]
    if not found:
        t = w.end
        a = api.query(f"max(max_over_time(timestamp({rollup_series})[{rng(w.seconds)}:{BUCKET:.0f}s]))", t)
        found = [(t, a[0].value)] if a else []
    if not found:
        return 0.0
    t, stamp = found[0]
    return round((t - stamp) % BUCKET, 3)


def fragment(counter: str, gap: float) -> str:
    """A counter's growth per series over the last ``gap`` seconds before the evaluation time, as a
    bucket of the rules is computed: the last sample minus the last sample ``gap`` earlier, or the
    value itself where the series began or reset within those seconds."""
    ago = f"{round(gap * 1000)}ms"
    window = f"{counter}[{BUCKET:.0f}s]"
    return (
        f"((last_over_time({window}) - last_over_time({window} offset {ago})) >= 0 or last_over_time({counter}[{ago}]))"
    )


def rollup_totals(api: PromAPI, w: Window, counters: Mapping[str, str], info: str) -> DayTotals:
    """As ``day_totals``, from the counters' rollups: each day the sum of its buckets per GPU (the
    rules have handled resets and gaps); the ``info`` labels at the day boundaries as there.

    Where the buckets do not end on the window's edges (a rule group's phase: ``bucket_gap``), the
    growth between the last bucket and each edge is read from the raw series (two instant queries
    per counter, each a few minutes of samples): the first day loses what its first bucket holds from
    before the window, the last day gains what came after its last bucket, and the window's totals
    are what the raw series give. The days between are shifted by the gap (under one bucket)."""
    spans = days(w)
    kinds = list(counters)
    gap = bucket_gap(api, rollup(counters[kinds[0]]), w)
    queries = [
        (f"sum by (uuid) (sum_over_time({rollup(counters[k])}[{whole_buckets(d.seconds)}]))", d.end)
        for d in spans
        for k in kinds
    ]
    if gap:
        queries += [(f"sum by (uuid) ({fragment(counters[k], gap)})", t) for t in (w.start, w.end) for k in kinds]
    bounds = [spans[0].start, *(d.end for d in spans)]
    queries += [(info, t) for t in bounds]
    answers = api.query_many(queries)
    n = len(kinds)
    per_day = [{k: _by_uuid(answers[d * n + i]) for i, k in enumerate(kinds)} for d in range(len(spans))]
    rest = answers[len(spans) * n :]
    if gap:
        for i, k in enumerate(kinds):
            for u, v in _by_uuid(rest[i]).items():  # before the window's start
                if u in per_day[0][k]:
                    per_day[0][k][u] -= v
            last = per_day[-1][k]
            for u, v in _by_uuid(rest[n + i]).items():  # after the last bucket
                last[u] = last.get(u, 0.0) + v
        rest = rest[2 * n :]
    labels: dict[str, dict[str, str]] = {}
    for series in rest:
        for s in series:
            labels.setdefault(s.labels.get("uuid", ""), s.labels)
    _missing_labels(api, w, info, labels, {u for day in per_day for k in kinds for u in day[k]})
    return DayTotals(tuple(DayGrowth(day, growth) for day, growth in zip(spans, per_day, strict=True)), labels)


def hourly(api: PromAPI, w: Window, counter: str) -> dict[str, list[float]]:
    """Growth per hour of the window per GPU, from the counter's value at each hour (one range
    query; each step reads one sample per series). A reset counts the value after it; an hour
    without a value at either end counts 0 (callers scale the hours to the day totals)."""
    n = int(-(-w.seconds // 3600))
    out: dict[str, list[float]] = {}
    for s in api.query_range(f"sum by (uuid) ({counter})", w.start, w.start + 3600 * n, 3600):
        values: list[float | None] = [None] * (n + 1)
        for t, v in s.points:
            values[min(n, max(0, round((t - w.start) / 3600)))] = v
        hours = [0.0] * n
        for h in range(n):
            a, b = values[h], values[h + 1]
            if a is not None and b is not None:
                hours[h] = b if b < a else b - a
        out[s.labels.get("uuid", "")] = hours
    return out
