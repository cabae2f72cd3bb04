"""One run of the user's script under torchrun, for ``gpuledger scaling`` (torch-free: torch runs
in the children only).

The run is ``python -m torch.distributed.run --standalone --nproc-per-node N SCRIPT ARGS`` (across
nodes: ``--nnodes M --rdzv-backend c10d --rdzv-endpoint ...``, N / M ranks here) under
``exporter.benchmarks.reaper`` in a session of its own, as a benchmark round is: torchrun puts
each worker in a session of its own, and the reaper, a subreaper, keeps them all in its tree. At
the timeout the reaper gets SIGTERM and ends every process of the run (SIGTERM, a grace period,
then SIGKILL until none is left); only if the reaper itself does not exit is its group SIGKILLed.

The script's environment is ours plus what torchrun sets, plus ``GPULEDGER_SCALING_N`` (the
world size), ``GPULEDGER_SCALING_STEPS`` (the step count substituted, if any) and
``GPULEDGER_SCALING_STEP_DIR`` (where ``gpuledger.steptimer`` writes each rank's step times), and
``NCCL_DEBUG=INFO`` with ``NCCL_DEBUG_SUBSYS=INIT,GRAPH`` unless the user set ``NCCL_DEBUG``
(NCCL's own account of the transport it chose: ``gpuledger.nccl_log``).
Its stdout and stderr go to a log; the last lines are kept for the message when it fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.benchmarks.reaper import KILL_WINDOW
from exporter.benchmarks.runner import Rendezvous, kill_group
from gpuledger import nccl_log
from gpuledger.steptimer import NO_SYNC_ENV, STEP_DIR_ENV

GRACE = 5.0  # seconds between SIGTERM and SIGKILL at the timeout
TAIL_LINES = 8


@dataclass
class Run:
    n: int
    steps: int | None  # the count substituted for {steps}; None without the placeholder
    seconds: float = 0.0  # wall time of the whole run, start-up included
    exit_code: int | None = None
    timed_out: bool = False
    tail: list[str] = field(default_factory=list)  # the last lines the script wrote
    rank_exit: int | None = None  # the exit code of the rank that failed first (torchrun's summary)
    ranks: list[dict[str, Any]] = field(default_factory=list)  # the step timer's files, by rank
    transport: str | None = None  # how NCCL moved the data, from its log (gpuledger.nccl_log); None: not said

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def timed(self) -> bool:
        """The step timer wrote step times."""
        return any(r.get("step_seconds") for r in self.ranks)


def torchrun_command(python: str, n: int, script: list[str], rdzv: Rendezvous | None = None) -> list[str]:
    """``script`` is a path and its arguments, or ``-m module`` and its arguments; ``n`` ranks on
    this node alone, or ``rdzv``'s nodes x ranks per node."""
    where = rdzv.torchrun_args() if rdzv is not None else ["--standalone", f"--nproc-per-node={n}"]
    head = [python, "-m", "torch.distributed.run", *where]
    if script[:1] == ["-m"]:
        return [*head, "-m", *script[1:]]
    return [*head, *script]


def run(
    python: str,
    n: int,
    script: list[str],
    steps: int | None,
    timeout: float,
    no_sync: tuple[int, int] | None = None,
    rdzv: Rendezvous | None = None,
) -> Run:
    """One run at ``n`` ranks in all; ``no_sync``: (first step, steps) the step timer runs without
    the all-reduce where the script gave it a way to (``gpuledger.steptimer``); ``rdzv``: across
    nodes (this node runs its share; its step files are its own ranks')."""
    out = Run(n, steps)
    with tempfile.TemporaryDirectory(prefix="gpuledger-scaling-") as tmp:
        step_dir = Path(tmp) / "steps"
        step_dir.mkdir()
        env = nccl_log.env_for(dict(os.environ))
        env.update(GPULEDGER_SCALING_N=str(n), **{STEP_DIR_ENV: str(step_dir)})
        if steps is not None:
            env["GPULEDGER_SCALING_STEPS"] = str(steps)
        if no_sync is not None:
            env[NO_SYNC_ENV] = f"{no_sync[0]},{no_sync[1]}"
        reaper = [python, "-m", "exporter.benchmarks.reaper", f"--grace={GRACE}", f"--parent={os.getpid()}", "--"]
        log_path = Path(tmp) / "log"
        with open(log_path, "w") as log:
            t0 = time.monotonic()
            proc = subprocess.Popen(
                [*reaper, *torchrun_command(python, n, script, rdzv)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                text=True,
            )
            try:
                out.exit_code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                out.timed_out = True
                _stop(proc)
                out.exit_code = proc.returncode
            except BaseException:  # Ctrl-C: end the run's processes before leaving
                _stop(proc)
                raise
            out.seconds = time.monotonic() - t0
        out.tail, out.rank_exit = _tail(log_path)
        with contextlib.suppress(OSError), log_path.open(errors="replace") as f:
            out.transport = nccl_log.transport(f)
        out.ranks = _step_files(step_dir)
    return out


def _stop(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=GRACE + KILL_WINDOW + 10.0)
    except subprocess.TimeoutExpired:
        kill_group(proc, 0.0)


TORCHRUN_LOG = re.compile(r"^[EWI]\d{4} [\d:.]+ \d+ \S*torch/distributed/elastic/")
ROOT_EXIT = re.compile(r"Root Cause.*?exitcode\s*:\s*(-?\d+)", re.S)


def _tail(path: Path) -> tuple[list[str], int | None]:
    """The last lines the script wrote, without torchrun's banners and its own failure report (a
    log line from torch.distributed.elastic, then its traceback and summary); and the exit code
    of the rank that failed first, from that summary."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return [], None
    lines = text.splitlines()
    cut = next((i for i, line in enumerate(lines) if TORCHRUN_LOG.match(line)), None)
    if cut is None:
        failed = next((i for i, line in enumerate(lines) if "ChildFailedError" in line), None)
        if failed is not None:
            cut = max((i for i in range(failed) if lines[i].startswith("Traceback")), default=failed)
    kept = [line for line in lines[:cut] if line.strip() and not set(line.strip()) <= {"*"}]
    kept = [line for line in kept if not line.startswith("Setting OMP_NUM_THREADS environment variable")]
    kept = [line for line in kept if "NCCL INFO" not in line]  # what the run asked NCCL for, not the script
    root = ROOT_EXIT.search(text)
    return kept[-TAIL_LINES:], int(root[1]) if root else None


def _step_files(folder: Path) -> list[dict[str, Any]]:
    ranks = []
    for p in sorted(folder.glob("rank-*.json")):
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("step_seconds"), list):
            ranks.append(doc)
    return sorted(ranks, key=lambda d: int(d.get("rank", 0)))
