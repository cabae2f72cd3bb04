"""``gpuledger bench allreduce|train|matmul|memcpy|all`` (torch-free: the work runs in children)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

from daemonkit.argcheck import writable_file
from daemonkit.settings import ConfigError
from exporter.benchmarks import report
from exporter.benchmarks.plan import BENCHES, ONE_RANK, Backend, Plan, default_plan, for_world
from exporter.benchmarks.results import plain
from exporter.benchmarks.runner import BenchRunner, Event, Outcome, Rendezvous

HELP = (  # --help: a one-line description, then examples
    "Run torch.distributed benchmarks once and print nccl-tests-style tables (all-reduce, training, GEMM, copies).",
    "gpuledger bench all --quick",
    "gpuledger bench allreduce --backend gloo --world-size 2 --json allreduce.json",
)


class UsageError(Exception):
    """Bad arguments; the CLI exits 2 with the message."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=[*BENCHES, "all"], help="which benchmark to run")
    p.add_argument("--backend", choices=["nccl", "gloo"], help="default: nccl with NVIDIA GPUs, else gloo on CPU")
    p.add_argument("--world-size", type=int, metavar="N", help="ranks on this node (default: all GPUs; 2 on CPU)")
    p.add_argument("--json", metavar="PATH", help="write the whole result here")
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer steps (a quick look)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S", help="kill the round after S seconds")
    p.add_argument("--nnodes", type=int, default=1, help="nodes taking part (torchrun rendezvous)")
    p.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="rendezvous address (needed with --nnodes > 1)")
    p.add_argument("--rdzv-id", default="gpuledger-bench", help="rendezvous id, the same on every node")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def local_gpus() -> int:
    """NVIDIA GPUs this process may use, from NVML (no torch) and CUDA_VISIBLE_DEVICES."""
    from exporter.readers import ReaderError
    from exporter.readers.nvml import NvmlReader

    r = NvmlReader()
    try:
        r.open()
        count = len(r.devices())
        r.close()
    except ReaderError:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([v for v in visible.split(",") if v.strip() and v.strip() != "-1"]))
    return count


def build_plan(args: argparse.Namespace, gpus: int) -> tuple[Plan, Rendezvous | None]:
    backend: Backend = args.backend or ("nccl" if gpus > 0 else "gloo")
    if backend == "nccl" and gpus == 0:
        raise UsageError("--backend nccl needs NVIDIA GPUs and none were found here; use --backend gloo")
    per_node = args.world_size if args.world_size is not None else (gpus if backend == "nccl" else 2)
    if per_node < 1:
        raise UsageError(f"--world-size must be at least 1 (got {per_node})")
    if backend == "nccl" and per_node > gpus:
        raise UsageError(f"--world-size {per_node}: NCCL needs one GPU per rank and this node has {gpus}")
    if args.nnodes < 1:
        raise UsageError(f"--nnodes must be at least 1 (got {args.nnodes})")
    if args.nnodes > 1 and not args.rdzv_endpoint:
        raise UsageError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (the same on every node)")
    if args.timeout <= 0:
        raise UsageError(f"--timeout must be positive (got {args.timeout})")
    benches = BENCHES if args.what == "all" else (args.what,)
    world = per_node * args.nnodes
    if not for_world(benches, world):
        raise UsageError(ONE_RANK)
    if for_world(benches, world) != benches:
        print(f"gpuledger bench: all-reduce left out: {ONE_RANK}", file=sys.stderr)
    plan = default_plan(for_world(benches, world), backend, world, quick=args.quick)
    rdzv = Rendezvous(args.nnodes, per_node, args.rdzv_endpoint, args.rdzv_id) if args.nnodes > 1 else None
    return plan, rdzv


class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()

    def __call__(self, ev: Event) -> None:
        if not self.enabled:
            return
        kind = ev.get("event")
        if kind == "progress" and self.tty:
            done, total = int(ev["done"]), int(ev["total"])
            bar = "#" * (20 * done // total)
            sys.stderr.write(f"\r  {ev['bench']:<9} [{bar:<20}] {done}/{total}")
            if done == total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif kind == "begin" and not self.tty:
            print(f"  running {ev['bench']} ...", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    try:
        if args.json:  # checked before the run, not found out after it
            writable_file(Path(args.json), "--json")
        plan, rdzv = build_plan(args, local_gpus())
    except (UsageError, ConfigError) as e:
        print(f"gpuledger bench: {e}", file=sys.stderr)
        return 2
    where = f"{plan.world_size} ranks" + (f" on {rdzv.nnodes} nodes" if rdzv else "")
    print(
        f"gpuledger bench: {'+'.join(plan.benches)} on {where} ({plan.backend}, {plan.device}); "
        f"estimated {plan.estimate_seconds():.0f} s, timeout {args.timeout:.0f} s",
        file=sys.stderr,
    )
    outcome = BenchRunner().run(plan, args.timeout, Progress(not args.no_progress), rdzv)
    if outcome.reported_elsewhere:
        print("# this node's ranks finished; the node running global rank 0 prints the results")
        return 0
    print(report.round_tables(outcome.result, outcome.status))
    print(f"# took {outcome.duration:.1f} s")
    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(outcome_dict(outcome), f, indent=1)
        except OSError as e:
            print(f"gpuledger bench: --json: cannot write {args.json}: {e.strerror or e}", file=sys.stderr)
            return 1
    if not outcome.ok and outcome.stderr_tail:
        print(outcome.stderr_tail, file=sys.stderr)
    return 0 if outcome.ok else 1


def outcome_dict(o: Outcome) -> dict[str, Any]:
    r = o.result
    return {
        "plan": dataclasses.asdict(o.plan),
        "status": o.status,
        "started": o.started,
        "duration_seconds": o.duration,
        "device": r.device,
        "allreduce": plain(r.allreduce),
        "train": plain(r.train),
        "matmul": plain(r.matmul) if r.matmul else None,
        "memcpy": plain(r.memcpy) if r.memcpy else None,
        "errors": r.errors,
    }
