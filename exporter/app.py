"""Wiring: settings -> reader, sampler, history, HTTP server. Nothing else lives here."""

from __future__ import annotations

import importlib.util
import logging
import os
import sqlite3
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from daemonkit.http import MetricsServer, WebOptions, serve
from daemonkit.settings import ConfigError, split_listen
from daemonkit.signals import wait_for_signal
from exporter import __version__
from exporter.attribution.attributor import Attribution, kubelet_socket
from exporter.attribution.kubelet import DEFAULT_SOCKET
from exporter.benchmarks.scaling import ScalingResults
from exporter.benchmarks.scheduler import BenchScheduler
from exporter.benchmarks.state import BenchState
from exporter.config import Settings, default_history_path
from exporter.history import HistoryError, HistoryWriter
from exporter.readers import Reader, ReaderError, ReaderUnavailable
from exporter.readers.mig_profiles import parse_layout
from exporter.readers.nvml import NvmlReader
from exporter.readers.replay import ReplayReader
from exporter.sampling import slowlane, stalls
from exporter.sampling.job_metrics import AttributionStatus
from exporter.sampling.sampler import Sampler, SamplerOptions
from exporter.scrape import process_metrics
from exporter.scrape.cache import RenderCache
from exporter.scrape.site import ExporterSite
from exporter.scrape.table import FEATURES
from exporter.slurm import commands
from exporter.slurm.idle import IdleJobs, IdlePolicy
from exporter.slurm.watcher import SlurmWatcher
from exporter.snapshot import Snapshot

log = logging.getLogger("gpuledger.exporter")


def build_reader(s: Settings) -> Reader:
    spec = s.exporter.reader
    if spec == "nvml":
        return NvmlReader()
    if spec.startswith("replay"):
        return _replay(s, spec.partition(":")[2] or None)
    probe = NvmlReader()  # auto: NVML when the NVIDIA library exists, else the bundled capture
    try:
        probe.open()
        probe.close()
    except ReaderUnavailable as e:
        if e.library_missing:
            log.warning(
                "no NVIDIA library on this machine (%s): replaying the bundled H200 capture "
                '(gpuledger_exporter_info{reader="replay"}); use --reader nvml on GPU nodes',
                e,
            )
            return _replay(s, None)
    except ReaderError:
        pass  # the library is there but NVML fails: stay on NVML, report nvml_up 0, retry
    return probe


def _replay(s: Settings, path: str | None) -> ReplayReader:
    r = s.replay
    mig = parse_layout(r.mig) if r.mig else ()
    return ReplayReader(path, gpus=r.gpus, speed=r.speed, loop=r.loop, stagger=r.stagger, mig=mig)


