"""``gpuledger scaling -- SCRIPT [ARGS...]``: does multi-GPU pay for *your* training script?

The script runs under torchrun at each GPU count (N ranks on CPU where there are no GPUs; the
script picks its backend). Start-up and warm-up never count: with ``{steps}`` in ARGS each N
runs twice with two step counts and the steady step time is the difference of the times over the
difference of the steps; with ``gpuledger.steptimer`` in the script each rank's per-step times
are used instead (one run per N). Then speedup, efficiency and cost per 1,000 steps and per
sample from the configured cost model, a verdict per N, and a fit with a labelled prediction.

Across nodes (``--nnodes M --rdzv-endpoint HOST:PORT``, the same command on every node, as srun
runs it): every node first measures each count of ``--gpus`` on its own GPUs (standalone, all
nodes at once), then the nodes meet in torchrun's c10d rendezvous for one run of M x the largest
count. Each node times its own ranks (DDP's all-reduce keeps every rank's step equal) and prints
the table; energy per step of that row is this node's GPUs' x M.

Exit codes: 0 every N measured; 1 a run failed or hung at some N (the others kept, the script's
last lines shown); 2 bad input (one line): no script, no ``{steps}`` and no step timer, more GPUs
than there are, a bad flag or config.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import socket
import sys
from dataclasses import replace
from pathlib import Path

from analytics import cli as analytics_cli
from analytics.cost import CostModel, PriceRule
from daemonkit.argcheck import writable_file
from daemonkit.settings import ConfigError
from exporter.benchmarks.runner import Rendezvous
from gpuledger import scaling_history, scaling_run
from gpuledger import scaling_math as sm
from gpuledger.scaling_energy import EnergyMeter, GpuEnergy, timer_window
from gpuledger.scaling_report import Result, Row, median_joules, median_times, table, to_json

NO_SYNC_STEPS = 5
"""Steps after the warm-up the step timer runs without the all-reduce, where the script gives it a way to."""

HELP = (
    "Run your training script under torchrun at 1, 2, 4 ... GPUs and say, in money, whether more GPUs pay.",
    "gpuledger scaling --gpus 1,2 -- examples/scaling_train.py --steps {steps}",
    "gpuledger scaling --scaling strong --json scaling.json -- train.py --config big.yaml",
)
PROG = "gpuledger scaling"


class UsageError(Exception):
    """Bad input: one line, exit 2."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gpus", default="1,2", metavar="LIST", help="GPU counts (ranks on CPU; default 1,2); 1 is always measured"
    )
    p.add_argument(
        "--scaling",
        choices=["weak", "strong"],
        default="weak",
        help="weak (default): the same per-GPU batch; strong: a fixed global batch split",
    )
    p.add_argument(
        "--steps", default="20,220", metavar="S1,S2", help="the two step counts {steps} takes (default 20,220)"
    )
    p.add_argument("--repeat", type=int, default=1, metavar="R", help="{steps}: R pairs of runs, medians taken")
    p.add_argument("--samples-per-step", type=int, metavar="K", help="per-GPU batch (weak) or global batch (strong)")
    p.add_argument(
        "--warmup", type=int, default=5, metavar="K", help="step-timer steps dropped at the start (default 5)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="end a run and all its processes after S seconds (default 600)",
    )
    p.add_argument(
        "--finish",
        type=int,
        metavar="STEPS",
        help="the training's length in steps on one GPU (epochs x steps per epoch): time and money to finish it",
    )
    p.add_argument(
        "--nnodes",
        type=int,
        default=1,
        metavar="M",
        help="also run across M nodes (the same command on each): M x the largest --gpus count, torchrun rendezvous",
    )
    p.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="rendezvous address (needed with --nnodes > 1)")
    p.add_argument("--rdzv-id", default="gpuledger-scaling", help="rendezvous id, the same on every node")
    p.add_argument("--name", help="a name for this model (default: the script's)")
    p.add_argument("--json", metavar="FILE", help="write the result here")
    p.add_argument(
        "--history",
        metavar="FILE",
        help="record the result in this history file (the exporter's [history] path): the weekly report shows it",
    )
    p.add_argument("--config", metavar="FILE", help="TOML or YAML config file with [cost] (env GPULEDGER_CONFIG)")
    p.add_argument("--python", default=sys.executable, help="the Python with torch that runs torchrun")
    p.add_argument("script", nargs=argparse.REMAINDER, metavar="-- SCRIPT [ARGS...]", help="the training script")


