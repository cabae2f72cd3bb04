"""One report, from settings to files: pick the source, read this week and the one before, build."""

from __future__ import annotations

import gc
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from analytics.config import FullSettings
from analytics.daycache import DAYS_DIR, DayCached
from analytics.report.build import build, job_key
from analytics.report.model import Report
from analytics.sources import Source, SourceUnavailable
from analytics.sources.dcgm import DcgmSource
from analytics.sources.embedded import EmbeddedSource
from analytics.sources.promapi import DeadlinePassed
from analytics.sources.prometheus import PrometheusSource
from domain.jobtable import JobTable
from domain.week import Window
from exporter.config import default_history_path
from exporter.sampling.stalls import rule_of

log = logging.getLogger(__name__)


def make_source(s: FullSettings, clock: Callable[[], float] = time.time) -> Source:
    """The source ``analytics.source`` names (``prometheus`` with ``prometheus.naming = "dcgm"`` is
    the dcgm source, as the flag ``--naming dcgm`` has always said); a store's settled days from
    ``<reports_dir>/.days`` where ``analytics.day_cache`` (``analytics.daycache``; ``clock`` says
    which days have settled)."""
    a = s.analytics
    if a.source == "embedded":
        path = a.history or s.history.path or default_history_path()
        return EmbeddedSource(path)
    source: Source
    if a.source == "dcgm" or s.prometheus.naming == "dcgm":
        source = DcgmSource(s.prometheus, pod_labels=s.analytics.pod_labels, stall=rule_of(s.exporter))
    else:
        source = PrometheusSource(s.prometheus, hourly_energy=s.cost.hourly_energy, pod_labels=s.analytics.pod_labels)
    if not a.day_cache:
        return source
    settle = 60.0 * a.day_cache_settle_minutes
    return DayCached(source, a.reports_dir / DAYS_DIR, _figures_key(s), settle=settle, clock=clock)


def _figures_key(s: FullSettings) -> str:
    """What decides a store's figures of a day: the server, the tenant (headers, hashed with the rest),
    the naming and its settings, the cluster label, the hourly energy and the stall rule; not how it is
    reached (credentials, timeouts, limits)."""
    reached = {
        "bearer_token", "bearer_token_file", "username", "password", "verify_tls", "ca_file", "timeout",
        "connect_timeout", "retries", "deadline_seconds", "concurrency", "max_response_bytes",
        "max_report_memory_bytes", "kube_state_metrics",
    }  # fmt: skip
    store = s.prometheus.model_dump(mode="json", exclude=reached)
    stall = rule_of(s.exporter)
    return json.dumps([store, s.cost.hourly_energy, repr(stall)], sort_keys=True)


_gc_lock = threading.Lock()
_reports_in_flight = 0
_threshold_before = gc.get_threshold()


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Young-generation collections 140 times rarer while a report is read and built: it makes
    millions of objects (series, rows) that live until it is done, and with the default threshold
    (700) the collector scanned them again and again, 2 s of 7 s of CPU at 1,024 GPUs
    (docs/performance.md). Reference counting still frees everything not in a cycle at once."""
    global _reports_in_flight, _threshold_before
    with _gc_lock:  # reports in several threads (the daemon's refresh and weekly): the last one out restores
        if _reports_in_flight == 0:
            _threshold_before = gc.get_threshold()
            gc.set_threshold(100_000, 50, 100)
        _reports_in_flight += 1
    try:
        yield
    finally:
        with _gc_lock:
            _reports_in_flight -= 1
            if _reports_in_flight == 0:
                gc.set_threshold(*_threshold_before)


def make_report(
    source: Source,
    window: Window,
    s: FullSettings,
    *,
    with_previous: bool = True,
    now: float | None = None,
    owners: dict[str, str] | None = None,
) -> Report:
    """The window's report; the previous window feeds the week-over-week deltas and benchmark
    drift. A previous window the source cannot serve only loses the comparison. A Prometheus
    source's queries, both windows together, end by ``prometheus.deadline_seconds``. ``now``:
    hours are charged up to it (default: the wall clock; the daemon passes its own). ``owners``,
    given, is filled with each job row's user (job row key -> user; analytics.report.access)."""
    with fewer_collections(), source.session():
        data = source.week(window)
        if owners is not None:
            for j in JobTable.of(data.jobs).views():
                if j.job.user:
                    owners.setdefault(job_key(j), j.job.user)
        previous = None
        if with_previous:
            try:
                previous = source.week(window.previous(), jobs=False)
            except DeadlinePassed:
                raise
            except SourceUnavailable as e:
                log.warning("previous window unavailable (%s): no week-over-week comparison", e)
            if previous is not None and not previous.gpus:
                previous = None
        a = s.analytics
        return build(data, s.cost, previous=previous, min_coverage=a.min_coverage, now=now, group_by=a.group_by)


def describe(source: Source, s: FullSettings) -> str:
    """Where ``source`` reads, for messages: the embedded history's path or the server's URL."""
    return source.describe()


def out_dir(s: FullSettings, override: str | Path | None = None) -> Path:
    return Path(override) if override else s.analytics.reports_dir
