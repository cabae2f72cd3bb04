"""Series the synthetic fleet's OpenMetrics (analytics.synthetic_om) does not write, for the
dashboard test: health events, PCIe, job identities, the Slurm watcher's gauges and histogram, and
every benchmark figure, at the same times and for the same fleet, so each panel has data."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import IO

from analytics import synthetic
from analytics.synthetic import Fleet
from domain.week import Window
from exporter.slurm.watcher import WAIT_BUCKETS
from tests.support.clock import ANCHOR
from tests.support.grafana_vars import RANGE_S

HISTORY_DAYS = 22  # covers the week before the last full one, from any "now"
BACKFILL_GAP = 180  # the backfilled day ends this long before now, before any live sample
FAILED = ("FAILED", "TIMEOUT")


def history_fleet(now: float) -> Fleet:
    """The analytics daemon's history: HISTORY_DAYS up to ``now``, built at the fixed anchor."""
    window = Window(now - HISTORY_DAYS * 86400, now, "history", "UTC")
    return synthetic.generate(window, hosts=2, gpus_per_host=2, seed=3, anchor=ANCHOR)


def backfill_day(now: float) -> Fleet:
    """The same fleet's last day, ending BACKFILL_GAP before ``now``, built at the fixed anchor."""
    window = Window(now - BACKFILL_GAP - RANGE_S, now - BACKFILL_GAP, "day", "UTC")
    return synthetic.generate(window, hosts=2, gpus_per_host=2, seed=3, anchor=ANCHOR)


def missing_states(day: Fleet, now: float) -> list[str]:
    """What the panels need in the dashboards' range (the RANGE_S up to ``now``) that the day
    lacks: jobs that ended completed and failed, a pending job, a benchmark round."""
    start = now - RANGE_S
    ended = {j.state for j in day.jobs if start <= j.end < now}
    missing = [state for state in ("COMPLETED", "CANCELLED") if state not in ended]
    if not ended & set(FAILED):
        missing.append("FAILED or TIMEOUT")
    if not any(start <= j.submit and (j.start is None or j.submit < j.start) for j in day.jobs):
        missing.append("a job that waited")
    if not any(start <= r.finished < now for r in day.bench):
        missing.append("a benchmark round")
    return missing


# --- what the synthetic OpenMetrics lacks: health events, job identities, queue, benchmarks ---------
def _series(out: IO[str], name: str, labels: dict[str, str], points: Iterator[tuple[float, float]]) -> None:
    lab = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    for t, v in points:
        out.write(f"{name}{lab} {v:.12g} {t:.0f}\n")


