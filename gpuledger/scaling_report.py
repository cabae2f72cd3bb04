"""The result of ``gpuledger scaling``: the figures per N, the table and the JSON."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuledger import scaling_math as sm


@dataclass
class Row:
    n: int  # ranks in all (GPUs, or CPU ranks)
    nodes: int = 1  # across nodes: torchrun's rendezvous, n / nodes ranks on each
    status: str = "ok"  # ok | failed | timeout
    step_seconds: float | None = None
    samples_per_step: float | None = None  # all ranks together
    runs: list[dict[str, Any]] = field(default_factory=list)  # {"steps", "seconds"} of each run
    grad_bytes: int | None = None
    transport: str | None = None  # how NCCL moved the data (its own log); None: not said (gloo, CPU)
    energy_per_step: float | None = None  # joules, all N GPUs together (their energy counters)
    exposed_comm_seconds: float | None = None  # per step: synced less unsynced (the step timer's no_sync)
    error: str = ""
    tail: list[str] = field(default_factory=list)


@dataclass
class Result:
    name: str
    script: list[str]
    scaling: sm.Scaling
    method: str  # "two runs" ({steps}) or "step timer" (gpuledger.steptimer)
    unit: str  # "GPUs" or "ranks" (CPU)
    price_per_gpu_hour: float
    currency: str
    example_prices: bool
    energy: str  # why energy is n/a ("" where the GPUs' counters were read)
    energy_price_per_kwh: float = 0.0  # x PUE; 0 where a cloud price includes the energy
    warmup: int = 0
    repeat: int = 1
    rows: list[Row] = field(default_factory=list)
    finish_steps: int | None = None  # the training's length, in steps at one GPU (--finish)
    here: int = 0  # GPUs (or cores) on this node: an all-reduce sweep of more ranks ran across nodes
    sweeps: list[tuple[int, float]] = field(default_factory=list)  # (world size, busbw B/s at the gradients' size)

    def baseline(self) -> Row | None:
        return next((r for r in self.rows if r.n == 1 and r.step_seconds), None)

    def speedup(self, r: Row) -> float | None:
        b = self.baseline()
        if b is None or b.step_seconds is None or not r.step_seconds:
            return None
        return sm.speedup(self.scaling, r.n, b.step_seconds, r.step_seconds)

    def cost_per_steps(self, r: Row, steps: float = 1000) -> float | None:
        """Hardware or rental for N GPUs over ``steps`` steps, plus their energy where measured."""
        if r.step_seconds is None:
            return None
        energy = (r.energy_per_step or 0.0) * steps / 3.6e6 * self.energy_price_per_kwh
        return sm.cost_per_steps(self.price_per_gpu_hour, r.n, r.step_seconds, steps) + energy

    def cost_per_sample(self, r: Row) -> float | None:
        per_step = self.cost_per_steps(r, 1)
        return None if per_step is None or not r.samples_per_step else per_step / r.samples_per_step

    def to_finish(self, r: Row) -> tuple[float, float] | None:
        """(seconds, cost) to finish ``finish_steps`` one-GPU steps at ``r``'s N: the same work, at
        the measured speedup (weak: each step does N one-GPU steps' samples; strong: the same steps,
        each faster)."""
        b = self.baseline()
        s = self.speedup(r)
        if self.finish_steps is None or b is None or b.step_seconds is None or not s or s <= 0:
            return None
        seconds = self.finish_steps * b.step_seconds / s
        cost = self.cost_per_steps(r, seconds / r.step_seconds) if r.step_seconds else None
        return (seconds, cost) if cost is not None else None

    def verdicts(self) -> list[str]:
        b = self.baseline()
        out = []
        per = "per sample" if b is not None and b.samples_per_step else "per unit of work"
        for r in self.rows:
            s = self.speedup(r)
            if r.n == 1 or s is None or s <= 0:
                continue
            ratio = None
            c1, cn = (self.cost_per_sample(b), self.cost_per_sample(r)) if b is not None else (None, None)
            if c1 and cn:
                ratio = cn / c1
            sentence = sm.verdict(r.n, s, self.unit, self.price_per_gpu_hour, self.currency, per, ratio)
            prev = next((p for p in reversed(self.rows[: self.rows.index(r)]) if p.n > 1 and self.speedup(p)), None)
            sp = self.speedup(prev) if prev is not None else None
            if prev is not None and sp:
                sentence += f"; against {prev.n}: {s / sp:.2f}x as fast for {r.n / prev.n:g}x the {self.unit}"
                cp, cr = self.cost_per_sample(prev), self.cost_per_sample(r)
                if cp and cr:
                    sentence += f", {_more_or_less(cr / cp)} {per}"
            out.append(sentence)
        return out

    def grad_bytes(self) -> int | None:
        """The gradients' size the step timer reported, from the largest one-node N that has it."""
        return next((r.grad_bytes for r in reversed(self.rows) if r.grad_bytes and r.nodes == 1), None)

    def comm_predictions(self) -> list[sm.CommPrediction]:
        """Weak scaling with the gradients' size known: the next doubling of the largest one-node N,
        and two nodes where an all-reduce sweep across nodes is in the history (and no row ran there)."""
        b = self.baseline()
        rows = [r for r in self.rows if r.n > 1 and r.nodes == 1 and r.step_seconds and r.grad_bytes]
        if self.scaling != "weak" or b is None or b.step_seconds is None or not rows:
            return []
        r = rows[-1]
        assert r.step_seconds is not None and r.grad_bytes is not None
        exposed = r.exposed_comm_seconds
        compute = r.step_seconds - exposed if exposed is not None else b.step_seconds
        within = [(w, bw) for w, bw in self.sweeps if w <= self.here]
        across = [(w, bw) for w, bw in self.sweeps if w > self.here]
        out = []
        busbw: float | None
        if within:
            busbw, source = within[-1][1], f"the all-reduce sweep at {within[-1][0]} {self.unit} in the history"
        else:
            busbw = sm.exposed_busbw(r.n, r.grad_bytes, exposed or 0.0)
            source = f"your exposed all-reduce at {r.n} {self.unit}"
        if busbw:
            n = 2 * r.n
            out.append(
                sm.CommPrediction(n, sm.comm_speedup(n, b.step_seconds, compute, r.grad_bytes, busbw), busbw, source)
            )
        if across and not any(x.nodes > 1 for x in self.rows):
            w, bw = across[-1]
            n = 2 * r.n
            speed = sm.comm_speedup(n, b.step_seconds, compute, r.grad_bytes, bw)
            out.append(sm.CommPrediction(n, speed, bw, f"the all-reduce sweep at {w} {self.unit} across nodes", 2))
        return out

    def fit(self) -> sm.Fit | None:
        points = [(r.n, s) for r in self.rows if r.n > 1 and (s := self.speedup(r)) is not None and s > 0]
        return sm.fit(self.scaling, points)

    @property
    def ok(self) -> bool:
        return all(r.status == "ok" for r in self.rows)


