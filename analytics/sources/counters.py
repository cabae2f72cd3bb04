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
from dataclasses import dataclass, field

from analytics.sources.promapi import PromAPI, Series, label_value, rng
from domain.week import Day, Window, days

MANY = 64  # more GPUs than this to redo in a day: select them all rather than by a long regex


def _any_of(values: set[str]) -> str:
    """A PromQL regex matching exactly these label values (escaped for RE2, then for a PromQL string:
    a value may hold a quote, a backslash or a newline)."""
    return "|".join(label_value(re.escape(v)) for v in sorted(values))


def _only(uuids: set[str]) -> str:
    """A selector for these GPUs; for many of them, none (the query reads every GPU's samples for
    that day, as it would anyway, and the caller keeps those it asked for)."""
    return f'{{uuid=~"{_any_of(uuids)}"}}' if len(uuids) <= MANY else ""


def by_uuid(series: list[Series]) -> dict[str, float]:
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
    """What ``day_totals`` found: the window's days, and each GPU's ``info`` labels; counters read
    over the whole window only (no daily figure needs them) are in ``window``, not in the days."""

    days: tuple[DayGrowth, ...]
    labels: Mapping[str, Mapping[str, str]]  # uuid -> labels
    window: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # counter kind -> uuid -> growth

    def total(self, kind: str, uuid: str) -> float | None:
        """The counter's growth over the window; None when no day has data for this GPU."""
        if kind in self.window:
            return self.window[kind].get(uuid)
        values = [v for d in self.days if (v := d.get(kind, uuid)) is not None]
        return sum(values) if values else None

    def uuids(self, kind: str) -> set[str]:
        """GPUs with growth of ``kind`` on some day."""
        if kind in self.window:
            return set(self.window[kind])
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
    at = [dict(zip(kinds, map(by_uuid, answers[i * n : (i + 1) * n]), strict=True)) for i in range(len(bounds))]
    labels: dict[str, dict[str, str]] = {}
    for series in answers[len(bounds) * n : len(bounds) * (n + 1)]:
        for s in series:
            labels.setdefault(s.labels.get("uuid", ""), s.labels)
    resets = [by_uuid(a) for a in answers[len(bounds) * (n + 1) :]]

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
            per_day[d][kinds[i % n]].update((u, v) for u, v in by_uuid(series).items() if u in bad)
    missing_labels(api, w, info, labels, {u for day in per_day for u in day[reset_kind]})
    return DayTotals(tuple(DayGrowth(day, growth) for day, growth in zip(spans, per_day, strict=True)), labels)


def missing_labels(api: PromAPI, w: Window, info: str, labels: dict[str, dict[str, str]], uuids: set[str]) -> None:
    """Fills in ``labels`` for GPUs present in the counters but never in ``info`` at an instant:
    their last info sample in the window."""
    missing = uuids - set(labels)
    if missing:
        for s in api.query(f"last_over_time({info}{_only(missing)}[{rng(w.seconds)}])", w.end):
            if s.labels.get("uuid", "") in missing:
                labels.setdefault(s.labels.get("uuid", ""), s.labels)


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