class Exporter:
    """The composition root: builds every part from typed settings, hands the sampler the
    snapshot parts of the enabled features (``exporter.scrape.table.FEATURES``), starts and stops them."""

    def __init__(self, settings: Settings, reader: Reader | None = None) -> None:
        self.settings = s = settings
        self.reader = reader or build_reader(s)
        self.history = self._history()
        keep = self.history.submit if self.history else None
        self.bench_state = BenchState(s.bench.benches) if self._bench_enabled() else None
        if self.bench_state is not None and self.history is not None:
            self.bench_state.restore(self.history.bench_records())
        self.slurm = SlurmWatcher(s.slurm, keep) if s.slurm.enabled else None
        # the pids of replayed or fake GPUs are not this host's processes: no attribution there
        attribution = (
            Attribution(
                s.attribution.proc_root,
                s.attribution.passwd_file,
                kubelet_socket(s.attribution.kubelet_socket, DEFAULT_SOCKET),
                s.attribution.pods_interval,
                # on the node that watches Slurm, the scheduler's accounts beat the processes' claims
                (lambda: slurm.snapshot().job_info) if (slurm := self.slurm) is not None else None,
            )
            if self.reader.kind == "nvml"
            else None
        )
        # each enabled feature's snapshot part, by feature name (a provider's None: absent this round)
        self.providers: dict[str, Callable[[], object | None]] = {"process": process_metrics.read}
        if self.history is not None:
            self.providers["history"] = self.history.stats
        if attribution is not None:
            self.providers["jobs"] = lambda: AttributionStatus(attribution.kubelet_up, attribution.conflicts())
        if self.slurm is not None:
            self.providers["slurm"] = self.slurm.snapshot
        if self.bench_state is not None:
            self.providers["bench"] = self.bench_state.snapshot
        if self.history is not None:  # gpuledger scaling --history FILE records into the same file
            self.providers["scaling"] = ScalingResults(Path(self.history.path), time.monotonic).snapshot
        self.idle = self._idle_jobs()
        if self.idle is not None:
            self.providers["idle"] = self.idle.snapshot
        self.features = tuple(f.name for f in FEATURES if f.part is None or f.name in self.providers)
        self.sampler = Sampler(
            self.reader,
            SamplerOptions(
                interval=s.exporter.sample_interval,
                hostname=s.exporter.hostname,
                idle_below=s.exporter.allocated_idle_below,
                cadence=slowlane.Cadence(
                    energy=s.exporter.energy_interval,
                    health=s.exporter.health_interval,
                    pcie=s.exporter.pcie_interval,
                ),
                lost_retry=s.exporter.lost_gpu_retry,
                nvml_retry_max=s.exporter.nvml_retry_max,
                gate_below=s.bench.idle_below,
                job_grace=s.attribution.job_grace,
                stall=stalls.rule_of(s.exporter),
            ),
            minute_sink=keep,
            parts=self._parts,
            on_snapshot=self._on_snapshot,
            attribution=attribution,
        )
        self.exposition = RenderCache(lambda: self.sampler.snapshot)
        self.bench = BenchScheduler(s.bench, self.sampler, self.bench_state, keep) if self.bench_state else None
        host, port = split_listen(s.web.listen)
        web = WebOptions(
            host=host,
            port=port,
            tls_cert_file=str(s.web.tls_cert_file) if s.web.tls_cert_file else None,
            tls_key_file=str(s.web.tls_key_file) if s.web.tls_key_file else None,
            basic_auth_users=s.web.basic_auth_users,
        )
        stale = s.exporter.stale_after
        site = ExporterSite(lambda: self.sampler.snapshot, self.exposition, stale, self.sampler.failure)
        try:
            self.server = MetricsServer(web, site)
        except ssl.SSLError as e:
            raise ConfigError(f"web.tls_cert_file / web.tls_key_file: cannot load the certificate: {e}") from e

    def _parts(self) -> Iterator[object]:
        for provide in self.providers.values():
            if (part := provide()) is not None:
                yield part

    def _on_snapshot(self, snap: Snapshot) -> None:
        self.exposition.prepare(snap)
        if self.idle is not None:
            self.idle.on_snapshot(snap, time.monotonic())

    def _idle_jobs(self) -> IdleJobs | None:
        """The idle-job actions where asked ([slurm] idle_action) on a node with real GPUs."""
        sl = self.settings.slurm
        if sl.idle_action == "off" or self.reader.kind != "nvml":
            return None
        env = {**os.environ, **({"SLURM_CONF": str(sl.conf)} if sl.conf else {})}
        policy = IdlePolicy(
            sl.idle_action,
            sl.idle_warn_after,
            sl.idle_cancel_after,
            frozenset(sl.idle_cancel_partitions),
            self.settings.exporter.allocated_idle_below,
        )
        return IdleJobs(
            policy, lambda argv: commands.run(argv, sl.command_timeout, env), sl.squeue, sl.scontrol, sl.scancel
        )

    def _bench_enabled(self) -> bool:
        """Benchmarks run where asked; by default only on real GPUs with torch installed (found
        without importing it: the daemon never imports torch)."""
        enabled = self.settings.bench.enabled
        if enabled is None:
            enabled = self.reader.kind == "nvml" and importlib.util.find_spec("torch") is not None
            if self.reader.kind == "nvml" and not enabled:
                log.info("benchmarks off: torch is not installed (pip install torch, or '.[bench]' in the clone)")
        return enabled

    def _history(self) -> HistoryWriter | None:
        h = self.settings.history
        if not h.enabled:
            return None
        if self.reader.kind != "nvml" and h.path is None:
            log.info("history off for the %s reader unless --history PATH is given", self.reader.kind)
            return None
        path = h.path or default_history_path()
        try:
            return HistoryWriter(path, hostname=self.settings.exporter.hostname, retention_days=h.retention_days)
        except (HistoryError, sqlite3.Error, OSError) as e:
            raise ConfigError(f"history.path: cannot open {path}: {e}") from e

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> None:
        if self.history:
            self.history.start()
        self.sampler.start()
        if self.bench:
            self.bench.start()
        if self.slurm:
            self.slurm.start()
        serve(self.server)
        log.info(
            "gpuledger exporter %s serving %s/metrics (reader %s, history %s; features %s)",
            __version__,
            self.url,
            self.reader.kind,
            self.history.path if self.history else "off",
            ", ".join(self.features),
        )

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self.bench:
            self.bench.stop()
        if self.slurm:
            self.slurm.stop()
        self.sampler.stop()
        if self.idle is not None:
            self.idle.stop()
        if self.sampler.attribution is not None:
            self.sampler.attribution.close()
        if self.history:
            self.history.stop()


def run(settings: Settings, reader: Reader | None = None) -> int:
    """Run until SIGTERM or SIGINT. Returns the process exit code."""
    try:
        exp = Exporter(settings, reader)
    except OSError as e:
        log.error("cannot listen on %s: %s", settings.web.listen, e.strerror or e)
        return 1
    exp.start()
    wait_for_signal()
    exp.stop()
    return 0
