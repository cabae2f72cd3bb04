"""The sampler: owns the reader, runs the fast lane, the slow lane and the XID watcher in
background threads, integrates counters and publishes an immutable ``Snapshot``.

Scrapes only ever read ``Sampler.snapshot``; nothing on the scrape path touches the reader.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from domain.jobs import JobKey
from exporter.attribution.attributor import Attribution
from exporter.attribution.kubelet import PodDevice
from exporter.attribution.procfs import Owner
from exporter.attribution.shares import shares
from exporter.facts import FACTS, Fact
from exporter.readers import FactValue, GpuLost, Reader, ReaderError, ReaderUnavailable, XidEvent, source_name
from exporter.sampling import fact_reads, fastlane, mig, slowlane, stalls
from exporter.sampling.gpu_state import ErrorBook, TrackedGpu, count_xids, idle_status, reopened, watch_xids
from exporter.snapshot import EMPTY, JobMinuteRow, MinuteRow, Snapshot, by_type

log = logging.getLogger(__name__)

MinuteSink = Callable[[list[MinuteRow | JobMinuteRow]], None]
R = TypeVar("R")
FAILING_AFTER = 3  # consecutive failed rounds: the sampler is failing (/healthz, /readyz answer 503)


@dataclass(frozen=True, slots=True)
class SamplerOptions:
    interval: float = 1.0
    hostname: str = ""
    idle_below: float = 0.05  # allocated-but-idle when the busy share is under this
    cadence: slowlane.Cadence = field(default_factory=slowlane.Cadence)
    lost_retry: float = 10.0
    nvml_retry_max: float = 60.0
    gap_factor: float = 5.0  # an interval longer than this many ticks is a gap, not a sample
    gate_below: float = 0.05  # idle gate: utilisation under this (and no process) is idle
    job_grace: float = 600.0  # a job's series stay this long after it left its GPU
    stall: stalls.StallRule = field(default_factory=stalls.StallRule)  # what counts as stalled busy time
    facts: tuple[Fact, ...] = FACTS  # the fact table the lanes read (exporter.facts)


class Sampler:
    def __init__(
        self,
        reader: Reader,
        options: SamplerOptions | None = None,
        *,
        minute_sink: MinuteSink | None = None,
        parts: Callable[[], Iterable[object]] | None = None,
        on_snapshot: Callable[[Snapshot], None] | None = None,
        attribution: Attribution | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.reader = reader
        self.opt = options or SamplerOptions()
        self.errors = ErrorBook()
        self._minute_sink = minute_sink
        self._parts = parts  # the enabled features' snapshot parts, gathered once per round
        self._on_snapshot = on_snapshot
        self.attribution = attribution
        self._wall = wall
        self._lock = threading.Lock()
        self._gpus: list[TrackedGpu] = []
        self._nvml_up = False
        self._down = "not opened yet"  # why the reader is not open ("" while it is)
        self._driver = ""
        self._retry_at = 0.0
        self._retry_delay = 1.0
        self._warned_down = False
        self._minute: int | None = None
        self._seq = 0
        self._snapshot = EMPTY
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._failed_rounds = 0  # consecutive fast-lane rounds that raised (on any GPU)
        self._failure = ""  # the latest round's error
        self._logged: set[tuple[str, str]] = set()  # failures logged with a traceback (_log_failure)
        self._fast_facts = tuple(f for f in self.opt.facts if f.lane == "fast")
        self._slow_facts = tuple(f for f in self.opt.facts if f.lane != "fast")

    # --- public -------------------------------------------------------------------------

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def nvml_up(self) -> bool:
        return self._nvml_up

    def failure(self) -> str | None:
        """Why the sampler is failing (its last ``FAILING_AFTER`` rounds raised), else None."""
        if self._failed_rounds < FAILING_AFTER:
            return None
        return f"the last {self._failed_rounds} sampling rounds failed: {self._failure}"

    def start(self) -> None:
        self._stop.clear()
        self.tick()
        for name, target in (("fast", self._run_fast), ("slow", self._run_slow), ("xid", self._run_xid)):
            th = threading.Thread(target=target, name=f"gpuledger-{name}", daemon=True)
            th.start()
            self._threads.append(th)

    def stop(self) -> None:
        """Stop the threads, hand the partial minute to history, close the reader."""
        self._stop.set()
        for th in self._threads:
            th.join(timeout=5.0)
        self._threads.clear()
        with self._lock:
            self._close_minute(None)
        if self._nvml_up:
            self._safe_close()

    def tick(self) -> None:
        """One fast-lane round over all GPUs, then publish a snapshot. Never raises."""
        started = time.perf_counter()
        try:
            failure = self._tick()
        except Exception as e:
            failure = _describe(e)
            self._log_failure(e, "sampler tick failed; carrying on")
        self._note(failure)
        self._publish(time.perf_counter() - started)

    def _note(self, failure: str | None) -> None:
        """Count a round's outcome: a streak of failures, logged once, and its end."""
        if failure is None:
            if self._failed_rounds:
                log.warning("sampler recovered after %d failed round(s)", self._failed_rounds)
                self._logged.clear()  # a new streak logs its traceback again
            self._failed_rounds = 0
            return
        self._failed_rounds += 1
        self._failure = failure
        if self._failed_rounds == FAILING_AFTER:
            log.error("sampler failing (%s): /healthz answers 503 until a round succeeds", failure)

    def _log_failure(self, e: Exception, message: str, *args: object) -> None:
        """A failure with its traceback once: the first of its kind (message and exception type,
        whichever GPU or lane) until a failed streak of rounds ends; the rest at debug (not once
        per GPU, nor twice a second)."""
        kind = (message, type(e).__name__)
        first = kind not in self._logged
        self._logged.add(kind)
        log.log(logging.ERROR if first else logging.DEBUG, message, *args, exc_info=True)

    def slow_tick(self) -> None:
        """One slow-lane round over all GPUs. Never raises."""
        if not self._nvml_up:
            return
        now = self.reader.now()
        if self.attribution is not None:
            self.attribution.refresh_pods()
        with self._lock:
            gpus = [g for g in self._gpus if g.up and not g.lost]
        cadence, facts = self.opt.cadence, self._slow_facts
        self._each(gpus, lambda g: slowlane.read(self.reader, g, cadence, now, self.errors, facts), slowlane.apply)

    # --- fast lane ----------------------------------------------------------------------

    def _tick(self) -> str | None:
        """One round; the first error a GPU's reading raised (it spared the others), or None."""
        if not self._nvml_up and not self._try_open():
            return None
        self._roll_minute()
        max_gap = self.opt.gap_factor * self.opt.interval * self.reader.time_scale

        def read(g: TrackedGpu) -> tuple[fastlane.FastReading, dict[int, Owner | None]]:
            r = fastlane.read(self.reader, g, self.errors, self._fast_facts)
            pids = [p.pid for p in r.procs or []]
            return r, self.attribution.owners(pids) if self.attribution is not None and pids else {}

        def fold(g: TrackedGpu, ro: tuple[fastlane.FastReading, dict[int, Owner | None]]) -> None:
            r, owners = ro
            g.up = r.busy is not None or r.mig is not None  # under MIG: up while its instances answer
            dt = fastlane.integrate(g, r, max_gap=max_gap, idle_below=self.opt.idle_below)
            now = time.monotonic()
            holders, by_instance = self._fold_jobs(g, r, owners, dt, now)
            if r.in_mig:  # each instance judged on its own
                mig.fold_stall(g, r.mig, dt, by_instance, self.opt.stall)
            else:
                fastlane.fold_stall(g, r, dt, holders, self.opt.stall)
            if not g.up:
                g.observed_since = None
                return
            if g.observed_since is None:
                g.observed_since = now
            if (r.processes or 0) > 0 or (r.busy or 0.0) >= self.opt.gate_below:
                g.last_active_at = now

        gpus = [g for g in list(self._gpus) if not g.lost or self._try_recover(g)]
        failure = self._each(gpus, read, fold)
        if self.attribution is not None:
            self.attribution.procs.forget_except({p.pid for g in gpus for p in g.procs_seen})
        return failure

    def _fold_jobs(
        self, g: TrackedGpu, r: fastlane.FastReading, owners: dict[int, Owner | None], dt: float | None, now: float
    ) -> tuple[dict[JobKey, float] | None, dict[str, dict[JobKey, float]] | None]:
        """Credit the jobs holding the GPU with this round (caller holds the lock); their shares,
        or None when the process list could not be read, and under MIG their shares by instance."""
        if r.procs is None:
            return None, None  # the process list (under MIG: an instance's) could not be read: keep what we knew
        g.procs_seen = r.procs
        busy_of: dict[JobKey, float] | None = None
        by_instance: dict[str, dict[JobKey, float]] | None = None
        if r.mig is not None:  # a job holds its instances' share of the GPU (exporter.sampling.mig)
            holders, busy_of, by_instance = mig.holders(r.mig, owners, self._pod_of)
        else:
            holders = shares(r.procs, owners, r.proc_util, self._pod_of(g.info.uuid))
        if dt is not None and r.busy is not None:
            power, from_power = r.gauges.power_watts, g.energy_from_power
            g.jobs.integrate(
                holders, dt=dt, busy=r.busy, power=power, now=now, energy_from_power=from_power, busy_of=busy_of
            )
        else:
            g.jobs.seen(holders, now)
        g.jobs.expire(now, self.opt.job_grace)
        return holders, by_instance

    def _pod_of(self, uuid: str) -> PodDevice | None:
        """The pod the kubelet gave this GPU or MIG device to, if any."""
        return self.attribution.pod_of(uuid) if self.attribution is not None else None

    def _each(
        self, gpus: list[TrackedGpu], read: Callable[[TrackedGpu], R], fold: Callable[[TrackedGpu, R], None]
    ) -> str | None:
        """Read each GPU outside the lock, fold the reading in under it. A lost GPU goes down
        alone; an unavailable reader ends the round; a bug on one GPU spares the others (the
        first such error is returned)."""
        failure: str | None = None
        for g in gpus:
            try:
                r = read(g)
                with self._lock:
                    fold(g, r)
            except GpuLost as e:
                with self._lock:
                    self._mark_lost(g, e)
            except ReaderUnavailable as e:
                self._reader_down(e)
                return failure
            except Exception as e:
                failure = failure or f"gpu {g.info.index}: {_describe(e)}"
                self._log_failure(e, "sampler tick failed on gpu %d; carrying on", g.info.index)
        return failure

    def idle_status(self, window: float) -> tuple[bool, str]:
        """Whether every GPU has been watched, idle (no process, utilisation under the gate's
        threshold), for the last ``window`` seconds; and why not."""
        with self._lock:
            if not self._nvml_up:
                return False, "the GPU reader is down"
            return idle_status(self._gpus, window, time.monotonic())

    def read_facts(self, facts: Sequence[Fact]) -> dict[int, dict[str, FactValue]]:
        """These rows of the fact table, read now from every GPU that is up, outside the lanes and
        their cadences (a benchmark round reads the NVLink counters at its begin and end). By GPU
        index, the facts that answered as the reader gives them: a counter's raw reading, not folded
        into the lanes' counters, which stay as they were. A GPU whose read fails is left out;
        never raises."""
        if not self._nvml_up:
            return {}
        with self._lock:
            gpus = [g for g in self._gpus if g.up and not g.lost]
        out: dict[int, dict[str, FactValue]] = {}
        for g in gpus:
            try:
                r = fact_reads.read(self.reader, g, facts, self.errors)
            except Exception:
                log.debug("gpu %d: reading %d facts failed", g.info.index, len(facts), exc_info=True)
                continue
            if r is not None:
                out[g.info.index] = dict(r.values)
        return out

    def gpu_count(self) -> int:
        with self._lock:
            return len(self._gpus)

    def _try_open(self) -> bool:
        mono = time.monotonic()
        if mono < self._retry_at:
            return False
        try:
            driver = self.reader.open()
            devices = self.reader.devices()
        except ReaderError as e:
            self._retry_at = mono + min(self._retry_delay, self.opt.nvml_retry_max)
            self._down = str(e)
            if not self._warned_down:
                what, retry = source_name(self.reader.kind), self.opt.nvml_retry_max
                log.error("%s unavailable (%s): not ready (/readyz 503), retrying up to every %.0f s", what, e, retry)
                self._warned_down = True
            else:
                log.debug("%s still unavailable: %s", source_name(self.reader.kind), e)
            self._retry_delay = min(self._retry_delay * 2, self.opt.nvml_retry_max)
            return False
        with self._lock:
            self._gpus = reopened(self._gpus, devices)
            self._driver = driver.driver_version
            self._nvml_up, self._down = True, ""
        found = ", ".join(f"{d.index}={d.model} {d.uuid}" for d in devices) or "none"
        log.info("%s reader up: driver %s, %d GPU(s): %s", self.reader.kind, driver.driver_version, len(devices), found)
        self._retry_delay, self._warned_down = 1.0, False
        return True

    def _reader_down(self, e: ReaderError) -> None:
        log.error("%s went away (%s): GPUs down, not ready, reopening with backoff", source_name(self.reader.kind), e)
        with self._lock:
            self._nvml_up, self._down = False, str(e)
            for g in self._gpus:
                g.up, g.last_t, g.observed_since = False, None, None
        self._retry_at = time.monotonic() + min(self._retry_delay, self.opt.nvml_retry_max)
        self._warned_down = True
        self._safe_close()

    def _safe_close(self) -> None:
        try:
            self.reader.close()
        except Exception:
            log.debug("reader close failed", exc_info=True)

    def _mark_lost(self, g: TrackedGpu, e: ReaderError) -> None:
        if not g.lost:
            log.error("gpu %d (%s) lost: %s; the other GPUs keep exporting", g.info.index, g.info.uuid, e)
        g.lost, g.up, g.last_t, g.observed_since = True, False, None, None
        g.forget_raw()
        g.retry_at = time.monotonic() + self.opt.lost_retry

    def _try_recover(self, g: TrackedGpu) -> bool:
        if time.monotonic() < g.retry_at:
            return False
        i = g.info.index
        try:
            info = self.reader.device(i)
            self.reader.utilization(i)
        except ReaderError as e:
            g.retry_at = time.monotonic() + self.opt.lost_retry
            log.debug("gpu %d still lost: %s", i, e)
            return False
        if info.uuid != g.info.uuid:
            log.warning("gpu %d came back as %s, not %s; keeping it down", i, info.uuid, g.info.uuid)
            g.retry_at = time.monotonic() + self.opt.lost_retry
            return False
        g.lost = False
        g.last_sample_us = 0
        log.warning("gpu %d (%s) is back", i, g.info.uuid)
        return True

    # --- history rollups ----------------------------------------------------------------

    def _roll_minute(self) -> None:
        minute = int(self._wall() // 60 * 60)
        with self._lock:
            if self._minute is None:
                self._minute = minute
                for g in self._gpus:
                    g.start_minute()
            elif minute != self._minute:
                self._close_minute(minute)

    def _close_minute(self, next_minute: int | None) -> None:
        """Emit each GPU's increments for the current minute (caller holds the lock)."""
        if self._minute is None:
            return
        rows = [row for g in self._gpus for row in g.close_minute(self._minute)]
        self._minute = next_minute
        if rows and self._minute_sink is not None:
            self._minute_sink(rows)

    # --- snapshot -----------------------------------------------------------------------

    def _publish(self, duration: float) -> None:
        parts = by_type(self._parts()) if self._parts is not None else {}
        with self._lock:
            self._seq += 1
            new = Snapshot(
                seq=self._seq,
                taken_at=self._wall(),
                taken_monotonic=time.monotonic(),
                reader=self.reader.kind,
                hostname=self.opt.hostname,
                driver_version=self._driver,
                nvml_up=self._nvml_up,
                sample_duration_seconds=duration,
                gpus=tuple(g.snapshot() for g in self._gpus),
                reader_errors=self.errors.totals(),
                parts=parts,
                reader_down=self._down,
            )
        # rendered ahead before it is served: a scrape meanwhile gets the previous snapshot's bytes,
        # ready, instead of waiting for this one's render (20 ms for 56 MIG instances on 2 cores)
        if self._on_snapshot is not None:
            try:
                self._on_snapshot(new)
            except Exception:
                log.exception("rendering ahead failed; scrapes will render themselves")
        self._snapshot = new

    # --- threads ------------------------------------------------------------------------

    def _run_fast(self) -> None:
        interval = self.opt.interval
        next_at = time.monotonic() + interval
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            self.tick()
            next_at += interval
            if next_at < time.monotonic():  # fell behind: skip the missed ticks
                next_at = time.monotonic() + interval

    def _run_slow(self) -> None:
        period = min(1.0, self.opt.interval)
        while not self._stop.wait(period):
            self.slow_tick()

    def _run_xid(self) -> None:
        watch_xids(self.reader, self._stop, lambda: self._nvml_up, self.errors, self._record_xids)

    def _record_xids(self, events: list[XidEvent]) -> None:
        with self._lock:
            count_xids(self._gpus, events)


def _describe(e: Exception) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__
