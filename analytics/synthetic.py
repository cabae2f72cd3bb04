"""A synthetic GPU fleet with a known truth, built from the shapes of the real H200 capture.

Each GPU runs a week of jobs (diurnal: busier by day), each job one of the capture's workloads
(matmul, device copies, training, or a notebook that holds memory and idles), and one job hangs
(a rank spinning on one SM: busy, not working, so *stalled*); Slurm jobs wait in
a queue (with a spike on Wednesday), some fail, some are cancelled while pending, some requeued;
a benchmark round runs every night. With ``mig_hosts`` (``gpuledger demo``) the fleet also has MIG
nodes: each GPU split into instances (``MIG_LAYOUT``), Slurm jobs on the slices, each holding and
charged its instance's share (a slice is a share: shared/DESIGN.md); synthetic too, like the rest.
The week lands in an embedded history (for the embedded
source), in OpenMetrics text for ``promtool tsdb create-blocks-from openmetrics`` (gpuledger's or
dcgm-exporter's series names), and in ``Truth``, the exact figures a report must reproduce.
Used by ``gpuledger demo``, the tests and the benchmarks. Deterministic for a seed.
"""

from __future__ import annotations

import itertools
import json
import random
import statistics
import uuid as uuidlib
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path

from analytics import synthetic_links
from domain import states
from domain.jobs import JobKey
from domain.week import Window
from exporter import history
from exporter.history import BenchRecord, FinishedJob
from exporter.readers import DeviceInfo
from exporter.readers.capture import bundled_path, load
from exporter.snapshot import JobMinuteRow, MinuteRow

IDLE_WATTS = 75.5  # the capture's idle power
# how a job that ran ends (one draw each); the failures include states the report once missed
OUTCOMES = (states.COMPLETED, "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", states.TIMEOUT)
OUTCOME_WEIGHTS = (0.88, 0.07, 0.01, 0.01, 0.03)
STALLED = "stalled"  # the hung job's kind: not in the capture, the shape of a spin-wait on one SM


@dataclass(frozen=True)
class Shape:
    util: float  # share busy
    sm: float  # SM activity share
    watts: float


@cache
def shapes() -> dict[str, Shape]:
    """Per-phase means of the capture, away from the phase edges (2 s margins)."""
    cap = load(bundled_path())
    text = (resources.files("exporter") / "captures" / "h200-phases.phases.json").read_text()
    marks = [(p["phase"], float(p["t"])) for p in json.loads(text)]
    out = {}
    for (name, start), (_, end) in itertools.pairwise(marks):
        recs = [r for r in cap.records if start + 2 <= r.t <= end - 2]
        if name in ("matmul_bf16", "device_copy", "training", "idle_end") and recs:
            out[name] = Shape(
                statistics.mean(r.util_gpu for r in recs),
                statistics.mean(r.gpm.sm if r.gpm else 0.0 for r in recs),
                statistics.mean(r.power_watts for r in recs),
            )
    # a rank spinning on one of 132 SMs (torch.cuda._sleep, or a collective whose peer died):
    # utilisation 100 %, SM activity 0.76 %, power a little above idle
    out[STALLED] = Shape(1.0, 1 / 132, 110.0)
    return out


@dataclass(frozen=True)
class Job:
    job_id: str
    user: str
    partition: str
    uuid: str
    kind: str  # a key of shapes()
    submit: float
    start: float | None
    end: float
    state: str
    restarts: int = 0


MIG_LAYOUT = (("3g.71gb", 3), ("2g.35gb", 2), ("1g.18gb", 1))  # an H200's profiles: 6 of its 7 slices
MIG_SLICES = 7
MIG_KINDS = ("training", "training", "matmul_bf16", "idle_end")  # a notebook idles on a slice too


@dataclass(frozen=True)
class MigSpan:
    """A job on one MIG instance: its minutes [first, last), its instance's profile and share of the
    GPU, and the instance's SM activity while it runs (under MIG busy time is that activity)."""

    key: JobKey
    first: int
    last: int
    profile: str
    share: float
    sm: float


