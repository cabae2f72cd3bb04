"""A window's data and report, both: the statements select jobs by attributes (user, account,
namespace) that only the source's job figures carry, and take their figures from the report."""

from __future__ import annotations

from dataclasses import dataclass

from analytics.config import FullSettings
from analytics.report.build import build
from analytics.report.model import CostRow, Report
from analytics.sources import Source
from domain.week import WeekData, Window


@dataclass(frozen=True)
class Read:
    data: WeekData
    report: Report

    def job_rows(self) -> dict[str, CostRow]:
        return {r.key: r for r in self.report.group("job")}


def read(source: Source, window: Window, s: FullSettings, now: float | None = None) -> Read:
    """The window's data and its report (``analytics.report.build.build``, as ``gpuledger report``
    builds it, without the previous week's comparison)."""
    with source.session():
        data = source.week(window)
    return Read(data, build(data, s.cost, min_coverage=s.analytics.min_coverage, now=now))
