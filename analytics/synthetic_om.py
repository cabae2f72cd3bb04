"""The synthetic fleet as scraped series, in OpenMetrics text for
``promtool tsdb create-blocks-from openmetrics``: every series' samples contiguous and ascending,
timestamps in seconds, one sample per step (the scrape interval), ``# EOF`` last.

``naming="gpuledger"`` writes what gpuledger's exporter would have exposed; ``naming="dcgm"``
what dcgm-exporter would have (a utilisation gauge, SM activity, power, an energy counter in mJ).
With ``records`` also the Slurm jobs' records (the fleet's jobs name no account: these are made up,
the same for a seed): each node exporter's ``gpuledger_job_info`` while a job's processes ran there
(their environment: the partition, the account for two jobs in three) and the Slurm watcher's
``gpuledger_slurm_job_info`` (account, partition, QOS) for three jobs in four.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

from analytics import synthetic_links
from analytics.synthetic import Fleet
from exporter.slurm.watcher import WAIT_BUCKETS

GRACE = 600  # the exporter keeps a finished job's series this long


def _labels(d: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}"


def _series(out: IO[str], name: str, labels: dict[str, str], points: Iterator[tuple[float, float]]) -> None:
    lab = _labels(labels)
    for t, v in points:
        out.write(f"{name}{lab} {v:.12g} {t:.0f}\n")


# index into a job's minute: the fleet's (sampled, busy, sm, alloc, idle, energy), then charged and stalled
JOB_COUNTERS = (
    (0, "sampled_seconds"),
    (1, "busy_seconds"),
    (5, "energy_joules"),
    (6, "charged_seconds"),
    (7, "stalled_seconds"),
)


def _alone(rows: Sequence[tuple[float, ...]], stalled: Sequence[float]) -> Callable[[int], tuple[float, ...]]:
    """A job's minute alone on its GPU: charged every second it held."""
    return lambda k: (*rows[k], rows[k][0], stalled[k])


def _on_slice(rows: Sequence[tuple[float, ...]], share: float, sm: float) -> Callable[[int], tuple[float, ...]]:
    """A job's minute on a MIG instance of ``share`` of the GPU with SM activity ``sm``, as
    ``synthetic.write_history`` writes it."""

    def minute(k: int) -> tuple[float, ...]:
        s, e = rows[k][0], rows[k][5]
        return (s, share * sm * s, 0.0, 0.0, 0.0, share * e, share * s, 0.0)

    return minute