def write_extras(f: Fleet, out: IO[str], step: int = 60) -> None:
    """More series of the same fleet and times as ``synthetic_om.write``: what the exporter serves
    besides utilisation and link bytes (health, PCIe throughput, NVLink states, job identities, the
    Slurm watcher's gauges, every benchmark figure), so each panel has something to show."""
    w = f.window
    times = [w.start + k * step for k in range(-1, int(w.seconds // step) + 2)]
    job = "gpuledger"
    for n, (host, dev) in enumerate(f.devices):
        base = {"instance": f"{host}:10044", "job": job, "gpu": str(dev.index), "uuid": dev.uuid}
        for direction, rate in (("tx", 2e9), ("rx", 5e8)):
            _series(
                out,
                "gpuledger_gpu_pcie_throughput_bytes_per_second",
                {**base, "direction": direction},
                ((t, rate * (1 + 0.1 * math.sin(t / 600))) for t in times),
            )
        _series(out, "gpuledger_gpu_pcie_replays_total", base, ((t, 0.0) for t in times))
        if host == f.devices[0][0]:  # the first host's GPUs have NVLink (two links each), the other's none
            for link in ("0", "1"):
                at = {**base, "link": link}  # its bytes: synthetic_om's (analytics.synthetic_links)
                _series(out, "gpuledger_gpu_nvlink_state", at, ((t, 1.0) for t in times))
                _series(out, "gpuledger_gpu_nvlink_speed_bytes_per_second", at, ((t, 26_562e6) for t in times))
                for error in ("crc", "replay", "recovery"):
                    _series(out, "gpuledger_gpu_nvlink_errors_total", {**at, "error": error}, ((t, 0.0) for t in times))
        for policy, share in (("power", 0.05), ("thermal", 0.0), ("sync_boost", 0.0), ("board_limit", 0.0)):
            _series(
                out,
                "gpuledger_gpu_violation_seconds_total",
                {**base, "policy": policy},
                ((t, share * (t - times[0])) for t in times),
            )
        for cause, rows in (("correctable", n % 2), ("uncorrectable", 0)):
            _series(out, "gpuledger_gpu_remapped_rows", {**base, "cause": cause}, ((t, rows) for t in times))
        _series(out, "gpuledger_gpu_row_remap_pending", base, ((t, 0.0) for t in times))
        _series(out, "gpuledger_gpu_row_remap_failed", base, ((t, 0.0) for t in times))
        if n == 2:  # one GPU has no energy counter (a pre-Volta card): its energy integrated from power
            _series(out, "gpuledger_gpu_energy_integrated_seconds_total", base, ((t, t - times[0]) for t in times))
        if n == 1:  # one GPU had two XID 79 events (fell off the bus) this day
            first, second = times[len(times) // 3], times[2 * len(times) // 3]
            _series(
                out,
                "gpuledger_gpu_xid_errors_total",
                {**base, "xid": "79"},
                ((t, 1.0 if t < second else 2.0) for t in times if t >= first),
            )
        for key, a, b in f.job_minutes.get(dev.uuid, []):
            labels = {**base, "job_id": key.job_id, "user": key.user, "pod": "", "namespace": "", "container": ""}
            _series(
                out,
                "gpuledger_gpu_job_info",
                labels,
                ((t, 1.0) for t in times if w.start + a * step <= t < w.start + b * step),
            )
    host, dev = f.devices[-1]  # the last GPU is in MIG mode: an H100's 3g, 2g and 1g, one slice free
    _mig(out, {"instance": f"{host}:10044", "job": job, "gpu": str(dev.index), "uuid": dev.uuid}, times)
    for i, host in enumerate(sorted({h for h, _ in f.devices})):
        node = {"instance": f"{host}:10044", "job": job}
        _series(
            out,
            "gpuledger_reader_errors_total",
            {**node, "call": "pcie_throughput"},
            ((t, float(k // 240 + i)) for k, t in enumerate(times)),
        )
        _series(out, "gpuledger_history_rows_written_total", node, ((t, 2.0 * k) for k, t in enumerate(times)))
        _series(out, "gpuledger_history_write_errors_total", node, ((t, 0.0) for t in times))
    _queue(f, out, times, job)
    _bench(f, out, times, job)


MIG_LAYOUT = (
    ("1", "3g.40gb", 3, 60, 40192, 0.6),
    ("2", "2g.20gb", 2, 32, 19968, 0.0),
    ("3", "1g.10gb", 1, 16, 9856, 0.9),
)


def _mig(out: IO[str], base: dict[str, str], times: list[float]) -> None:
    """The series of a GPU in MIG mode (exporter.sampling.mig_metrics): per instance, and the free slice."""
    for gi, profile, slices, sms, mb, busy in MIG_LAYOUT:
        at = {**base, "gpu_instance_id": gi, "mig_profile": profile, "mig_uuid": f"MIG-{base['uuid'][4:12]}-{gi}"}
        _series(out, "gpuledger_mig_instance_info", {**at, "compute_instance_id": "0"}, ((t, 1.0) for t in times))
        gauges = {
            "gpuledger_mig_share_ratio": slices / 7,
            "gpuledger_mig_sm_share_ratio": sms / 132,
            "gpuledger_mig_sm_count": sms,
            "gpuledger_mig_memory_total_bytes": mb << 20,
            "gpuledger_mig_memory_used_bytes": (mb << 20) // 2 if busy else 0,
            "gpuledger_mig_processes": 1 if busy else 0,
        }
        for name, v in gauges.items():
            _series(out, name, at, ((t, float(v)) for t in times))
        rates = {"sampled": 1.0, "busy": busy, "sm_active": busy, "tensor_active": busy / 2, "dram_active": busy / 4}
        rates |= {"allocated": 1.0 if busy else 0.0, "allocated_idle": 0.0}
        for name, r in rates.items():
            _series(out, f"gpuledger_mig_{name}_seconds_total", at, ((t, r * (t - times[0])) for t in times))
    _series(out, "gpuledger_gpu_mig_unallocated_ratio", base, ((t, 1 / 7) for t in times))
    _series(out, "gpuledger_gpu_mig_sampled_seconds_total", base, ((t, t - times[0]) for t in times))  # MIG throughout


def _queue(f: Fleet, out: IO[str], times: list[float], job: str) -> None:
    base = {"instance": "slurm-watcher:10044", "job": job}
    for source in ("squeue", "sacct"):
        _series(out, "gpuledger_queue_source_up", {**base, "source": source}, ((t, 1.0) for t in times))
    for p in sorted({j.partition for j in f.jobs}):
        jobs = [j for j in f.jobs if j.partition == p]
        lab = {**base, "partition": p}

        def pending(t: float, jobs: list[synthetic.Job] = jobs) -> list[float]:
            return [j.submit for j in jobs if j.submit <= t < (j.start if j.start is not None else j.end)]

        _series(out, "gpuledger_queue_pending_jobs", lab, ((t, float(len(pending(t)))) for t in times))
        _series(
            out,
            "gpuledger_queue_oldest_pending_seconds",
            lab,
            ((t, max((t - s for s in pending(t)), default=0.0)) for t in times),
        )
        _series(
            out,
            "gpuledger_queue_running_jobs",
            lab,
            ((t, float(sum(1 for j in jobs if j.start is not None and j.start <= t < j.end))) for t in times),
        )
        # eligible wait: the submit-to-start wait less a hold of a fifth of it
        waits = sorted((j.start, 0.8 * (j.start - j.submit)) for j in jobs if j.start is not None)
        for le in (*WAIT_BUCKETS, math.inf):
            under = [s for s, wt in waits if wt <= le]
            _series(
                out,
                "gpuledger_queue_eligible_wait_seconds_bucket",
                {**lab, "le": "+Inf" if le == math.inf else f"{le:g}"},
                ((t, float(sum(1 for s in under if s <= t))) for t in times),
            )
        _series(
            out,
            "gpuledger_queue_eligible_wait_seconds_count",
            lab,
            ((t, float(sum(1 for s, _ in waits if s <= t))) for t in times),
        )
        _series(
            out,
            "gpuledger_queue_eligible_wait_seconds_sum",
            lab,
            ((t, sum(wt for s, wt in waits if s <= t)) for t in times),
        )


def _bench(f: Fleet, out: IO[str], times: list[float], job: str) -> None:
    """Every benchmark figure after each nightly round of the synthetic fleet (8 GPUs, nccl)."""
    rounds = sorted({r.finished for r in f.bench if r.bench == "allreduce"})
    assert rounds, "the synthetic day has no benchmark round"
    node = {"instance": "gpu-node-01:10044", "job": job}

    def after(value: float) -> Iterator[tuple[float, float]]:
        return ((t, value * (1 + 0.01 * sum(1 for r in rounds if r <= t))) for t in times if t >= rounds[0])

    ar = {**node, "backend": "nccl", "world_size": "8"}
    for k in range(11):  # 1 MiB .. 1 GiB: bandwidth climbs with the size
        size = 1 << (20 + k)
        busbw = 170e9 * size / (size + (64 << 20))
        _series(out, "gpuledger_bench_allreduce_busbw_bytes_per_second", {**ar, "size_bytes": str(size)}, after(busbw))
        _series(
            out,
            "gpuledger_bench_allreduce_algbw_bytes_per_second",
            {**ar, "size_bytes": str(size)},
            after(busbw / 1.75),
        )
    _series(out, "gpuledger_bench_allreduce_average_busbw_bytes_per_second", ar, after(95e9))
    _series(out, "gpuledger_bench_allreduce_wrong_elements", ar, after(0.0))
    # a user's own script measured by gpuledger scaling --history at 1, 2 and 4 GPUs (the exporter serves it)
    for n, step in ((1, 0.2), (2, 0.11), (4, 0.065)):
        model = {**node, "name": "llama-ft", "scaling": "weak", "world_size": str(n)}
        _series(out, "gpuledger_scaling_step_seconds", model, after(step))
        _series(out, "gpuledger_scaling_speedup_ratio", model, after(n * 0.2 / step))
        _series(out, "gpuledger_scaling_efficiency_ratio", model, after(0.2 / step))
        _series(out, "gpuledger_scaling_cost_per_1000_steps", {**model, "currency": "EUR"}, after(n * step * 1000))
    line_rate = 18 * 26_562e6  # an H100's 18 NVLink4 links per direction
    _series(out, "gpuledger_bench_allreduce_nvlink_line_rate_bytes_per_second", ar, after(line_rate))
    _series(out, "gpuledger_bench_allreduce_busbw_line_rate_ratio", ar, after(170e9 * 16 / 17 / line_rate))
    for direction in ("tx", "rx"):
        _series(out, "gpuledger_bench_allreduce_nvlink_bytes", {**ar, "direction": direction}, after(2.4e12))
    speed = {1: 1.0, 2: 1.92, 4: 3.61, 8: 6.55}
    for n, s in speed.items():
        tr = {**node, "model": "encoder-8x1024", "world_size": str(n)}
        _series(out, "gpuledger_bench_train_step_seconds", tr, after(0.105 * n / s))
        _series(out, "gpuledger_bench_train_mfu_ratio", tr, after(0.42 * s / n))
        _series(out, "gpuledger_bench_train_allreduce_share_ratio", tr, after(0.0 if n == 1 else 1 - s / n))
        for overlap, extra in (("none", 0.85), ("full", 0.97)):
            _series(
                out,
                "gpuledger_bench_train_predicted_speedup_ratio",
                {**tr, "overlap": overlap},
                after(1.0 if n == 1 else n * extra),
            )
    _series(out, "gpuledger_bench_matmul_flops_per_second", {**node, "dtype": "bf16"}, after(659e12))
    for kind, bw in (("d2d", 3.9e12), ("h2d", 5.5e10), ("d2h", 5.3e10)):
        _series(out, "gpuledger_bench_memcpy_bytes_per_second", {**node, "kind": kind}, after(bw))
    for bench in ("allreduce", "train", "matmul", "memcpy"):
        _series(out, "gpuledger_bench_duration_seconds", {**node, "bench": bench}, after(12.0))
        for result in ("ok", "failed", "timeout", "skipped_busy"):
            lab = {**node, "bench": bench, "result": result}
            happened = {
                "ok": [] if bench == "memcpy" else rounds,
                "failed": rounds if bench == "memcpy" else [],
                "timeout": [],
                "skipped_busy": [r - 3600 for r in rounds],
            }[result]
            _series(
                out, "gpuledger_bench_runs_total", lab, ((t, float(sum(1 for r in happened if r <= t))) for t in times)
            )
            if happened:
                _series(
                    out,
                    "gpuledger_bench_last_run_timestamp_seconds",
                    lab,
                    ((t, max(r for r in happened if r <= t)) for t in times if t >= happened[0]),
                )
