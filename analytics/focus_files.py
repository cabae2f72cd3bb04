"""FOCUS files from the settings and a source, written atomically (a temporary name, then a rename:
never half a file): ``gpuledger report --focus`` (a window's files beside its report) and the
analytics daemon's daily export ([focus]: yesterday's files, a folder per grouping). Both read a
report per local day (analytics.report.focus.day_reports) and render it with to_focus: the same
rows; the daily files' billing period is the calendar month of the day."""

from __future__ import annotations

import datetime as dt
import logging
import zoneinfo
from pathlib import Path

from analytics.config import FullSettings
from analytics.report.focus import day_reports, file_name, to_focus
from analytics.report.model import Report
from analytics.report.output import focus_dir, write_atomic
from analytics.sources import Source
from analytics.statements.statement import month
from domain.week import WeekData, Window

log = logging.getLogger("gpuledger.analytics")


def read_days(source: Source, window: Window, s: FullSettings, now: float | None = None) -> list[Report]:
    """A report per local day of ``window`` with GPU data, each day's queries under one deadline
    (``now``: hours are charged up to it; default the wall clock)."""

    def day(w: Window) -> WeekData:
        with source.session():
            return source.week(w)

    a = s.analytics
    return day_reports(day, window, s.cost, group_by=a.group_by, min_coverage=a.min_coverage, now=now)


def write_window(source: Source, window: Window, s: FullSettings, folder: Path) -> list[Path]:
    """``gpuledger report --focus``: ``window``'s files in ``folder``/gpuledger-<label>-focus/."""
    sub = focus_dir(folder, window.label)
    sub.mkdir(exist_ok=True)
    written = []
    for name, text in to_focus(read_days(source, window, s), window).items():
        write_atomic(sub / name, text)
        written.append(sub / name)
    return written


def yesterday(now: float, timezone: str) -> Window:
    """The local day before the one ``now`` falls in, labelled YYYY-MM-DD (23 or 25 hours at DST)."""
    tz = zoneinfo.ZoneInfo(timezone)
    day = dt.datetime.fromtimestamp(now, tz).date() - dt.timedelta(days=1)
    start = dt.datetime.combine(day, dt.time(), tzinfo=tz).timestamp()
    end = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=tz).timestamp()
    return Window(start, end, day.isoformat(), timezone)


def daily_path(folder: Path, grouping_file: str, date: str) -> Path:
    """``user.csv``, 2026-11-18 -> ``folder/user/user-2026-11-18.csv``."""
    stem = grouping_file.removesuffix(".csv")
    return folder / stem / f"{stem}-{date}.csv"


def daily_missing(s: FullSettings, now: float) -> bool:
    """Yesterday's files are not there (the host grouping's: every day with data has one)."""
    day = yesterday(now, s.analytics.timezone)
    return not daily_path(s.focus.dir, file_name("host"), day.label).exists()


def write_daily(source: Source, s: FullSettings, now: float, day: Window | None = None) -> list[Path]:
    """The daemon's [focus] run: yesterday's files (or ``day``'s) in [focus] dir; [] when the day
    had no GPU data. The source's errors (SourceUnavailable) and the folder's (OSError) reach the
    caller; a file already written stays whole."""
    w = day or yesterday(now, s.analytics.timezone)
    reports = read_days(source, w, s, now)
    if not reports:
        log.info("FOCUS export %s: no GPU data in the day; nothing written", w.label)
        return []
    billing = month(dt.datetime.fromtimestamp(w.start, zoneinfo.ZoneInfo(w.timezone)).strftime("%Y-%m"), w.timezone)
    written = []
    for name, text in to_focus(reports, w, billing=billing).items():
        path = daily_path(s.focus.dir, name, w.label)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
        written.append(path)
    log.info("FOCUS export %s: %d files in %s", w.label, len(written), s.focus.dir)
    return written