def write(f: Fleet, path: str | Path, naming: str = "gpuledger", step: int = 60, records: bool = False) -> int:
    """Write the fleet's week; returns the number of samples."""
    w = f.window
    n = len(next(iter(f.minutes.values())))
    times = [w.start + k * step for k in range(-1, n + 2)]  # from a scrape before to one after the week
    count = 0
    claimed: dict[tuple[str, str], tuple[str, list[float]]] = {}  # (host, job id) -> user, the span's samples
    with open(path, "w") as out:
        for host, dev in f.devices:
            rows = f.minutes[dev.uuid]
            base = {"instance": f"{host}:10044", "job": "gpuledger", "gpu": str(dev.index), "uuid": dev.uuid}

            def cumulative(
                i: int, rows: Sequence[tuple[float, ...]] = rows, scale: float = 1.0
            ) -> Iterator[tuple[float, float]]:
                total = 0.0
                for k, t in enumerate(times):
                    yield t, total * scale
                    if 1 <= k <= n:
                        total += rows[k - 1][i]

            if naming == "dcgm":
                dl = {"gpu": str(dev.index), "UUID": dev.uuid, "modelName": dev.model, "Hostname": host}
                minute = [(t, rows[k - 1] if 1 <= k <= n else None) for k, t in enumerate(times)]
                _series(out, "DCGM_FI_DEV_GPU_UTIL", dl, ((t, 100 * r[1] / r[0] if r else 0.0) for t, r in minute))
                _series(out, "DCGM_FI_PROF_SM_ACTIVE", dl, ((t, r[2] / r[0] if r else 0.0) for t, r in minute))
                _series(out, "DCGM_FI_DEV_POWER_USAGE", dl, ((t, r[5] / r[0] if r else 75.5) for t, r in minute))
                _series(
                    out,
                    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                    dl,
                    ((t, 9e9 + v) for t, v in cumulative(5, scale=1000.0)),
                )
                count += 4 * len(times)
                continue
            info = {
                **base,
                "model": dev.model,
                "pci_bus_id": dev.pci_bus_id,
                "driver_version": "580.159.04",
                "hostname": host,
            }
            _series(out, "gpuledger_gpu_info", info, ((t, 1.0) for t in times))
            for i, name in enumerate(
                (
                    "sampled_seconds",
                    "busy_seconds",
                    "sm_active_seconds",
                    "allocated_seconds",
                    "allocated_idle_seconds",
                    "energy_joules",
                )
            ):
                _series(out, f"gpuledger_gpu_{name}_total", base, cumulative(i))
            stalled = f.stalled.get(dev.uuid, [0.0] * n)
            stalls = [(x,) for x in stalled]
            _series(out, "gpuledger_gpu_stalled_seconds_total", base, cumulative(0, stalls))
            count += 8 * len(times)
            if dev.uuid in f.mig:  # every second of it in MIG mode
                _series(out, "gpuledger_gpu_mig_sampled_seconds_total", base, cumulative(0))
                count += len(times)
            mig = dev.uuid in f.mig
            links = [synthetic_links.minute_bytes(r[1], mig) for r in rows]
            for link, name, labels in (
                ("pcie", "gpuledger_gpu_pcie_bytes_total", {}),
                ("nvlink", "gpuledger_gpu_nvlink_bytes_total", {"link": "0"}),  # all of it on link 0
            ):
                if link in links[0]:
                    half = [(b[link] / 2,) for b in links]
                    for direction in ("tx", "rx"):
                        _series(out, name, {**base, **labels, "direction": direction}, cumulative(0, half))
                        count += len(times)
            holders = [
                (key, first, last, _alone(rows, stalled), 1.0) for key, first, last in f.job_minutes.get(dev.uuid, [])
            ]
            holders += [  # on a slice: held the whole time; busy, energy, charged and link bytes its share
                (sp.key, sp.first, sp.last, _on_slice(rows, sp.share, sp.sm), sp.share)
                for sp in f.mig.get(dev.uuid, [])
            ]
            for key, first, last, job_minute, share in holders:
                jl = {**base, "job_id": key.job_id, "user": key.user}
                span = [t for t in times if w.start + first * step <= t <= w.start + last * step + GRACE]
                if records and key.job_id:
                    _, seen = claimed.setdefault((host, key.job_id), (key.user, []))
                    seen += span
                for i, name in JOB_COUNTERS:
                    cum = [0.0]
                    for k in range(first, last):
                        cum.append(cum[-1] + job_minute(k)[i])
                    pts = ((t, cum[min(len(cum) - 1, int((t - w.start) // step) - first)]) for t in span)
                    _series(out, f"gpuledger_job_gpu_{name}_total", jl, pts)
                    count += len(span)
                for link in links[0]:
                    cum = [0.0]
                    for k in range(first, last):
                        cum.append(cum[-1] + share * links[k][link])
                    pts = ((t, cum[min(len(cum) - 1, int((t - w.start) // step) - first)]) for t in span)
                    _series(out, "gpuledger_job_gpu_link_bytes_total", {**jl, "link": link}, pts)
                    count += len(span)
        if naming == "gpuledger" and records:
            count += _records(out, claimed)
        if naming == "gpuledger":
            count += _queue(f, out, times)
            count += _bench(f, out, times)
        out.write("# EOF\n")
    return count


def _records(out: IO[str], claimed: dict[tuple[str, str], tuple[str, list[float]]]) -> int:
    count = 0
    jobs: dict[str, tuple[str, set[float]]] = {}
    for (host, job), (user, span) in sorted(claimed.items()):
        n = int(job) if job.isdigit() else len(job)
        labels = {"instance": f"{host}:10044", "job": "gpuledger", "job_id": job, "user": user}
        env = {"account": f"acct-{n % 3}" if n % 3 else "", "partition": "gpu", "qos": ""}
        times = sorted(set(span))
        _series(out, "gpuledger_job_info", labels | env, ((t, 1.0) for t in times))
        count += len(times)
        jobs.setdefault(job, (user, set()))[1].update(times)
    for job, (user, times_set) in sorted(jobs.items()):
        n = int(job) if job.isdigit() else len(job)
        if n % 4 == 0:
            continue  # the watcher never saw it: the claims alone name it
        labels = {"instance": "slurmctl:10044", "job": "gpuledger", "job_id": job, "user": user}
        rec = {"account": f"acct-{n % 3}", "partition": "gpu", "qos": "normal" if n % 2 else "high"}
        times = sorted(times_set)
        _series(out, "gpuledger_slurm_job_info", labels | rec, ((t, 1.0) for t in times))
        count += len(times)
    return count


def _queue(f: Fleet, out: IO[str], times: list[float]) -> int:
    base = {"instance": "slurm-watcher:10044", "job": "gpuledger"}
    count = 0
    for p in sorted({j.partition for j in f.jobs}):
        jobs = [j for j in f.jobs if j.partition == p]
        started = sorted((j.start, j.start - j.submit) for j in jobs if j.start is not None)
        starts = [s for s, _ in started]
        for le in (*WAIT_BUCKETS, float("inf")):
            lab = {**base, "partition": p, "le": "+Inf" if le == float("inf") else f"{le:g}"}
            under = [s for s, wt in started if wt <= le]
            _series(
                out,
                "gpuledger_queue_wait_seconds_bucket",
                lab,
                ((t, float(bisect.bisect_right(under, t))) for t in times),
            )
        _series(
            out,
            "gpuledger_queue_wait_seconds_count",
            {**base, "partition": p},
            ((t, float(bisect.bisect_right(starts, t))) for t in times),
        )
        sums = [0.0]
        for _, wt in started:
            sums.append(sums[-1] + wt)
        _series(
            out,
            "gpuledger_queue_wait_seconds_sum",
            {**base, "partition": p},
            ((t, sums[bisect.bisect_right(starts, t)]) for t in times),
        )
        opened = sorted(j.submit for j in jobs)
        closed = sorted(j.start if j.start is not None else j.end for j in jobs)
        pending = ((t, float(bisect.bisect_right(opened, t) - bisect.bisect_right(closed, t))) for t in times)
        _series(out, "gpuledger_queue_pending_gpus", {**base, "partition": p}, pending)
        requeues = sorted(j.start for j in jobs if j.start is not None for _ in range(j.restarts))
        _series(
            out,
            "gpuledger_jobs_requeued_total",
            {**base, "partition": p},
            ((t, float(bisect.bisect_right(requeues, t))) for t in times),
        )
        count += (len(WAIT_BUCKETS) + 5) * len(times)
        for state in sorted({j.state for j in jobs}):
            ended = sorted(j.end for j in jobs if j.state == state)
            lab = {**base, "partition": p, "state": state}
            _series(
                out, "gpuledger_jobs_finished_total", lab, ((t, float(bisect.bisect_right(ended, t))) for t in times)
            )
            gs = sorted((j.end, j.end - j.start) for j in jobs if j.state == state and j.start is not None)
            ends, acc = [e for e, _ in gs], [0.0]
            for _, d in gs:
                acc.append(acc[-1] + d)
            _series(
                out, "gpuledger_jobs_gpu_seconds_total", lab, ((t, acc[bisect.bisect_right(ends, t)]) for t in times)
            )
            count += 2 * len(times)
    return count


def _bench(f: Fleet, out: IO[str], times: list[float]) -> int:
    import json

    base = {"instance": "gpu-node-01:10044", "job": "gpuledger"}
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = {}
    lab: tuple[tuple[str, str], ...]
    for r in f.bench:
        data = json.loads(r.data or "{}")
        if r.bench == "allreduce":
            key = (
                "gpuledger_bench_allreduce_largest_busbw_bytes_per_second",
                (("backend", data["backend"]), ("world_size", str(data["world_size"]))),
            )
            series.setdefault(key, []).append((r.finished, data["rows"][-1]["busbw"]))
        elif r.bench == "train":
            for row in data["rows"]:
                lab = (("model", data["model"]), ("world_size", str(row["world_size"])))
                for metric, field in (
                    ("speedup_ratio", "speedup"),
                    ("scaling_efficiency_ratio", "efficiency"),
                    ("throughput_samples_per_second", "samples_per_second"),
                ):
                    series.setdefault((f"gpuledger_bench_train_{metric}", lab), []).append((r.finished, row[field]))
    count = 0
    for (name, lab), changes in series.items():
        changes.sort()
        at = [t for t, _ in changes]
        pts = [(t, changes[i - 1][1]) for t in times if (i := bisect.bisect_right(at, t)) > 0]
        _series(out, name, {**base, **dict(lab)}, iter(pts))
        count += len(pts)
    return count