@dataclass
class Truth:
    """What the report must say: per GPU seconds and joules, per job, queue and failures."""

    gpu: dict[str, dict[str, float]] = field(default_factory=dict)  # uuid -> sampled, busy, sm, alloc, idle, energy
    job: dict[tuple[str, JobKey], tuple[float, float, float]] = field(default_factory=dict)  # held, busy, J
    job_stalled: dict[tuple[str, JobKey], float] = field(default_factory=dict)  # stalled busy seconds
    waits: dict[str, list[float]] = field(default_factory=dict)  # partition -> waits of jobs started in the week
    pending_gpu_hours: dict[str, float] = field(default_factory=dict)
    finished: dict[tuple[str, str], int] = field(default_factory=dict)
    failed_gpu_hours: dict[str, float] = field(default_factory=dict)


@dataclass
class Fleet:
    window: Window
    devices: list[tuple[str, DeviceInfo]]  # (host, device)
    minutes: dict[str, list[tuple[float, float, float, float, float, float]]]  # uuid -> per minute
    jobs: list[Job]
    job_minutes: dict[str, list[tuple[JobKey, int, int]]]  # uuid -> (job, first minute, last minute)
    bench: list[BenchRecord]
    truth: Truth
    stalled: dict[str, list[float]] = field(default_factory=dict)  # uuid -> stalled busy seconds per minute
    mig: dict[str, list[MigSpan]] = field(default_factory=dict)  # uuid of a GPU in MIG mode -> its jobs


USERS = ("alice", "bob", "carol", "dave", "erin", "frank")


