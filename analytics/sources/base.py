"""The source interface and its error."""

from __future__ import annotations

from typing import Protocol

from domain.week import WeekData, Window


class SourceUnavailable(RuntimeError):
    """The source cannot answer at all (down, refused, unreadable): no report can be made."""


class Source(Protocol):
    name: str

    def week(self, window: Window, *, jobs: bool = True) -> WeekData:
        """Everything the report needs for ``window`` (``jobs=False``: without the per-job
        figures, the costliest part, as the previous week's comparison needs none). Parts that
        fail go into ``WeekData.problems`` (the report is then incomplete); a source that cannot
        answer at all raises SourceUnavailable."""
        ...


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..1) of exact values; None when empty."""
    if not values:
        return None
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
