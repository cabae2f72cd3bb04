"""The exposition: a golden file for a fixed state, promtool on real output, the generated doc."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Callable

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.registry import CollectorRegistry

from domain.jobs import JobKey
from domain.week import ScalingPoint, ScalingRun
from exporter.attribution.shares import JobCounters
from exporter.benchmarks.results import (
    AllreduceLinks,
    AllreduceResult,
    MatmulRow,
    MemcpyRow,
    TrainMeasurement,
    allreduce_row,
    train_result,
)
from exporter.benchmarks.scaling import ScalingSnapshot
from exporter.benchmarks.state import BenchSnapshot
from exporter.history.metrics import HistoryStats
from exporter.readers import EccErrors, GpmActivity, GpuLost, Grows, Process, RemappedRows
from exporter.readers.fake import FakeReader
from exporter.sampling.job_metrics import AttributionStatus
from exporter.scrape import render as rendering
from exporter.scrape.cache import RenderCache
from exporter.scrape.collector import SnapshotCollector
from exporter.scrape.process_metrics import ProcessStats
from exporter.scrape.table import METRICS
from exporter.slurm.idle import IdleActions
from exporter.slurm.watcher import WAIT_BUCKETS, QueueSnapshot
from exporter.snapshot import GpuSnapshot, Histogram, Snapshot, by_type
from tests.support.metrics import parse_metrics
from tests.support.mig import mig_state
from tests.support.paths import REPO
from tests.support.processes import ExporterProcess
from tests.support.sampling import make_sampler, step
from tests.support.tools import require_binary
from tests.support.wait import wait_until

GOLDEN = REPO / "tests" / "golden" / "exposition.prom"


def fixed_snapshot() -> Snapshot:
    """A fake 3-GPU node in a known state: one busy with GPM and NVLink, one throttled with XIDs
    and ECC errors and no energy counter, one lost; a hostile hostname to exercise label escaping."""
    r = FakeReader(3)
    g0, g1, _ = r.gpus
    g0.util, g0.gpm = 0.75, GpmActivity(sm=0.5, tensor=0.25, dram=0.125, sm_occupancy=0.1)
    g0.processes = [Process(11, 2 << 30)]
    g0.power_watts, g0.memory_used_bytes = 450.0, 2 << 30
    g1.processes = [Process(12, 1 << 30)]
    g1.clock_event_reasons = 0x4
    g1.ecc = EccErrors(corrected=3, uncorrected=1)
    g1.remapped = RemappedRows(correctable=2, uncorrectable=1, pending=True, failed=False)
    g0.nvlinks = 2  # NVLink: per-link traffic, state and errors (the others have none: absent)
    g1.facts["power_violation_seconds"] = Grows(0.25)  # the power cap held its clocks a quarter of the time
    g1.unsupported = {"energy_joules"}  # no energy counter (before Volta): power integrated, and said
    s = make_sampler(r, hostname='node "7"\\rack\nb')
    s._wall = lambda: 1_796_000_000.0
    s.tick()
    s.slow_tick()
    step(s, r, 1.0, ticks=10)
    r.emit_xid(1, 79)
    s._record_xids(r.wait_xid(0.0))
    r.fail("temperature_celsius", gpu=0, times=2)
    r.fail("utilization", gpu=2, error=GpuLost("GPU is lost", call="utilization", gpu=2))
    step(s, r, 1.0, ticks=2)
    proc = ProcessStats(
        cpu_seconds=1.5,
        resident_bytes=40 << 20,
        virtual_bytes=400 << 20,
        start_time_seconds=1_795_999_000.0,
        open_fds=12,
        max_fds=1024,
    )
    return dataclasses.replace(
        s.snapshot,
        sample_duration_seconds=0.00125,
        parts=by_type(
            [
                HistoryStats(42, 1),
                proc,
                bench_snapshot(),
                queue_snapshot(),
                AttributionStatus(True),
                scaling_snapshot(),
                IdleActions({"warned": 3, "cancelled": 1, "refused": 2}),
            ]
        ),
        gpus=(with_jobs(s.snapshot.gpus[0]), *s.snapshot.gpus[1:]),
    )


def with_jobs(g: GpuSnapshot) -> GpuSnapshot:
    jobs = {
        JobKey("4242", "alice", account="pi-lovelace", partition="gpu", qos="normal"): JobCounters(
            10.0, 6.0, 3000.0, 7.5, 2.25, holding=True
        ),
        JobKey("", "root", "train-0", 'ml"ops', "trainer"): JobCounters(4.0, 1.0, 500.0, 2.5, 0.0, holding=False),
    }
    return dataclasses.replace(g, jobs=jobs)


def scaling_snapshot() -> ScalingSnapshot:
    """One model measured by gpuledger scaling at 1 and 2 GPUs, the second count without samples/step."""
    points = (
        ScalingPoint(1, "ok", 0.1, 1.0, 1.0, 160.0, 0.1),
        ScalingPoint(2, "ok", 0.0625, 3.2, 1.6, None, 0.125),
    )
    return ScalingSnapshot((ScalingRun('lm "7b"', 1_795_990_000.0, "weak", "step timer", "GPUs", "EUR", points, ()),))


def queue_snapshot() -> QueueSnapshot:
    wait = Histogram(WAIT_BUCKETS, tuple(min(i, 3) for i in range(len(WAIT_BUCKETS))), 95.5, 4)
    return QueueSnapshot(
        sources={"squeue": True, "jobcomp": False},
        pending_jobs={"gpu": 3, "cpu": 0},
        pending_gpus={"gpu": 12, "cpu": 0},
        running_jobs={"gpu": 1, "cpu": 2},
        oldest_pending={"gpu": 42.5, "cpu": 0.0},
        wait={"gpu": wait},
        eligible_wait={"gpu": wait},
        finished={("gpu", "COMPLETED"): 7, ("gpu", "FAILED"): 1, ("cpu", "CANCELLED"): 2},
        gpu_seconds={("gpu", "COMPLETED"): 7200.0, ("gpu", "FAILED"): 900.0},
        requeued={"gpu": 1, "cpu": 0},
        job_info={"4242": ("alice", "pi-lovelace", "gpu", "normal"), "4300": ("bob", 'p"i\\ü', "gpu", "")},
        refused={"running": 1},
    )


def bench_snapshot() -> BenchSnapshot:
    """A finished 2-GPU round: a two-size sweep, training at 1 and 2 GPUs, GEMM, copies."""
    rows = (allreduce_row(1 << 20, 1 << 18, 1e-4, 100, 2, 0), allreduce_row(1 << 24, 1 << 22, 1e-3, 50, 2, 0))
    links = AllreduceLinks(3.2e10, 3.2e10, 2, 2 * 26_562e6)  # NVLink: bytes of the sweep, 2 links' line rate
    ar = AllreduceResult("nccl", 2, "float32", rows, links)
    train = train_result(
        model="encoder-8x1024",
        params=100_000_000,
        grad_bytes=400_000_000,
        batch=16,
        seq=512,
        flops_per_sample=1e12,
        peak=989e12,
        sweep=ar,
        measured=[TrainMeasurement(1, 0.05), TrainMeasurement(2, 0.06, 0.05, 0.01)],
    )
    return BenchSnapshot(
        allreduce=ar,
        train=train,
        matmul=(MatmulRow("bfloat16", 8192, 6.5e14, (6.5e14, 6.6e14)),),
        memcpy=(MemcpyRow("d2d", 1 << 30, 2.1e12, (2.1e12, 2.2e12)),),
        runs={("allreduce", "ok"): 3, ("allreduce", "skipped_busy"): 1, ("train", "timeout"): 1},
        last_run={("allreduce", "ok"): 1_795_990_000.0},
        duration={"allreduce": 7.5, "train": 12.25},
    )


def render(snapshot: Snapshot, accept: str | None = None) -> str:
    body, _ = RenderCache(lambda: snapshot).render(accept, gzip_ok=False)
    return body.decode()


def test_golden_exposition() -> None:
    text = render(fixed_snapshot())
    if os.environ.get("GPULEDGER_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "exposition changed; rerun with GPULEDGER_UPDATE_GOLDEN=1 and review the diff"


def test_golden_values_are_what_the_state_implies() -> None:
    m = parse_metrics(render(fixed_snapshot()))
    uuid0, uuid1, uuid2 = (f"GPU-00000000-0000-0000-0000-{i:012d}" for i in range(3))
    assert m["gpuledger_gpu_busy_seconds_total"][(("gpu", "0"), ("uuid", uuid0))] == pytest.approx(9.0)
    assert m["gpuledger_gpu_sampled_seconds_total"][(("gpu", "0"), ("uuid", uuid0))] == pytest.approx(12.0)
    assert m["gpuledger_gpu_up"][(("gpu", "2"), ("uuid", uuid2))] == 0.0
    assert m["gpuledger_gpu_xid_errors_total"][(("gpu", "1"), ("uuid", uuid1), ("xid", "79"))] == 1.0
    assert m["gpuledger_reader_errors_total"][(("call", "temperature_celsius"),)] == 2.0
    info = next(iter(m["gpuledger_gpu_info"]))
    assert ("hostname", 'node "7"\\rack\nb') in info  # escaped on the wire, intact after parsing


def test_every_table_metric_appears_in_the_golden_state() -> None:
    # or, for a MIG instance's series, in the MIG state (the golden state has no GPU in MIG mode)
    names = set(parse_metrics(render(fixed_snapshot()))) | set(parse_metrics(render(mig_state()[2])))
    missing = [m.name for m in METRICS if not {m.name, m.name + "_total", m.name + "_count"} & names]
    assert not missing


def test_renderer_is_byte_identical_to_prometheus_client() -> None:
    snap = fixed_snapshot()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snap))
    assert rendering.render(snap) == generate_latest(registry)
    assert rendering.render(snap, openmetrics=True) == generate_openmetrics(registry)  # type: ignore[no-untyped-call]


def test_openmetrics_negotiation() -> None:
    text = render(fixed_snapshot(), accept="application/openmetrics-text; version=1.0.0")
    assert text.endswith("# EOF\n")
    fams = {f.name for f in parse_openmetrics(text)}  # type: ignore[no-untyped-call]
    assert {
        "gpuledger_gpu_busy_seconds",
        "gpuledger_gpu",
        "gpuledger_nvml_up",
    } <= fams  # gpuledger_gpu: info


def promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    promtool = require_binary("promtool")
    return subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)


@pytest.mark.integration
def test_promtool_accepts_the_golden_state() -> None:
    res = promtool_check(render(fixed_snapshot()))
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.integration
def test_promtool_accepts_the_real_exporter_output(
    exporter_process: Callable[..., ExporterProcess],
) -> None:
    p = exporter_process("--reader", "replay", "--replay-gpus", "4", "--sample-interval", "0.2")
    assert p.proc.poll() is None
    assert wait_until(lambda: "gpuledger_gpu_busy_seconds_total" in p.metrics())
    text = p.metrics()
    assert "gpuledger_gpu_busy_seconds_total" in text and "process_resident_memory_bytes" in text
    res = promtool_check(text)
    assert res.returncode == 0, res.stdout + res.stderr