def generate(
    window: Window,
    hosts: int = 2,
    gpus_per_host: int = 8,
    seed: int = 7,
    idle_holders: int = 2,
    minute_step: int = 60,
    anchor: float | None = None,
    mig_hosts: int = 0,
) -> Fleet:
    """``anchor``: build the fleet as if the window began at this epoch, then move every time to
    the window (the diurnal and weekday patterns stay those of the anchor). The same jobs, states
    and rounds then land in the window whatever the hour it starts at: tests anchor at a fixed
    epoch and shift the data to "now". Shifts by whole ``minute_step``s keep minute rows aligned.
    ``mig_hosts``: that many more hosts (``gpu-mig-01``...) of one GPU in MIG mode each, drawn from a
    random generator of their own (the other hosts are the same with or without them)."""
    if anchor is not None and anchor != window.start:
        at = Window(anchor, anchor + window.seconds, window.label, window.timezone)
        built = generate(at, hosts, gpus_per_host, seed, idle_holders, minute_step, mig_hosts=mig_hosts)
        return _shifted(built, window, window.start - anchor, minute_step)
    rng = random.Random(seed)
    sh = shapes()
    n_min = int(window.seconds // minute_step)
    devices = []
    for h in range(hosts):
        for i in range(gpus_per_host):
            uid = f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f'gpuledger-demo-{seed}-{h}-{i}')}"
            devices.append((f"gpu-node-{h + 1:02d}", DeviceInfo(i, uid, "NVIDIA H200", f"00000000:{i + 10:02X}:00.0")))
    minutes: dict[str, list[tuple[float, float, float, float, float, float]]] = {}
    jobs: list[Job] = []
    job_minutes: dict[str, list[tuple[JobKey, int, int]]] = {}
    stalled: dict[str, list[float]] = {}
    next_id = 1000
    hung = min(idle_holders, len(devices) - 1)  # the GPU whose first long job of the second half hangs
    for n, (_host, dev) in enumerate(devices):
        rows = [(float(minute_step), 0.0, 0.0, 0.0, 0.0, IDLE_WATTS * minute_step)] * n_min
        rows = list(rows)
        stalls = [0.0] * n_min
        spans: list[tuple[int, int, str]] = []
        m = rng.randrange(1, 120)
        while m < n_min:
            hour = ((window.start + m * minute_step) // 3600) % 24
            busy_hours = 8 <= hour < 20
            if rng.random() < (0.9 if busy_hours else 0.5):
                length = rng.randrange(60, 6 * 60)
                kind = (
                    "idle_end"
                    if n < idle_holders and rng.random() < 0.6
                    else rng.choice(("training", "training", "training", "matmul_bf16", "device_copy"))
                )
                if n == hung and length >= 120 and m >= n_min // 2 and all(k != STALLED for _, _, k in spans):
                    kind = STALLED  # the rng draws stay those of every other fleet: only this job changes
                spans.append((m, min(n_min - 1, m + length), kind))  # none ends exactly at the week's end
                m += length + rng.randrange(5, 90)
            else:
                m += rng.randrange(30, 180)
        for first, last, kind in spans:
            s = sh[kind]
            for k in range(first, last):
                jitter = 1.0 + rng.uniform(-0.05, 0.05)
                busy = min(1.0, s.util * jitter)
                idle = float(minute_step) if busy < 0.05 else 0.0
                rows[k] = (
                    float(minute_step),
                    busy * minute_step,
                    min(busy, s.sm * jitter) * minute_step,
                    float(minute_step),
                    idle,
                    s.watts * jitter * minute_step,
                )
                if kind == STALLED:  # hours long: far past the exporter's 5-minute minimum
                    stalls[k] = busy * minute_step
            next_id += 1
            start = window.start + first * minute_step
            end = window.start + last * minute_step
            wednesday = _weekday(start) == 2
            wait = rng.expovariate(1 / (1800 if wednesday else 240))
            state = rng.choices(OUTCOMES, OUTCOME_WEIGHTS)[0]
            job = Job(
                str(next_id),
                rng.choice(USERS),
                "gpu-large" if kind == "matmul_bf16" else "gpu",
                dev.uuid,
                kind,
                start - wait,
                start,
                end,
                state,
                restarts=1 if rng.random() < 0.03 else 0,
            )
            jobs.append(job)
            job_minutes.setdefault(dev.uuid, []).append((JobKey(job.job_id, job.user), first, last))
        minutes[dev.uuid] = rows
        stalled[dev.uuid] = stalls
    for _ in range(max(2, len(devices) // 4)):  # cancelled while pending: never ran
        next_id += 1
        submit = window.start + rng.uniform(0.1, 0.9) * window.seconds
        jobs.append(
            Job(
                str(next_id),
                rng.choice(USERS),
                "gpu",
                "",
                "",
                submit,
                None,
                submit + rng.uniform(60, 3600),
                states.CANCELLED,
            )
        )
    fleet = Fleet(window, devices, minutes, jobs, job_minutes, _bench(window, rng), Truth(), stalled)
    for h in range(mig_hosts):
        next_id = _mig_host(fleet, h, seed, next_id, minute_step)
    fleet.truth = _truth(fleet, minute_step)
    return fleet


def _mig_host(f: Fleet, h: int, seed: int, next_id: int, step: int) -> int:
    """Add host ``gpu-mig-NN``: one H200 in MIG mode (``MIG_LAYOUT``), Slurm jobs on its instances
    (partition ``mig``), each instance's jobs one after another. The GPU's minute is what the exporter
    writes under MIG: busy and SM-active time the instances' SM activity times their shares, energy
    the idle power plus each running instance's share of its workload's power above idle. Returns the
    next job id."""
    rng = random.Random(f"gpuledger-demo-mig-{seed}-{h}")
    w, sh = f.window, shapes()
    n_min = int(w.seconds // step)
    uid = f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f'gpuledger-demo-{seed}-mig-{h}')}"
    dev = DeviceInfo(0, uid, "NVIDIA H200", "00000000:0A:00.0")
    spans: list[MigSpan] = []
    watts = [0.0] * n_min  # the instances' power above idle, by minute
    for profile, slices in MIG_LAYOUT:
        share = slices / MIG_SLICES
        m = rng.randrange(1, 120)
        while m < n_min:
            length = rng.randrange(60, 8 * 60)
            kind = rng.choice(MIG_KINDS)
            last = min(n_min - 1, m + length)
            next_id += 1
            user = rng.choice(USERS)
            spans.append(MigSpan(JobKey(str(next_id), user), m, last, profile, share, sh[kind].sm))
            start, end = w.start + m * step, w.start + last * step
            wait = rng.expovariate(1 / 300)
            f.jobs.append(Job(str(next_id), user, "mig", uid, kind, start - wait, start, end, states.COMPLETED))
            for k in range(m, last):
                watts[k] += share * max(0.0, sh[kind].watts - IDLE_WATTS)
            m = last + rng.randrange(5, 120)
    rows = []
    for k in range(n_min):
        running = [sp for sp in spans if sp.first <= k < sp.last]
        busy = sum(sp.share * sp.sm for sp in running) * step
        held = float(step) if running else 0.0
        idle = held if running and busy < 0.05 * step else 0.0
        rows.append((float(step), busy, busy, held, idle, (IDLE_WATTS + watts[k]) * step))
    f.devices.append((f"gpu-mig-{h + 1:02d}", dev))
    f.minutes[uid] = rows
    f.stalled[uid] = [0.0] * n_min
    f.mig[uid] = spans
    return next_id


def _shifted(f: Fleet, window: Window, offset: float, step: int) -> Fleet:
    def move(t: float | None) -> float | None:
        return None if t is None else t + offset

    jobs = [replace(j, submit=j.submit + offset, start=move(j.start), end=j.end + offset) for j in f.jobs]
    bench = [replace(b, finished=b.finished + offset) for b in f.bench]
    moved = Fleet(window, f.devices, f.minutes, jobs, f.job_minutes, bench, Truth(), f.stalled, f.mig)
    moved.truth = _truth(moved, step)
    return moved


def until(f: Fleet, now: float, settled: float, step: int = 60) -> Fleet:
    """``f`` as its exporters would have recorded it by ``now``: minute and job-minute rows and
    benchmark rounds before it, jobs that ended before it, and the jobs submitted before ``settled``
    (the current week's start) whenever they end, so that a finished week reads the same however
    soon after its end. The generated future is dropped; ``f``'s draws are not: a fleet generated
    over whole weeks and cut gives the same past for a seed, whatever ``now``."""
    n = max(0, min(len(next(iter(f.minutes.values()), [])), int((now - f.window.start) // step)))
    minutes = {u: rows[:n] for u, rows in f.minutes.items()}
    stalled = {u: rows[:n] for u, rows in f.stalled.items()}
    spans = {u: [(k, a, min(b, n)) for k, a, b in v if a < n] for u, v in f.job_minutes.items()}
    mig = {u: [replace(sp, last=min(sp.last, n)) for sp in v if sp.first < n] for u, v in f.mig.items()}
    jobs = [j for j in f.jobs if j.end < now or j.submit < settled]
    w = replace(f.window, end=f.window.start + n * step)
    bench = [b for b in f.bench if b.finished < now]
    cut = Fleet(w, f.devices, minutes, jobs, spans, bench, Truth(), stalled, mig)
    cut.truth = _truth(cut, step)
    return cut


def _weekday(t: float) -> int:
    """Monday 0 .. Sunday 6, in UTC (the epoch was a Thursday)."""
    return int(t // 86400 + 3) % 7


def _bench(w: Window, rng: random.Random) -> list[BenchRecord]:
    out = []
    for day in range(int(w.seconds // 86400)):
        t = w.start + day * 86400 + 4 * 3600 + 300
        busbw = 170e9 * (1 + rng.uniform(-0.02, 0.02)) * (0.8 if _weekday(t) == 6 else 1.0)  # a drop on Sundays
        rows = [
            {
                "size_bytes": 1 << 30,
                "count": 1 << 28,
                "time_seconds": (1 << 30) / (busbw / 1.75),
                "iters": 20,
                "algbw": busbw / 1.75,
                "busbw": busbw,
                "wrong": 0,
            }
        ]
        ar = {"backend": "nccl", "world_size": 8, "dtype": "float32", "rows": rows}
        speed = {1: 1.0, 2: 1.92, 4: 3.61, 8: 6.55}
        t1 = 0.105
        rows_t = [
            {
                "world_size": n,
                "step_seconds": t1 * n / s,
                "per_gpu_samples_per_second": 16 * s / (n * t1),
                "samples_per_second": 16 * s / t1,
                "speedup": s,
                "efficiency": s / n,
                "allreduce_share": None,
                "allreduce_seconds": None,
                "predicted_speedup_no_overlap": None,
                "predicted_speedup_full_overlap": None,
                "mfu": None,
            }
            for n, s in speed.items()
        ]
        train = {
            "model": "encoder-8x1024",
            "params": 100_000_000,
            "grad_bytes": 400_000_000,
            "batch_per_gpu": 16,
            "seq": 512,
            "flops_per_sample": 3.1e12,
            "peak_flops": 989e12,
            "busbw_source": "all-reduce sweep",
            "rows": rows_t,
        }
        out.append(BenchRecord(t, "allreduce", "ok", 12.0, "nccl", 8, json.dumps(ar)))
        out.append(BenchRecord(t + 30, "train", "ok", 25.0, "nccl", 8, json.dumps(train)))
    return out


def _truth(f: Fleet, step: int) -> Truth:
    t = Truth()
    for uuid, rows in f.minutes.items():
        sums = [sum(r[i] for r in rows) for i in range(6)]
        t.gpu[uuid] = dict(zip(("sampled", "busy", "sm", "alloc", "idle", "energy"), sums, strict=True))
        stalls = f.stalled.get(uuid, [])
        t.gpu[uuid]["stalled"] = sum(stalls)
        for key, first, last in f.job_minutes.get(uuid, []):
            rows_j = rows[first:last]
            t.job[(uuid, key)] = (step * (last - first), sum(r[1] for r in rows_j), sum(r[5] for r in rows_j))
            t.job_stalled[(uuid, key)] = sum(stalls[first:last])
        for sp in f.mig.get(uuid, []):  # on a slice: held the whole time, busy and energy its share
            rows_j = rows[sp.first : sp.last]
            busy = sp.share * sp.sm * step * (sp.last - sp.first)
            t.job[(uuid, sp.key)] = (step * (sp.last - sp.first), busy, sp.share * sum(r[5] for r in rows_j))
    w = f.window
    for j in f.jobs:
        if j.start is not None and w.start <= j.start < w.end:
            t.waits.setdefault(j.partition, []).append(j.start - j.submit)
        until = j.start if j.start is not None else j.end
        overlap = max(0.0, min(until, w.end) - max(j.submit, w.start))
        t.pending_gpu_hours[j.partition] = t.pending_gpu_hours.get(j.partition, 0.0) + overlap / 3600
        if w.start <= j.end < w.end:
            t.finished[(j.partition, j.state)] = t.finished.get((j.partition, j.state), 0) + 1
            if j.state in states.FAILED and j.start is not None:
                t.failed_gpu_hours[j.partition] = t.failed_gpu_hours.get(j.partition, 0.0) + (j.end - j.start) / 3600
    return t


def write_history(f: Fleet, path: str | Path, step: int = 60) -> None:
    """Write the fleet's week as the exporter's history would hold it (several hosts in one file)."""
    w = f.window
    db = history.connect(path)
    try:
        for host in sorted({h for h, _ in f.devices}):
            devs = [d for h, d in f.devices if h == host]
            with history.transaction(db):
                rows = []
                for d in devs:
                    for k, (s, b, sm, a, i, e) in enumerate(f.minutes[d.uuid]):
                        values = {
                            "sampled_seconds": s,
                            "busy_seconds": b,
                            "sm_active_seconds": sm,
                            "tensor_active_seconds": None,
                            "dram_active_seconds": None,
                            "energy_joules": e,
                            "allocated_seconds": a,
                            "allocated_idle_seconds": i,
                            "stalled_seconds": f.stalled[d.uuid][k],  # measured (GPM), mostly 0
                            "mig_sampled_seconds": s if d.uuid in f.mig else None,
                            **synthetic_links.history_values(b, d.uuid in f.mig),
                        }
                        rows.append(MinuteRow(int(w.start + k * step), d, values))
                history.insert_minutes(db, rows, host)
        with history.transaction(db):
            jm = []
            for uuid, spans in f.job_minutes.items():
                rows_u, stalls = f.minutes[uuid], f.stalled[uuid]
                for key, first, last in spans:
                    for k in range(first, last):
                        s, b, _, _, _, e = rows_u[k]  # alone on its GPU: charged every second it held
                        jm.append(JobMinuteRow(int(w.start + k * step), uuid, key, s, b, e, s, stalls[k]))
            for uuid, mig_spans in f.mig.items():  # a job on a slice holds, and is charged, its share
                rows_u = f.minutes[uuid]
                for sp in mig_spans:
                    for k in range(sp.first, sp.last):
                        s, e = rows_u[k][0], rows_u[k][5]
                        b = sp.share * sp.sm * s
                        jm.append(JobMinuteRow(int(w.start + k * step), uuid, sp.key, s, b, sp.share * e, sp.share * s))
            history.insert_job_minutes(db, jm)
            history.insert_jobs(
                db,
                [
                    FinishedJob(
                        "",
                        j.job_id,
                        f"train-{j.kind or 'x'}",
                        j.user,
                        j.partition,
                        j.state,
                        j.submit,
                        j.submit,
                        j.start,
                        j.end,
                        1,
                        "0:0" if j.state == states.COMPLETED else "1:0",
                        j.restarts,
                    )
                    for j in f.jobs
                ],
            )
            history.insert_bench(db, f.bench)
    finally:
        db.close()
