"""Benchmark rounds inside the daemon (torch-free): APScheduler triggers, an idle gate, one
round at a time, a child process group with a hard timeout, results into state and history."""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from daemonkit.crontab import cron_trigger
from exporter.benchmarks.links import RoundLinks
from exporter.benchmarks.plan import ONE_RANK, Plan, default_plan, for_world
from exporter.benchmarks.records import BenchRecord
from exporter.benchmarks.runner import BenchRunner, Event, Outcome
from exporter.benchmarks.state import BenchState
from exporter.facts import nvlink
from exporter.readers import source_name

if TYPE_CHECKING:
    from exporter.config import BenchSettings
    from exporter.sampling.sampler import Sampler

log = logging.getLogger(__name__)


class BenchScheduler:
    def __init__(
        self,
        settings: BenchSettings,
        sampler: Sampler,
        state: BenchState,
        keep: Callable[[list[BenchRecord]], None] | None,
        runner: BenchRunner | None = None,
        plan_hook: Callable[[Plan], Plan] | None = None,
    ) -> None:
        self.settings = settings
        self.sampler = sampler
        self.state = state
        self.keep = keep  # stores the records (the history writer's submit; None: not stored)
        self.runner = runner or BenchRunner()
        self.plan_hook = plan_hook  # tests inject faults here
        self._lock = threading.Lock()
        self._sched: BackgroundScheduler | None = None

    def start(self) -> None:
        s = self.settings
        tz = s.timezone or None
        trigger = IntervalTrigger(seconds=s.interval, timezone=tz) if s.interval else cron_trigger(s.cron, timezone=tz)
        self._sched = BackgroundScheduler(timezone=tz) if tz else BackgroundScheduler()
        self._sched.add_job(
            self.run_round, trigger, id="bench", max_instances=1, coalesce=True, misfire_grace_time=3600
        )
        if s.run_at_start:
            when = datetime.datetime.now().astimezone() + datetime.timedelta(seconds=s.idle_window + 1.0)
            self._sched.add_job(self.run_round, "date", run_date=when, id="bench-start")
        self._sched.start()
        job = self._sched.get_job("bench")
        log.info("benchmark rounds scheduled (%s); next at %s", trigger, job.next_run_time if job else "?")
        if (missing := self.no_gpu()) is not None:
            log.warning("%s: each round is skipped (skipped_no_gpu) until that changes", missing)

    def stop(self) -> None:
        if self._sched is not None:
            self._sched.shutdown(wait=False)
            self._sched = None
        self.runner.cancel()

    def plan(self) -> Plan:
        """NCCL over every GPU on an NVML node; gloo with two CPU ranks anywhere else."""
        gpus = self.sampler.gpu_count() if self.sampler.reader.kind == "nvml" else 0
        benches = for_world(tuple(self.settings.benches), gpus) if gpus else tuple(self.settings.benches)
        plan = (
            default_plan(benches, "nccl", gpus, quick=self.settings.quick)
            if gpus
            else default_plan(benches, "gloo", 2, quick=self.settings.quick)
        )
        return self.plan_hook(plan) if self.plan_hook else plan

    def run_round(self) -> Outcome | None:
        """Run one round now unless one is running or the GPUs are not idle. Never raises."""
        if not self._lock.acquire(blocking=False):
            log.info("a benchmark round is already running; not starting another")
            return None
        try:
            return self._round()
        except Exception:
            log.exception("benchmark round failed to run")
            return None
        finally:
            self._lock.release()

    def no_gpu(self) -> str | None:
        """Why a round cannot measure GPUs here, or None: the reader is down (on an NVML node:
        NVML is), or an NVML node has no GPU. A replay or fake reader runs gloo on the CPU."""
        snap = self.sampler.snapshot
        if not self.sampler.nvml_up:
            return f"{source_name(self.sampler.reader.kind)} is down ({snap.reader_down or 'not opened'})"
        if self.sampler.reader.kind == "nvml" and self.sampler.gpu_count() == 0:
            return "NVML finds no GPU on this node"
        return None

    def _round(self) -> Outcome | None:
        if (missing := self.no_gpu()) is not None:
            log.warning("benchmark round skipped (skipped_no_gpu): %s", missing)
            self._store(self.state.skipped(self.settings.benches, time.time(), "skipped_no_gpu"))
            return None
        idle, why = self.sampler.idle_status(self.settings.idle_window)
        if not idle:
            log.info("benchmark round skipped: %s", why)
            self._store(self.state.skipped(self.settings.benches, time.time()))
            return None
        plan = self.plan()
        left_out = [b for b in self.settings.benches if b not in plan.benches]
        if left_out:  # one GPU: the all-reduce has no peer
            log.info("benchmark round without %s: %s", "+".join(left_out), ONE_RANK)
            self._store(self.state.skipped(left_out, time.time(), "skipped_no_gpu"))
        if not plan.benches:
            return None
        log.info(
            "benchmark round starting: %s on %d %s ranks (timeout %.0f s)",
            "+".join(plan.benches),
            plan.world_size,
            plan.backend,
            self.settings.timeout,
        )
        links = RoundLinks(lambda: self.sampler.read_facts(nvlink.ROUND))  # NVLink bytes of the all-reduce
        outcome = self.runner.run(plan, self.settings.timeout, links.watching(self._event))
        links.attach(outcome.result)
        self._store(self.state.record(outcome))
        summary = ", ".join(f"{b} {s}" for b, s in outcome.status.items())
        level = logging.INFO if outcome.ok else logging.ERROR
        log.log(level, "benchmark round finished in %.1f s: %s", outcome.duration, summary)
        if not outcome.ok and outcome.stderr_tail:
            log.error("benchmark child stderr (tail):\n%s", outcome.stderr_tail[-2000:])
        return outcome

    def _store(self, records: list[BenchRecord]) -> None:
        if self.keep is not None and records:
            self.keep(records)

    @staticmethod
    def _event(ev: Event) -> None:
        if ev.get("event") == "error":
            log.error("benchmark %s: %s", ev.get("bench"), ev.get("message"))
        elif ev.get("event") in ("start", "begin"):
            log.debug("benchmark event: %s", ev)
