"""``gpuledger report``, ``gpuledger analytics`` and ``gpuledger up``: flags on top of the config
file and the environment (the same layers as the exporter's).

Exit codes: 0 done (an incomplete report is still written, and says so); 1 the source could not
be read, it has no data in the window (nothing is written) or the port was taken; 2 invalid
configuration, naming the field; 3 with ``--fail-incomplete``, a report that was written but is
incomplete.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from analytics.config import FullSettings, overrides_from
from analytics.report.useful import label as useful_label
from analytics.sources import Source, SourceUnavailable
from daemonkit.argcheck import writable_dir
from daemonkit.settings import ConfigError, load_settings
from daemonkit.signals import wait_for_signal
from domain.week import Window, iso_week, last_full_week

log = logging.getLogger("gpuledger.analytics")
MIN_DAYS, MAX_DAYS = 1 / 1440, 3660.0  # --days: one minute to ten years


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="TOML or YAML config file (env GPULEDGER_CONFIG)")
    p.add_argument(
        "--source",
        choices=("prometheus", "dcgm", "embedded"),
        help="where the history comes from (dcgm: dcgm-exporter's series)",
    )
    p.add_argument("--prometheus-url", metavar="URL", help="Prometheus-compatible query URL")
    p.add_argument("--naming", choices=("gpuledger", "dcgm"), help="read gpuledger's or dcgm-exporter's series")
    p.add_argument("--history", metavar="PATH", help="embedded source: the exporter's SQLite history")
    p.add_argument("--timezone", metavar="ZONE", help="weeks start on Monday 00:00 here (default UTC)")
    p.add_argument("--log-level", help="debug | info | warning | error")


COMMON = {
    "source": "analytics.source",
    "prometheus_url": "prometheus.url",
    "naming": "prometheus.naming",
    "history": "analytics.history",
    "timezone": "analytics.timezone",
    "log_level": "log_level",
    "formats": "analytics.formats",
    "out": "analytics.reports_dir",
    "min_coverage": "analytics.min_coverage",
    "listen": "analytics.listen",
    "reports_dir": "analytics.reports_dir",
    "day_cache": "analytics.day_cache",
}


def full_settings(config: str | None, overrides: Mapping[str, Any] | None = None) -> FullSettings:
    """The settings of every part: defaults, the config file (or env), then ``overrides`` (nested)."""
    return load_settings(FullSettings, config, dict(overrides or {}))


def settings_from(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> FullSettings:
    """The report and analytics commands' flags on top of ``full_settings``."""
    pairs = {dotted: value for dest, dotted in COMMON.items() if (value := getattr(args, dest, None)) is not None}
    if getattr(args, "format", None):
        pairs["analytics.formats"] = [f.strip() for f in args.format.split(",") if f.strip()]
    overrides = overrides_from(pairs)
    for key, value in (extra or {}).items():
        if isinstance(value, dict):
            overrides.setdefault(key, {}).update(value)
        else:
            overrides[key] = value
    return full_settings(args.config, overrides)


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--week", metavar="YYYY-Www", help="ISO week, e.g. 2026-W48 (default: the last full week)")
    p.add_argument("--days", type=float, metavar="N", help="instead of a week: the N days up to now")
    p.add_argument("--format", metavar="LIST", help="comma-separated: html,json,csv,md (default all)")
    p.add_argument("--out", metavar="DIR", help="reports folder (default analytics.reports_dir)")
    p.add_argument("--min-coverage", type=float, metavar="RATIO", help="below this share of data: incomplete")
    p.add_argument("--fail-incomplete", action="store_true", help="exit 3 when the report is incomplete")
    p.add_argument("--focus", action="store_true", help="also write FOCUS 1.0 CSV, one row per group x day")
    p.add_argument(
        "--no-day-cache",
        dest="day_cache",
        action="store_false",
        default=None,
        help="read every day from the store, not the settled days kept in <out>/.days (analytics.day_cache)",
    )
    _common(p)


def _window(args: argparse.Namespace, s: FullSettings) -> Window:
    tz = s.analytics.timezone
    if args.days is not None:
        if not (math.isfinite(args.days) and MIN_DAYS <= args.days <= MAX_DAYS):
            raise ConfigError(f"--days: must be from {MIN_DAYS:.6f} (one minute) to {MAX_DAYS:g}, not {args.days:g}")
        if args.week:
            raise ConfigError("--days and --week: give one of them")
        end = time.time() // 60 * 60
        return Window(end - args.days * 86400, end, f"last-{args.days:g}d", tz)
    if args.week:
        try:
            return iso_week(args.week, tz)
        except ValueError as e:
            raise ConfigError(f"--week: {e}") from None
    return last_full_week(time.time(), tz)


