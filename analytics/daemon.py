"""``gpuledger analytics``: writes last week's report on a cron, refreshes the rolling 7 days
hourly, and serves both as gauges on its own /metrics, with the reports themselves under /reports/.
Enabled, it also writes last month's statements on the 1st ([statements]) and yesterday's FOCUS
files each day ([focus], analytics.focus_files).

A source that fails is logged and counted (``gpuledger_analytics_runs_total{result="error"}``);
the figures served stay those of the last good run, with their generation time, and /healthz
turns 503 when no refresh has been answered (with figures or no data) for three refresh periods.
A window the source answered for without GPU data (a fresh install: last week, or the first minute) is
``result="no_data"``, not an error: nothing is written or served for it, and the refresh is tried
again a minute later rather than at the next period, so the rolling figures appear with the
history's first minute.
"""

from __future__ import annotations

import datetime as dt
import gzip
import ipaddress
import json
import logging
import threading
import time
import zoneinfo
from collections.abc import Callable
from pathlib import Path

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from analytics import budgets
from analytics import report as rpt
from analytics.config import FullSettings
from analytics.focus_files import daily_missing, write_daily
from analytics.metrics import BudgetCollector, ReportCollector, RunsCollector
from analytics.pipeline import make_report, make_source, out_dir
from analytics.report import served
from analytics.report.access import for_user
from analytics.report.output import file_stem, write_atomic
from analytics.sources import Source, SourceUnavailable
from analytics.statements.monthly import write_month
from daemonkit.crontab import cron_trigger
from daemonkit.http import MetricsServer, WebOptions, current_user, serve
from daemonkit.settings import split_listen
from domain.week import Window, last_full_week
from exporter import __version__

log = logging.getLogger("gpuledger.analytics")
WEEK = 7 * 86400
NO_DATA_RETRY_S = 60  # the embedded history's resolution: a fresh install's first minute