def _more_or_less(ratio: float) -> str:
    if abs(ratio - 1) < 0.005:
        return "the same"
    return f"{abs(ratio - 1) * 100:.0f} % {'more' if ratio > 1 else 'less'}"


def _f(x: float | None, fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def table(res: Result) -> str:
    cur = res.currency
    how = {
        "weak": "weak scaling: the same per-rank batch, speedup = throughput(N) / throughput(1) = N·t(1) / t(N)",
        "strong": "strong scaling: a fixed global batch split over N, speedup = t(1) / t(N)",
    }[res.scaling]
    if res.method == "two runs":
        method = "steady step time = (t2 − t1) / (steps2 − steps1) of two runs per N (start-up and warm-up cancel)"
        if res.repeat > 1:
            method += f"; medians of {res.repeat} runs each"
    else:
        method = f"step timer: each rank's median step after {res.warmup} warm-up steps, the slowest rank's"
        if any(r.exposed_comm_seconds is not None for r in res.rows):
            method += " (and after the steps run without the all-reduce, where it was measured)"
    example = " (example prices: set [cost] in the config)" if res.example_prices else ""
    lines = [
        f"# gpuledger scaling: {res.name} ({' '.join(res.script)})",
        f"# {how}",
        f"# {method}",
        f"# price {res.price_per_gpu_hour:,.2f} {cur} per GPU-hour{example}"
        + (", per rank here (no GPUs)" if res.unit == "ranks" else "")
        + (
            f"; energy per step n/a ({res.energy})"
            if res.energy
            else f"; energy from the GPUs' own counters at {res.energy_price_per_kwh:,.3f} {cur}/kWh (x PUE)"
            if res.energy_price_per_kwh
            else "; energy from the GPUs' own counters (in the cloud price)"
        ),
    ]
    joules = any(r.energy_per_step is not None for r in res.rows)
    unit = "gpus" if res.unit == "GPUs" else "ranks"
    runs_head = "  t1 s (steps)  t2 s (steps)" if res.method == "two runs" else ""
    lines.append(
        f"# {unit:>5}  {'step ms':>8}  {'samples/s':>10}  {'speedup':>7}  {'effic.':>6}  "
        f"{cur + '/1k steps':>13}  {cur + '/sample':>12}{'   J/step' if joules else ''}{runs_head}"
    )
    for r in res.rows:
        if r.status != "ok" or r.step_seconds is None:
            lines.append(f"  {r.n:>5}  {r.status}: {r.error}")
            continue
        s = res.speedup(r)
        thr = r.samples_per_step / r.step_seconds if r.samples_per_step else None
        per_k = res.cost_per_steps(r) or 0.0
        line = (
            f"  {r.n:>5}  {r.step_seconds * 1e3:>8.1f}  {_f(thr, '>10.1f'):>10}  {_f(s, '>7.2f'):>7}  "
            f"{_f(None if s is None else sm.efficiency(r.n, s) * 100, '>5.0f'):>5}%  {per_k:>13.4f}  "
            f"{_f(res.cost_per_sample(r), '>12.3g'):>12}" + (f"  {_f(r.energy_per_step, '>7.1f'):>7}" if joules else "")
        )
        if res.method == "two runs":
            line += "".join(f"  {sec:>5.1f} ({steps:>5})" for steps, sec in median_times(r.runs))
        lines.append(line.replace(" n/a%", "  n/a"))
    for r in res.rows:
        if r.nodes > 1:
            lines.append(
                f"# {r.n} {res.unit}: {r.nodes} nodes x {r.n // r.nodes} (torchrun's rendezvous), timed on this "
                "node's ranks" + ("" if res.energy else f", energy this node's GPUs' x {r.nodes}")
            )
    lines += [f"# {v}" for v in res.verdicts()]
    exposed = [(r.n, c, t) for r in res.rows if (c := r.exposed_comm_seconds) is not None and (t := r.step_seconds)]
    if exposed:
        lines.append(
            "# exposed all-reduce (steps run without it, the step timer's no_sync): "
            + "; ".join(f"{n} {res.unit} {c * 1e3:.1f} ms per step, {100 * c / t:.0f} %" for n, c, t in exposed)
        )
    said = [(r.n, r.transport) for r in res.rows if r.n > 1 and r.transport]
    if said:
        lines.append("# communication (NCCL's own log): " + "; ".join(f"{n} {res.unit} {t}" for n, t in said))
    elif res.unit == "ranks":
        lines.append(
            "# communication: not named on CPU (gloo; on GPUs NCCL's log names NVLink, PCIe, SHM or the network)"
        )
    else:
        lines.append("# communication: not named (no NCCL INFO lines: NCCL_DEBUG set by you, or not NCCL)")
    done = [(r, took) for r in res.rows if (took := res.to_finish(r)) is not None]
    if done:
        lines.append(
            f"# to finish {res.finish_steps:,} steps of one GPU: "
            + "; ".join(f"{r.n} {res.unit} {_duration(sec)}, {cost:,.2f} {cur}" for r, (sec, cost) in done)
        )
    f = res.fit()
    comm = res.comm_predictions()
    for p in comm:
        where = f"{p.n} {res.unit}" + (f" on {p.nodes} nodes" if p.nodes > 1 else "")
        lines.append(
            f"# prediction (communication model: {_size(res)} of gradients x 2(N-1)/N at {_rate(p.busbw)}, "
            f"{p.source}): {where}: {p.predicted_speedup:.2f}x ({p.predicted_efficiency * 100:.0f} % efficiency)"
            " — a prediction, not a measurement"
        )
    if f is not None and not comm:
        lines.append(
            f"# prediction ({f.law} fit, serial fraction {f.serial_fraction * 100:.1f} %): "
            f"{f.next_n} {res.unit}: {f.predicted_speedup:.2f}x ({f.predicted_efficiency * 100:.0f} % efficiency)"
            " — a prediction, not a measurement"
        )
    return "\n".join(lines)


def _size(res: Result) -> str:
    grads = res.grad_bytes() or 0
    return f"{grads / 2**20:.3g} MiB" if grads >= 2**20 else f"{grads / 2**10:.3g} KiB"


def _rate(bytes_per_second: float) -> str:
    return f"{bytes_per_second / 1e9:.3g} GB/s" if bytes_per_second >= 1e9 else f"{bytes_per_second / 1e6:.3g} MB/s"


def median_times(runs: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(steps, median seconds) of the runs at each step count, fewest steps first."""
    by: dict[int, list[float]] = {}
    for run in runs:
        by.setdefault(int(run["steps"] or 0), []).append(float(run["seconds"]))
    return [(k, statistics.median(v)) for k, v in sorted(by.items())]


def median_joules(runs: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(steps, median joules) at each step count, fewest steps first; none unless every run has them."""
    if not runs or any(run.get("joules") is None for run in runs):
        return []
    by: dict[int, list[float]] = {}
    for run in runs:
        by.setdefault(int(run["steps"] or 0), []).append(float(run["joules"]))
    return [(k, statistics.median(v)) for k, v in sorted(by.items())]


def to_json(res: Result) -> dict[str, Any]:
    doc = asdict(res)
    for r, row in zip(res.rows, doc["rows"], strict=True):
        s = res.speedup(r)
        row["speedup"] = s
        row["efficiency"] = None if s is None else sm.efficiency(r.n, s)
        row["throughput_samples_per_second"] = (
            r.samples_per_step / r.step_seconds if r.samples_per_step and r.step_seconds else None
        )
        row["cost_per_1000_steps"] = res.cost_per_steps(r)
        row["cost_per_sample"] = res.cost_per_sample(r)
        row["energy_per_step_joules"] = r.energy_per_step
        c = r.exposed_comm_seconds
        row["exposed_comm_share"] = c / r.step_seconds if c is not None and r.step_seconds else None
        finish = res.to_finish(r)
        row["finish_seconds"], row["finish_cost"] = finish if finish is not None else (None, None)
    f = res.fit()
    doc["verdicts"] = res.verdicts()
    doc["prediction"] = None if f is None else {**asdict(f), "predicted_efficiency": f.predicted_efficiency}
    doc["comm_predictions"] = [
        {**asdict(c), "predicted_efficiency": c.predicted_efficiency} for c in res.comm_predictions()
    ]
    return doc