def _say(text: str) -> None:
    print(f"{PROG}: {text}", file=sys.stderr, flush=True)


def local_gpus() -> list[str]:
    """The models of the NVIDIA GPUs this process may use (NVML, no torch; CUDA_VISIBLE_DEVICES)."""
    from exporter.readers import ReaderError
    from exporter.readers.nvml import NvmlReader

    r = NvmlReader()
    try:
        r.open()
        models = [d.model for d in r.devices()]
        r.close()
    except ReaderError:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        models = models[: len([v for v in visible.split(",") if v.strip() and v.strip() != "-1"])]
    return models


def check(args: argparse.Namespace, gpus: list[str]) -> tuple[list[str], list[int], tuple[int, int]]:
    """The script and its arguments, the counts and the two step counts; UsageError when bad."""
    script = args.script[1:] if args.script[:1] == ["--"] else list(args.script)
    if not script:
        raise UsageError("no script: give it after --, e.g. gpuledger scaling -- train.py --steps {steps}")
    if script[0] == "-m":
        if len(script) < 2:
            raise UsageError("-m needs a module name")
    elif not Path(script[0]).is_file():
        raise UsageError(f"no script {script[0]!r} (not a file)")
    try:
        counts = sm.parse_counts(args.gpus)
    except ValueError as e:
        raise UsageError(f"--gpus: {e}") from None
    counts = sorted({1, *counts})
    if gpus and counts[-1] > len(gpus):
        raise UsageError(f"--gpus {counts[-1]}: this machine has {len(gpus)} GPUs")
    cpus = os.cpu_count() or 1
    if not gpus and counts[-1] > cpus:
        raise UsageError(f"--gpus {counts[-1]}: no GPUs here, and {counts[-1]} CPU ranks exceed the {cpus} cores")
    try:
        pair = sm.parse_counts(args.steps)
    except ValueError as e:
        raise UsageError(f"--steps: {e}") from None
    if len(pair) != 2:
        raise UsageError(f"--steps: two different step counts, e.g. 20,220 (got {args.steps})")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be positive (got {args.timeout})")
    if args.repeat < 1:
        raise UsageError(f"--repeat must be at least 1 (got {args.repeat})")
    if args.warmup < 0:
        raise UsageError(f"--warmup must be 0 or more (got {args.warmup})")
    if args.nnodes < 1:
        raise UsageError(f"--nnodes must be at least 1 (got {args.nnodes})")
    if args.nnodes > 1:
        host, _, port = (args.rdzv_endpoint or "").rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(
                "--nnodes > 1 needs --rdzv-endpoint HOST:PORT, the same on every node"
                + (f" (got {args.rdzv_endpoint!r})" if args.rdzv_endpoint else "")
            )
    if args.finish is not None and args.finish < 1:
        raise UsageError(f"--finish must be a number of steps, 1 or more (got {args.finish})")
    if args.python == sys.executable and importlib.util.find_spec("torch") is None:
        raise UsageError(f"torch is not installed in {sys.executable}: pip install torch (or give --python)")
    return script, counts, (pair[0], pair[1])


def run(args: argparse.Namespace) -> int:
    try:
        gpus = local_gpus()
        script, counts, (s1, s2) = check(args, gpus)
        if args.json:
            writable_file(Path(args.json), "--json")
        if args.history:
            writable_file(Path(args.history), "--history")
        cost = analytics_cli.full_settings(args.config).cost
    except (UsageError, ConfigError) as e:
        _say(str(e))
        return 2
    rule = cost.rule_for(gpus[0] if gpus else "", socket.gethostname())
    placeholder = sm.has_placeholder(script)
    energy, no_energy = (
        GpuEnergy.open(os.environ.get("CUDA_VISIBLE_DEVICES")) if gpus else (None, "no GPU energy counters on CPU")
    )
    try:
        return _measure(args, gpus, script, counts, (s1, s2), cost, rule, placeholder, energy, no_energy)
    finally:
        if energy is not None:
            energy.close()