class Analytics:
    def __init__(
        self, settings: FullSettings, source: Source | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.s = settings
        self.tz = settings.analytics.timezone
        self.source = source or make_source(settings, clock)
        self.clock = clock
        self.reports_dir = out_dir(settings)
        self._reports: dict[str, rpt.Report] = {}
        self._owners: dict[str, dict[str, str]] = {}  # report label -> job row key -> user (per_user access)
        self._lock = threading.Lock()
        self.runs: dict[tuple[str, str], int] = {}
        self.last_ok: dict[str, float] = {}
        self._budgets = budgets.figures(settings, None)  # limits now; spent and forecast at each refresh
        self.scheduler = BackgroundScheduler(timezone=zoneinfo.ZoneInfo(self.tz))
        registry = CollectorRegistry(auto_describe=False)
        top_n = settings.analytics.group_top_n
        registry.register(ReportCollector(self.reports, settings.cost, self.tz, clock, top_n))
        registry.register(RunsCollector(self.run_state, self.tasks()))
        registry.register(BudgetCollector(self.budget_figures))
        self.site = AnalyticsSite(self, registry)
        host, port = split_listen(settings.analytics.listen)
        w, a = settings.web, settings.analytics
        per_user = a.access == "per_user"
        self.server = MetricsServer(
            WebOptions(
                host,
                port,
                str(w.tls_cert_file) if w.tls_cert_file else None,
                str(w.tls_key_file) if w.tls_key_file else None,
                w.basic_auth_users,
                require_user=per_user,
                proxy_user_header=a.proxy_user_header,
                trusted_proxies=[ipaddress.ip_network(x) for x in a.trusted_proxies],
                metrics_users=frozenset(a.admins) if per_user else None,
            ),
            self.site,
        )

    @property
    def per_user(self) -> bool:
        return self.s.analytics.access == "per_user"

    def viewer(self) -> str | None:
        """Whose view the request being served gets: None for everything (open access, an admin),
        else the user's name ("" for a request without one: it sees nothing of anyone's)."""
        if not self.per_user:
            return None
        user = current_user()
        return None if user is not None and user in self.s.analytics.admins else user or ""

    def owners(self, label: str) -> dict[str, str]:
        """Each job row's user in the report of ``label``: kept since this daemon built it, else
        read from the reports folder (none: the report's jobs are nobody's, shown to no user)."""
        with self._lock:
            got = self._owners.get(label)
        if got is not None:
            return got
        raw = served.read_private(self.reports_dir, _owners_file(label))
        try:
            data = json.loads(raw) if raw is not None else {}
        except ValueError:
            data = {}
        ok = isinstance(data, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in data.items())
        return data if ok else {}

    def view(self, r: rpt.Report, user: str) -> rpt.Report:
        """``r`` as ``user`` may see it (analytics.report.access)."""
        return for_user(r, user, self.owners(r.week), self.s.analytics.per_user_fleet_totals)

    def tasks(self) -> list[str]:
        """The tasks this configuration runs, as gpuledger_analytics_runs_total names them."""
        s = self.s
        wanted = {
            "budgets": bool(s.budgets.rules),
            "statements": s.statements.enabled,
            "focus": s.focus.enabled,
            "days": self.source.keeps_days,
        }
        return ["refresh", "weekly", *(t for t, on in wanted.items() if on)]

    @property
    def url(self) -> str:
        return self.server.url

    def reports(self) -> dict[str, rpt.Report]:
        with self._lock:
            return dict(self._reports)

    def budget_figures(self) -> list[budgets.BudgetFigure]:
        with self._lock:
            return list(self._budgets)

    def run_state(self) -> tuple[dict[tuple[str, str], int], dict[str, float]]:
        with self._lock:
            return dict(self.runs), dict(self.last_ok)

    def _count(self, task: str, result: str) -> None:
        """``result``: ok, no_data (the source answered: no GPU data in the window) or error. The
        first two are the task doing its job: they set its last-success time."""
        with self._lock:
            key = (task, result)
            self.runs[key] = self.runs.get(key, 0) + 1
            if result != "error":
                self.last_ok[task] = self.clock()

    def weekly(self, window: Window | None = None) -> list[Path]:
        """Write the report of ``window`` (default: the last full ISO week) to the reports folder."""
        window = window or last_full_week(self.clock(), self.tz)
        owners: dict[str, str] | None = {} if self.per_user else None
        try:
            r = make_report(self.source, window, self.s, now=self.clock(), owners=owners)
        except SourceUnavailable as e:
            log.error("weekly report %s: source unavailable: %s", window.label, e)
            self._count("weekly", "error")
            return []
        if not r.fleet.gpus:
            log.info(
                "weekly report %s: no GPU data in the window (history starts later); nothing written", window.label
            )
            self._count("weekly", "no_data")
            return []
        # JSON whatever formats say: the daemon's own record, read back at a restart (load_latest)
        # and the catch-up's "already written" (without it every start rewrote last week's report)
        formats = [*self.s.analytics.formats, *([] if "json" in self.s.analytics.formats else ["json"])]
        files = rpt.write(r, formats, self.reports_dir)
        if owners is not None:  # each job's user, for the per-user views of this report after a restart
            write_atomic(self.reports_dir / _owners_file(r.week), json.dumps(owners, sort_keys=True) + "\n")
            with self._lock:
                self._owners[r.week] = owners
        with self._lock:
            self._reports["week"] = r
        self._count("weekly", "ok")
        log.info(
            "weekly report %s written (%s, coverage %.1f %%): %s",
            window.label,
            "complete" if r.complete else "INCOMPLETE",
            100 * r.coverage,
            self.reports_dir,
        )
        return files

    def statements(self) -> list[Path]:
        """Write last month's statements ([statements]); a failure is logged and counted."""
        try:
            files = write_month(self.source, self.s, self.clock())
        except (SourceUnavailable, OSError) as e:
            log.error("monthly statements: %s", e)
            self._count("statements", "error")
            return []
        self._count("statements", "ok" if files else "no_data")
        return files

    def focus(self) -> list[Path]:
        """Write yesterday's FOCUS files ([focus]); a failure is logged (one line, the reason) and
        counted (task focus), and the next run is the next day's."""
        try:
            files = write_daily(self.source, self.s, self.clock())
        except SourceUnavailable as e:
            log.error("FOCUS export: source unavailable: %s", e)
            self._count("focus", "error")
            return []
        except OSError as e:
            where = f" ({e.filename})" if e.filename else ""
            log.error("FOCUS export: cannot write in %s: %s%s", self.s.focus.dir, e.strerror or e, where)
            self._count("focus", "error")
            return []
        self._count("focus", "ok" if files else "no_data")
        return files

    def refresh(self) -> rpt.Report | None:
        """Rebuild the rolling 7-day figures (the week up to the current minute). None when the
        source failed or has no GPU data in those 7 days (then it is tried again in a minute)."""
        now = self.clock()
        end = now // 60 * 60
        window = Window(end - WEEK, end, "rolling-7d", self.tz)
        owners: dict[str, str] | None = {} if self.per_user else None
        try:
            r = make_report(self.source, window, self.s, now=now, owners=owners)
        except SourceUnavailable as e:
            log.error("rolling 7-day refresh: source unavailable: %s", e)
            self._count("refresh", "error")
            return None
        if not r.fleet.gpus:
            log.info("rolling 7-day refresh: no GPU data yet; trying again in %d s", NO_DATA_RETRY_S)
            with self._lock:
                self._reports.pop("rolling_7d", None)  # no report of zeros
            self._retry_refresh()
            self._count("refresh", "no_data")  # after: whoever sees the count sees the retry
            return None
        with self._lock:
            self._reports["rolling_7d"] = r
            if owners is not None:
                self._owners[r.week] = owners
        self._count("refresh", "ok")
        kept = window
        if self.s.budgets.rules:  # the budgets read the month so far after each refresh: its days too
            month, _ = budgets.month_so_far(now, self.tz)
            kept = Window(min(window.start, month.start), window.end, window.label, self.tz)
        self.keep_days(kept)
        if self.s.budgets.rules:
            self.refresh_budgets(now)
        return r

    def keep_days(self, window: Window) -> None:
        """Keep the window's settled days the source has not kept yet (``analytics.daycache``: read
        once, here, after the refresh: the rolling 7 days, and the month so far where budgets read
        it; the next reports take them from their files). A failure is
        logged and counted (task days); those days are read from the store until it succeeds."""
        if not self.source.keeps_days:
            return
        started = time.monotonic()
        try:
            n = self.source.keep_days(window)
        except (SourceUnavailable, OSError) as e:
            log.error("day cache: %s", e)
            self._count("days", "error")
            return
        self._count("days", "ok" if n else "no_data")
        if n:
            log.info("day cache: kept %d day(s) of %s in %.1f s", n, window.label, time.monotonic() - started)

    def refresh_budgets(self, now: float) -> None:
        """The budgets' figures from the month so far (analytics.budgets); a failure is logged and
        counted (task budgets), and the last good figures stay."""
        try:
            got = budgets.month_report(self.source, self.s, now)
        except SourceUnavailable as e:
            log.error("budgets: source unavailable: %s", e)
            self._count("budgets", "error")
            return
        figures = budgets.figures(self.s, got)
        with self._lock:
            self._budgets = figures
        self._count("budgets", "ok" if got is not None and got[0].fleet.gpus else "no_data")

    def _retry_refresh(self) -> None:
        """Bring the next refresh forward to a minute from now (no sooner than it was due)."""
        job = self.scheduler.get_job("refresh") if self.scheduler.running else None
        if job is None:
            return
        soon = _now(zoneinfo.ZoneInfo(self.tz)) + dt.timedelta(seconds=NO_DATA_RETRY_S)
        if job.next_run_time is None or soon < job.next_run_time:
            job.modify(next_run_time=soon)

    def load_latest(self) -> None:
        """Serve the newest weekly report already on disk until the next one is written."""
        for path in sorted(self.reports_dir.glob("gpuledger-*-W*.json"), reverse=True):
            try:
                r = rpt.from_json(path.read_text())
            except (OSError, ValueError) as e:
                log.warning("ignoring %s: %s", path, e)
                continue
            with self._lock:
                self._reports.setdefault("week", r)
            return

    def _missing_last_week(self) -> bool:
        label = last_full_week(self.clock(), self.tz).label
        return not (self.reports_dir / f"gpuledger-{label}.json").exists()

    def start(self, catch_up: bool = True) -> None:
        """Schedule the jobs and serve. ``catch_up``: write last week's report now when the folder
        lacks it (the daemon was down on Monday)."""
        a = self.s.analytics
        self.load_latest()
        tz = zoneinfo.ZoneInfo(self.tz)
        self.scheduler.add_job(
            self.refresh,
            IntervalTrigger(minutes=a.refresh_minutes, timezone=tz),
            id="refresh",
            next_run_time=_now(tz),
            max_instances=1,
            coalesce=True,
        )
        weekly_first = _now(tz) if catch_up and self._missing_last_week() else None
        self._on_cron("weekly", self.weekly, a.cron, tz)
        if weekly_first is not None:
            self.scheduler.add_job(self.weekly, id="weekly-catch-up", next_run_time=weekly_first)
        if self.s.statements.enabled:  # last month's statements, on the 1st
            self._on_cron("statements", self.statements, self.s.statements.cron, tz)
        if self.s.focus.enabled:  # yesterday's FOCUS files, daily; now, when they are missing
            self._on_cron("focus", self.focus, self.s.focus.cron, tz)
            if catch_up and daily_missing(self.s, self.clock()):
                self.scheduler.add_job(self.focus, id="focus-catch-up", next_run_time=_now(tz))
        self.scheduler.start()
        serve(self.server, name="gpuledger-analytics-http")
        log.info(
            "gpuledger analytics %s serving %s/metrics (source %s, reports in %s, weekly at '%s' %s)",
            __version__,
            self.url,
            self.source.name,
            self.reports_dir,
            a.cron,
            self.tz,
        )

    def _on_cron(self, name: str, task: Callable[[], object], cron: str, tz: zoneinfo.ZoneInfo) -> None:
        """A task on its crontab: one run at a time, a missed run made up within 6 h (a daemon down
        at the time), several missed ones run once."""
        self.scheduler.add_job(
            task,
            cron_trigger(cron, timezone=tz),
            id=name,
            misfire_grace_time=6 * 3600,
            max_instances=1,
            coalesce=True,
        )

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.scheduler.shutdown(wait=True)


def _owners_file(label: str) -> str:
    """The daemon's record of each job's user in a report (a dot file: never served)."""
    return f".{file_stem(label)}.owners.json"


def _now(tz: zoneinfo.ZoneInfo) -> dt.datetime:
    return dt.datetime.now(tz)


class AnalyticsSite:
    def __init__(self, a: Analytics, registry: CollectorRegistry) -> None:
        self.a = a
        self.registry = registry

    def render(self, accept: str | None, gzip_ok: bool) -> tuple[bytes, str]:
        encoder, ctype = choose_encoder(accept or "")
        body = encoder(self.registry)
        return (gzip.compress(body, 1) if gzip_ok else body), ctype

    def health(self) -> tuple[bool, dict[str, object]]:
        a = self.a
        runs, last_ok = a.run_state()
        last, errors = last_ok.get("refresh"), runs.get(("refresh", "error"), 0)  # no_data: answered
        age = None if last is None else a.clock() - last
        ok = age is not None and age <= 3 * 60 * a.s.analytics.refresh_minutes
        shown = None if age is None else round(age, 1)
        return ok, {
            "status": "ok" if ok else "stale",
            "source": a.source.name,
            "rolling_7d_age_seconds": shown,
            "refresh_errors": errors,
            "refresh_no_data": runs.get(("refresh", "no_data"), 0),
        }

    def page(self, path: str) -> tuple[bytes, str] | int | None:
        """/reports/<file>: a report file the daemon wrote (analytics.report.served says which and
        how); anything else is None (404) with one short, escaped log line. A user's view
        (per-user access, not an admin): the report rendered again from its JSON, cut to the user
        (analytics.report.access), and 403 for the FOCUS files."""
        if not path.startswith("/reports/"):
            return None
        rel = path[len("/reports/") :]
        user = self.a.viewer()
        got = served.read(self.a.reports_dir, rel) if user is None else self._users_file(rel, user)
        if isinstance(got, str):
            log.info("/reports/%s refused: %s", served.shown(rel), got)
            return None
        return got

    def _users_file(self, rel: str, user: str) -> tuple[bytes, str] | int | str:
        """Report file ``rel`` as ``user`` may see it, 403 (a FOCUS file), or why it is refused."""
        part = served.report_part(rel)
        if part is None:
            return "not a report file name"
        stem, what = part
        if what.startswith("focus/"):
            return 403  # the finance export adds up to the fleet: the admins' (docs/security.md)
        got = served.read(self.a.reports_dir, f"{stem}.json")
        if isinstance(got, str):
            return f"no JSON report to cut to the user from: {got}"
        try:
            r = self.a.view(rpt.from_json(got[0]), user)
        except ValueError as e:
            return f"unreadable JSON report: {str(e)[:80]}"
        ctype = served.TYPES[what.rpartition(".")[2] if "/" in what else what]
        if what.startswith("csv/"):
            text = rpt.to_csv(r).get(what.removeprefix("csv/"))
            return (text.encode(), ctype) if text is not None else "not a CSV table"
        render = {"html": rpt.to_html, "json": rpt.to_json, "md": rpt.to_markdown}[what]
        return render(r).encode(), ctype

    def landing(self) -> str:
        a = self.a
        files = served.listing(a.reports_dir)
        reports, user = a.reports(), a.viewer()
        if user is not None:
            reports = {name: a.view(r, user) for name, r in reports.items()}
        return rpt.landing_page(reports, files, a.source.name, a.tz, __version__)