def run_report(args: argparse.Namespace) -> int:
    # the report's pipeline and renderers are imported here, not with the flags (``--help``, a bad flag)
    from analytics.pipeline import describe, fewer_collections, make_report, make_source, out_dir
    from analytics.report.output import write

    try:
        s = settings_from(args)
        _logging(s.log_level)
        window = _window(args, s)
        folder = writable_dir(out_dir(s), "--out" if args.out else "analytics.reports_dir")
        source = make_source(s)
        r = make_report(source, window, s)
    except ConfigError as e:
        print(f"gpuledger report: {e}", file=sys.stderr)
        return 2
    except SourceUnavailable as e:
        print(f"gpuledger report: source unavailable: {e}", file=sys.stderr)
        return 1
    if not r.fleet.gpus:
        # only what happened: a window without data is an error, never a report of zeros
        print(f"gpuledger report: no data in {window.label} from {describe(source, s)}", file=sys.stderr)
        return 1
    try:
        with fewer_collections():  # tens of thousands of rows rendered
            files = write(r, s.analytics.formats, folder)
        if getattr(args, "focus", False):
            files += _write_focus(source, window, s, folder)
    except SourceUnavailable as e:
        print(f"gpuledger report: source unavailable: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"gpuledger report: cannot write the report in {folder}: {e.strerror or e}", file=sys.stderr)
        return 1
    f = r.fleet
    useful = f"{f.cost_per_useful_gpu_hour:,.2f}" if f.cost_per_useful_gpu_hour is not None else "—"
    measure = useful_label(r.useful_measure, f.useful_sm_share)  # mixed: with each measure's share
    print(
        f"{r.week} ({r.source}): {f.gpus} GPUs, utilisation {_pct(f.utilization)}, total {f.total_cost:,.2f} "
        f"{r.currency}, {useful} {r.currency} per useful GPU-hour ({measure}), "
        f"idle {f.idle_cost:,.2f} {r.currency}, coverage {_pct(r.coverage)}"
    )
    for note in r.window_notes():
        print(f"  {note}")
    for path in files:
        print(f"  wrote {path}")
    if not r.complete:
        print(f"gpuledger report: INCOMPLETE: {'; '.join(r.incomplete_reasons)}", file=sys.stderr)
        return 3 if args.fail_incomplete else 0
    return 0


def _write_focus(source: Source, window: Window, s: FullSettings, folder: Path) -> list[Path]:
    """The FOCUS files of ``window``: a report per local day (analytics.focus_files, which the
    daemon's daily export shares)."""
    from analytics.focus_files import write_window

    return write_window(source, window, s, folder)


def add_analytics_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", metavar="HOST:PORT", help="address of its /metrics (default :10045)")
    p.add_argument("--reports-dir", metavar="DIR", help="where weekly reports are written")
    _common(p)


def start_error(command: str, e: Exception, address: str | None = None) -> int:
    """The exit code and message for a daemon that cannot start: 2 for configuration, 1 else
    (``address``: the one it was binding, named in "cannot listen")."""
    if isinstance(e, ConfigError):
        print(f"gpuledger {command}: {e}", file=sys.stderr)
        return 2
    if isinstance(e, SourceUnavailable):
        print(f"gpuledger {command}: source unavailable: {e}", file=sys.stderr)
        return 1
    if isinstance(e, OSError):
        where = f" on {address}" if address else ""
        print(f"gpuledger {command}: cannot listen{where}: {e.strerror or e}", file=sys.stderr)
        return 1
    raise e


STARTUP_ERRORS = (ConfigError, SourceUnavailable, OSError)


def run_analytics(args: argparse.Namespace) -> int:
    from analytics.daemon import Analytics
    from analytics.pipeline import out_dir

    s: FullSettings | None = None
    try:
        s = settings_from(args)
        _logging(s.log_level)
        writable_dir(out_dir(s), "--reports-dir" if args.reports_dir else "analytics.reports_dir")
        a = Analytics(s)
    except STARTUP_ERRORS as e:
        return start_error("analytics", e, s.analytics.listen if s is not None else None)
    a.start()
    wait_for_signal()
    a.stop()
    return 0


def _logging(level: str) -> None:
    from daemonkit.logs import setup_logging

    setup_logging(level)


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f} %"