def _measure(
    args: argparse.Namespace,
    gpus: list[str],
    script: list[str],
    counts: list[int],
    pair: tuple[int, int],
    cost: CostModel,
    rule: PriceRule | None,
    placeholder: bool,
    energy: GpuEnergy | None,
    no_energy: str,
) -> int:
    s1, s2 = pair
    included = rule is not None and rule.kind == "cloud" and rule.energy_included
    res = Result(
        name=args.name or Path(script[1] if script[0] == "-m" else script[0]).stem,
        script=script,
        scaling=args.scaling,
        method="two runs" if placeholder else "step timer",
        unit="GPUs" if gpus else "ranks",
        price_per_gpu_hour=rule.hourly() if rule is not None else 0.0,
        currency=cost.currency,
        example_prices=cost.example_prices,
        energy=no_energy,
        energy_price_per_kwh=0.0 if included else cost.energy_price_per_kwh * cost.pue,
        warmup=args.warmup,
        repeat=args.repeat,
        finish_steps=args.finish,
    )
    runs_per_n = 2 * args.repeat if placeholder else 1
    _say(
        f"{res.name} at {', '.join(map(str, counts))} {res.unit}, {args.scaling} scaling, "
        + (f"two runs per N ({s1} and {s2} steps)" if placeholder else "one run per N (step timer)")
        + f", timeout {args.timeout:g} s per run"
    )
    rounds: list[tuple[int, Rendezvous | None]] = [(n, None) for n in counts]
    if args.nnodes > 1:
        per_node = counts[-1]
        rounds.append((per_node * args.nnodes, Rendezvous(args.nnodes, per_node, args.rdzv_endpoint, args.rdzv_id)))
        _say(
            f"then {per_node * args.nnodes} {res.unit} on {args.nnodes} nodes x {per_node} "
            f"(rendezvous {args.rdzv_endpoint}, id {args.rdzv_id}): start the same command on every node"
        )
    mode: str | None = None  # the first run that works decides: step times written, or two runs
    taken: list[float] = []
    try:
        for i, (n, rdzv) in enumerate(rounds):
            row = Row(n, nodes=rdzv.nnodes if rdzv else 1)
            res.rows.append(row)
            label = f"N={n}" + (f" ({rdzv.nnodes} nodes x {rdzv.nproc_per_node})" if rdzv else "")
            for k, steps in enumerate([s2, s1] * args.repeat if placeholder else [None]):
                if k == 1 and mode == "step timer":
                    break  # {steps} takes the larger count, once
                what = f"{steps} steps" if steps is not None else "step timer"
                _say(f"{label}: run {k + 1} of {1 if mode == 'step timer' else runs_per_n} ({what}) ...")
                local = rdzv.nproc_per_node if rdzv else n  # the ranks on this node
                meter = EnergyMeter(energy.reader_of(local)) if energy is not None else None
                with meter or contextlib.nullcontext():
                    window = (args.warmup, NO_SYNC_STEPS) if n > 1 else None
                    r = scaling_run.run(
                        args.python,
                        n,
                        sm.substitute(script, steps) if steps else script,
                        steps,
                        args.timeout,
                        window,
                        replace(rdzv, run_id=f"{rdzv.run_id}-{k}") if rdzv else None,  # a rendezvous per run
                    )
                taken.append(r.seconds)
                row.runs.append({"steps": steps, "seconds": r.seconds, "joules": meter.total() if meter else None})
                row.transport = r.transport or row.transport
                if not r.ok:
                    _failed(row, r, args.timeout, rdzv)
                    break
                if mode is None:
                    mode = "step timer" if r.timed else "two runs" if placeholder else None
                    if mode is None:
                        _say(
                            "no {steps} in the script's arguments and no step times written: put {steps} where the "
                            "script takes its step count, or wrap its loop in gpuledger.steptimer.steps(...)"
                        )
                        return 2
                    res.method = mode
                if mode == "step timer":
                    if not r.timed:
                        row.status, row.error = "failed", "the run wrote no step times (gpuledger.steptimer)"
                        break
                    _from_timer(row, r, args, meter)
            if mode == "two runs" and row.status == "ok":
                _from_two_runs(row, args)
            if row.status == "ok" and row.step_seconds is not None:
                _say(
                    f"{label}: step {row.step_seconds * 1e3:.1f} ms"
                    + _left(taken, len(rounds) - i - 1, 1 if mode == "step timer" else runs_per_n)
                )
    except KeyboardInterrupt:
        _say("interrupted: the run's processes were ended")
        return 130
    res.here = len(gpus) or (os.cpu_count() or 1)
    backend, grads = "nccl" if gpus else "gloo", res.grad_bytes()
    if args.history and grads and args.scaling == "weak":
        res.sweeps = scaling_history.sweeps(Path(args.history), backend, grads, _say)
    print(table(res), flush=True)
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(to_json(res), indent=1))
        except OSError as e:
            _say(f"--json: cannot write {args.json}: {e.strerror or e}")
            return 1
    if args.history and not scaling_history.record(Path(args.history), res, sum(taken), backend, _say):
        return 1
    for row in res.rows:
        if row.status != "ok":
            _say(f"N={row.n}: {row.error}" + (", its last lines:" if row.tail else ""))
            for line in row.tail:
                print(f"  | {line}", file=sys.stderr)
    return 0 if res.ok else 1


