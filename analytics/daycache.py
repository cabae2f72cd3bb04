"""Past days read once: a store's GPU and per-job figures of each settled local day, kept in files.

A weekly report at 10,000 GPUs spends most of its time reading the week's 200,000 job series and
10,000 GPUs' counters from the store, and the daemon's rolling refresh read the same six past days
again every hour. ``DayCached`` wraps a source and keeps its settled days: ``keep_days`` reads
each whole local day (``domain.week.days``) that ended ``settle`` seconds ago and has no file yet,
alone and with its jobs, and writes it to ``<folder>/<source key>-<start>-<end>.json`` (the
analytics daemon runs it after each rolling refresh, so a day is read once, in the background).
A report takes each kept day of its window (the week, the rolling 7 days, the previous week, the
month of the statements and budgets) from its file and reads the days between from the store at
once, as one window (its clipped edges, days not settled or not kept yet): never more than it read
before. The GPU and job figures are kept, and the label sets of the jobs' Slurm records where the
store gives them (``Source.record_sets``: a window's are its days' together, so a report takes
the kept days' from their files and reads only the other days'); the queue, failures, benchmarks
and pods' labels are read over the whole window as before, so the enrichment step
(``analytics.sources.enrich``) is unchanged. Where a report asks for the jobs and the store takes
reads in threads, the Slurm records of the days not kept (or, from a store without label sets,
of the whole window) are asked of it as soon as the files are parsed, so the store answers while
the days' rows are made; a day's job rows are made only where the jobs are asked (the previous
week's fleet figures need none). At 10,000 GPUs the week's records took 3 s of the report, read
from the store (docs/performance.md).

The parts add up to the window (``analytics.dayparts``): every figure is a sum of the parts' (a
GPU's days are the parts' in order, its hours put on the window's hours; a figure no part measured
stays None; a measure two parts disagree on is "mixed"), as the sources themselves add days
(tests/analytics/test_daycache.py, test_rollups.py and test_dcgm_truth.py check a week from the
files against the week read at once, on the embedded history, in Prometheus, in VictoriaMetrics and
on dcgm-exporter's series). A day the store could not read whole (a problem named) is not kept. The
key is a hash of what decides the figures (the source, its server and the settings that change what
it reads), so another server or setting never reads another's days. A file that does not parse or
does not match its name is read again from the store and deleted (logged), and kept again by the
next ``keep_days``. Data written into the store for a kept day later (a backfill, a late remote
write past ``settle``) is not seen: delete the folder after a backfill (docs/analytics.md). Days
that ended more than ``KEEP_DAYS`` ago are deleted.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import operator
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from analytics.dayfiles import FORMAT, JobRows, Part, RecordLine, encode, parse, rows_of
from analytics.dayparts import merge_gpus, merge_jobs, union
from analytics.report.output import write_atomic
from analytics.sources.base import (
    GpuFigures,
    JobFigures,
    JobRecords,
    Labels,
    PartFailed,
    PodKey,
    QueuePart,
    RecordSets,
    Source,
    Span,
)
from analytics.sources.enrich import Enriched
from analytics.sources.enrich import week as enriched_week
from analytics.sources.records import records_of
from domain.week import (
    BenchWeek,
    Day,
    FailureWeek,
    JobWeek,
    WeekData,
    Window,
    days,
    whole_day,
)

log = logging.getLogger(__name__)

BY_DAY = object()  # the records asked early are the days' label sets (``DayCached._live_records``)
DAYS_DIR = ".days"  # in the reports folder (the daemon serves only report files from it)
KEEP_DAYS = 62  # two months: the statements' and budgets' month, and the week before it


@dataclass(frozen=True)
class _Parts:
    """``GpuFigures.carry`` of a window read by parts."""

    parts: tuple[Part, ...]
    inner: object  # the inner source's carry where every part agrees (its job records read on it)
    by_day: bool = False  # every kept day has its Slurm records' label sets: the window's are theirs


class DayCached(Enriched):
    """``inner`` with its settled days' GPU and job figures kept in ``folder`` (module docstring)."""

    def __init__(
        self,
        inner: Source,
        folder: Path,
        key: str,
        settle: float = 7200.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.inner = inner
        self.folder = folder
        self.key = hashlib.sha256(f"{FORMAT}\n{inner.name}\n{key}".encode()).hexdigest()[:16]
        self.settle = settle
        self.clock = clock
        self.name = inner.name
        self.parallel = inner.parallel
        self.pod_label_names = inner.pod_label_names
        self.keeps_days = True
        self.counts = {"hits": 0, "misses": 0}  # days taken from files; days read and written
        self._local = threading.local()  # whether this thread's report asks its jobs (``week``)
        self._lock = threading.Lock()
        self._asked: dict[Window, tuple[object, Future[Any]]] = {}  # records asked early, not yet taken

    @property
    def hits(self) -> int:
        return self.counts["hits"]

    @property
    def misses(self) -> int:
        return self.counts["misses"]

    # --- keeping days ---------------------------------------------------------------------

    def keep_days(self, w: Window) -> int:
        """Read each settled whole day of ``w`` that has no file, alone and with its jobs, and write
        it (not one the store could not read whole); the days written. The analytics daemon calls
        this after each refresh: a report never waits for it."""
        written = 0
        for d in days(w):
            if not self._keep(d, w.timezone) or self._path(d).exists():
                continue
            day = Window(d.start, d.end, d.date, w.timezone)
            records: RecordSets | None = None
            with self.inner.session():
                g = self.inner.gpus(day)
                j = self.inner.jobs(day, g) if not g.problems else JobFigures(problems=("not read",))
                problems = [*g.problems, *j.problems]
                if not problems:
                    try:
                        records = self.inner.record_sets(day, g)  # None: the store gives none
                    except PartFailed as e:
                        problems.append(f"Slurm jobs' records: {e}")
            if problems:
                log.warning("day cache: %s not kept: %s", d.date, "; ".join(problems))
                continue
            rows = merge_jobs([j.jobs], g.gpus)  # each with the cluster the day gives it (as a week would, mostly)
            carry = self.inner.carry_state(g.carry)
            part = Part((d,), g.gpus, g.approximations, g.targets, carry, jobs=rows, records=records)
            written += self._write(part)
        return written

    # --- the figures, by part ----------------------------------------------------------------

    def week(self, window: Window, *, jobs: bool = True) -> WeekData:
        """The window as every source gives it (``analytics.sources.enrich.week``); where its jobs
        are asked and the store takes reads in threads, the jobs' Slurm records are asked of it
        while the kept days' rows are made (``gpus``): the store's work beside this process'."""
        self._local.early = jobs and self.parallel
        try:
            return enriched_week(self, window, jobs=jobs)
        finally:
            self._local.early = False
            with self._lock:
                self._asked.pop(window, None)  # not taken: the window had no Slurm job rows

    def gpus(self, w: Window) -> GpuFigures:
        """Each kept day from its file; the days between them read from the store at once."""
        tz = w.timezone
        plan: list[Part | tuple[Day, dict[str, Any]]] = []  # in day order: a run read, or a day's file
        span: list[Day] = []
        for d in days(w):
            doc = self._load(d) if self._keep(d, tz) else None
            if doc is None:
                span.append(d)
                continue
            if span:
                plan.append(self._live(tuple(span), tz))
                span = []
            plan.append((d, doc))
        if span:
            plan.append(self._live(tuple(span), tz))
        early = {x.carry if isinstance(x, Part) else str(x[1]["carry"]) for x in plan}
        kept = [x[1] for x in plan if not isinstance(x, Part)]
        by_day = bool(kept) and all(doc["records"] != "null" for doc in kept)  # the store gave their label sets
        if getattr(self._local, "early", False) and by_day:
            lives = [x for x in plan if isinstance(x, Part)]  # the kept days' records are in their files
            self._ask(w, BY_DAY, lambda: self._live_records(lives, tz))
        elif getattr(self._local, "early", False) and len(early) == 1:
            carry = self.inner.carry_from(early.pop())
            self._ask(w, carry, lambda: self.inner.job_records(w, GpuFigures((), carry=carry)))
        parts = [x if isinstance(x, Part) else self._made(*x, tz) for x in plan]
        if files := sum(1 for x in parts if x.live is None):
            log.info("%s: %d of %d days from %s", w.label, files, len(days(w)), self.folder)
        problems = tuple(p for x in parts if x.live is not None for p in x.live.problems)
        carries = {x.carry for x in parts}
        inner = self.inner.carry_from(carries.pop()) if len(carries) == 1 else None
        return GpuFigures(
            merge_gpus([(x.days, x.gpus) for x in parts], w),
            union(a for x in parts for a in x.approximations),
            union(problems),
            targets={u: t for x in parts for u, t in x.targets.items()},
            carry=_Parts(tuple(parts), inner, by_day),
        )

    def _ask(self, w: Window, carry: object, read: Callable[[], object]) -> None:
        """Ask the store for the window's Slurm records now, in a thread (taken by ``job_records``)."""
        pool = ThreadPoolExecutor(1, thread_name_prefix="gpuledger-records")
        asked = pool.submit(read)
        pool.shutdown(wait=False)  # the thread ends with the query
        with self._lock:
            self._asked[w] = (carry, asked)

    def _live_records(self, lives: Sequence[Part], timezone: str) -> RecordSets | bool | None:
        """The label sets of the Slurm records of the parts read from the store (None: no such
        part; False: the store gave none)."""
        got = [self.inner.record_sets(x.window(timezone), x.live) for x in lives if x.live is not None]
        if any(x is None for x in got):
            return False
        return functools.reduce(operator.or_, [x for x in got if x is not None]) if got else None

    def _kept_records(self, x: Part, timezone: str) -> RecordSets | None:
        """A kept day's Slurm record label sets from its file; the store's where they are damaged
        (the file deleted, logged)."""
        try:
            got = x.records.made() if isinstance(x.records, RecordLine) else x.records
        except (ValueError, TypeError, KeyError, IndexError) as e:
            self._damaged(self._path(x.days[0]), e)
            got = None
        if got is None:
            got = self.inner.record_sets(x.window(timezone), GpuFigures((), carry=self.inner.carry_from(x.carry)))
        return got

    def jobs(self, w: Window, gpus: GpuFigures) -> JobFigures:
        assert isinstance(gpus.carry, _Parts), "DayCached.jobs takes DayCached.gpus' figures"
        per_part: list[Sequence[JobWeek]] = []
        approximations: list[str] = []
        problems: list[str] = []
        for x in gpus.carry.parts:
            live = x.live
            if x.jobs is not None:
                try:
                    per_part.append(x.jobs.made() if isinstance(x.jobs, JobRows) else x.jobs)
                    continue
                except (ValueError, TypeError, KeyError, IndexError) as e:  # its jobs from the store
                    self._damaged(self._path(x.days[0]), e)
                    live = self.inner.gpus(x.window(w.timezone))
            assert live is not None
            got = self.inner.jobs(x.window(w.timezone), live)
            per_part.append(got.jobs)
            approximations += got.approximations
            problems += got.problems
        return JobFigures(merge_jobs(per_part, gpus.gpus), union(approximations), union(problems))

    def _live(self, span: tuple[Day, ...], timezone: str) -> Part:
        live = self.inner.gpus(Part(span, (), (), {}, "").window(timezone))
        carry = self.inner.carry_state(live.carry)
        return Part(span, live.gpus, live.approximations, live.targets, carry, live)

    def _keep(self, d: Day, timezone: str) -> bool:
        """A whole local day (not a window's clipped edge) that ended ``settle`` seconds ago."""
        return d == whole_day(d.date, timezone) and d.end + self.settle <= self.clock()

    # --- the files ------------------------------------------------------------------------

    def _path(self, d: Day) -> Path:
        return self.folder / f"{self.key}-{int(d.start)}-{int(d.end)}.json"

    def _load(self, d: Day) -> dict[str, Any] | None:
        """The day's file, parsed and checked to be this day's of this source (``parse``); None
        where there is none, or where it is not (deleted, logged: the day is read from the store)."""
        path = self._path(d)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("day cache: cannot read %s (%s): reading the day from the store", path, e.strerror or e)
            return None
        try:
            return parse(text, d, self.key)
        except (ValueError, TypeError, KeyError, IndexError) as e:
            self._damaged(path, e)
            return None

    def _made(self, d: Day, doc: dict[str, Any], timezone: str) -> Part:
        """The day's rows from its parsed file; the day read from the store where they are not whole."""
        try:
            part = rows_of(doc, d)
        except (ValueError, TypeError, KeyError, IndexError) as e:
            self._damaged(self._path(d), e)
            return self._live((d,), timezone)
        self.counts["hits"] += 1
        return part

    def _damaged(self, path: Path, e: Exception) -> None:
        log.warning("day cache: %s is not a day of this source (%s): deleted, read from the store", path, e)
        path.unlink(missing_ok=True)  # kept again by the next keep_days

    def _write(self, x: Part) -> int:
        """1 where the day was written, 0 where the folder refused it (logged)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomic(self._path(x.days[0]), encode(x, self.key))
            self._prune()
        except OSError as e:  # the reports go on; the day is read from the store
            log.warning("day cache: cannot write in %s (%s)", self.folder, e.strerror or e)
            return 0
        self.counts["misses"] += 1
        return 1

    def _prune(self) -> None:
        horizon = self.clock() - KEEP_DAYS * 86400.0
        for path in self.folder.glob("*-*-*.json"):
            try:
                end = float(path.stem.rsplit("-", 1)[1])
            except (IndexError, ValueError):
                continue
            if end < horizon:
                path.unlink(missing_ok=True)

    # --- the rest is the inner source's, over the whole window ---------------------------

    def job_records(self, w: Window, gpus: GpuFigures) -> JobRecords:
        """The window's Slurm records. From a store that gives their label sets
        (``PromQLSource.record_sets``): the kept days' from their files and the others' read (early,
        by ``gpus``, where it asked them), added up: a window's sets are its days' together.
        Else the store's over the window: those ``gpus`` asked for early where they were asked on
        the same reading of the store, else asked now."""
        with self._lock:
            asked = self._asked.pop(w, None)
        if isinstance(gpus.carry, _Parts) and gpus.carry.by_day:
            parts = gpus.carry.parts
            early = asked is not None and asked[0] is BY_DAY
            live = asked[1].result() if asked is not None and early else self._live_records(parts, w.timezone)
            from_files = [self._kept_records(x, w.timezone) for x in parts if x.live is None]
            sets = [x for x in (*from_files, live) if isinstance(x, RecordSets)]
            if len(sets) == len(from_files) + (live is not None):  # else the store gave none after all: as below
                return records_of(functools.reduce(operator.or_, sets))
        carry = gpus.carry.inner if isinstance(gpus.carry, _Parts) else gpus.carry
        if asked is not None and asked[0] == carry:
            got: JobRecords = asked[1].result()
            return got
        return self.inner.job_records(w, replace(gpus, carry=carry))

    def history_start(self, w: Window) -> float | None:
        return self.inner.history_start(w)

    def queue(self, w: Window) -> QueuePart:
        return self.inner.queue(w)

    def failures(self, w: Window) -> list[FailureWeek]:
        return self.inner.failures(w)

    def bench(self, w: Window) -> BenchWeek | None:
        return self.inner.bench(w)

    def pod_labels(self, w: Window, names: tuple[str, ...]) -> Mapping[PodKey, Labels] | None:
        return self.inner.pod_labels(w, names)

    def job_span(self, job: str, now: float) -> Span | None:
        return self.inner.job_span(job, now)

    def job_states(self, start: float, end: float) -> dict[str, str] | None:
        return self.inner.job_states(start, end)

    def session(self) -> AbstractContextManager[None]:
        return self.inner.session()

    def describe(self) -> str:
        return self.inner.describe()

    def close(self) -> None:
        self.inner.close()


# --- the files' layout ------------------------------------------------------------------------