def _left(taken: list[float], n_left: int, runs_per_n: int) -> str:
    if not n_left or not taken:
        return ""
    return f"; about {sum(taken) / len(taken) * runs_per_n * n_left:.0f} s left"


def _failed(row: Row, r: scaling_run.Run, timeout: float, rdzv: Rendezvous | None) -> None:
    row.tail = r.tail
    if r.timed_out:
        row.status = "timeout"
        row.error = f"no end within --timeout {timeout:g} s: every process of the run was ended" + (
            f" (on this node; did all {rdzv.nnodes} nodes start the same command with --rdzv-endpoint "
            f"{rdzv.endpoint} and --rdzv-id {rdzv.run_id}?)"
            if rdzv
            else ""
        )
    else:
        row.status = "failed"
        code = f"exit {r.rank_exit} of a rank" if r.rank_exit is not None else f"exit {r.exit_code}"
        row.error = f"the script failed ({code})"


def _from_two_runs(row: Row, args: argparse.Namespace) -> None:
    (a, ta), (b, tb) = median_times(row.runs)
    t = sm.steady_from_two_runs(a, ta, b, tb)
    if t <= 0:
        row.status = "failed"
        row.error = (
            f"the runs with {b} steps took no longer than those with {a} "
            "(start-up varies more than the steps take): use larger --steps or --repeat"
        )
        return
    row.step_seconds = t
    energies = median_joules(row.runs)
    if len(energies) == 2:
        (a, ja), (b, jb) = energies
        row.energy_per_step = (jb - ja) / (b - a) * row.nodes if jb > ja else None  # this node's x nodes
    if args.samples_per_step:
        row.samples_per_step = args.samples_per_step * (row.n if args.scaling == "weak" else 1)


def _from_timer(row: Row, r: scaling_run.Run, args: argparse.Namespace, meter: EnergyMeter | None) -> None:
    times = [[float(x) for x in rank["step_seconds"]] for rank in r.ranks]
    split = [sm.split_no_sync(t, rank.get("no_sync")) for t, rank in zip(times, r.ranks, strict=True)]
    parts = [p for p in split if p is not None]
    if parts and len(parts) == len(split):  # every rank ran the window: the all-reduce time steps did not hide
        row.step_seconds = sm.slowest_median([s for s, _ in parts], 0)
        row.exposed_comm_seconds = max(0.0, row.step_seconds - sm.slowest_median([u for _, u in parts], 0))
        steady_from = sm.steady_start(r.ranks[0].get("no_sync"), args.warmup)
    else:
        row.step_seconds = sm.slowest_median(times, args.warmup)
        steady_from = args.warmup
    window = timer_window(r.ranks[0], steady_from) if meter is not None else None
    if meter is not None and window is not None:
        joules = meter.between(window[0], window[1])
        row.energy_per_step = joules / window[2] * row.nodes if joules is not None else None  # this node's x nodes
    samples = [rank.get("samples_per_step") for rank in r.ranks]  # this node's ranks
    if samples and all(isinstance(s, int | float) and s > 0 for s in samples):
        row.samples_per_step = float(sum(s for s in samples if s is not None)) / len(samples) * row.n
    elif args.samples_per_step:
        row.samples_per_step = args.samples_per_step * (row.n if args.scaling == "weak" else 1)
    grads = [rank.get("grad_bytes") for rank in r.ranks]
    row.grad_bytes = grads[0] if grads and isinstance(grads[0], int) else None
    row.runs[-1]["step_timer_ranks"] = len(r.ranks)
