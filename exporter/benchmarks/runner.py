"""Run a benchmark round in a child process with a hard timeout (torch-free).

The child is ``exporter.benchmarks.reaper`` in a session of its own; it runs the launcher (one
node) or torchrun (several) and, being a subreaper, keeps every process the round starts in its
tree, whatever session torchrun puts the workers in (why: the reaper's docstring). At the timeout
(and on ``cancel``) the reaper gets SIGTERM and ends the whole tree: SIGTERM, ``grace`` seconds,
then SIGKILL until none is left; it records the pids it ended and any that outlived it
(``Outcome.leftover``). Only if the reaper itself does not exit is its process group SIGKILLed.
Rank 0's ``@gpuledger`` events arrive on stdout and become a ``RoundResult``; each planned
benchmark ends as ok, failed or timeout.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.benchmarks.plan import EVENT_PREFIX, Plan
from exporter.benchmarks.reaper import KILL_WINDOW
from exporter.benchmarks.results import PARSERS, AllreduceResult, RoundResult

log = logging.getLogger(__name__)

Event = dict[str, Any]


@dataclass(frozen=True)
class Rendezvous:
    """Multi-node: torchrun's c10d rendezvous (every node runs the same command)."""

    nnodes: int
    nproc_per_node: int
    endpoint: str
    run_id: str = "gpuledger-bench"

    def torchrun_args(self) -> list[str]:
        """torchrun's flags for this node's share of the run (before the script)."""
        return [
            f"--nnodes={self.nnodes}",
            f"--nproc-per-node={self.nproc_per_node}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={self.endpoint}",
            f"--rdzv-id={self.run_id}",
        ]


@dataclass
class Outcome:
    plan: Plan
    result: RoundResult
    status: dict[str, str] = field(default_factory=dict)  # bench -> ok | failed | timeout
    durations: dict[str, float] = field(default_factory=dict)  # bench -> seconds from begin to end
    started: float = 0.0  # wall clock
    duration: float = 0.0
    exit_code: int | None = None
    stderr_tail: str = ""
    reported_elsewhere: bool = False  # multi-node: global rank 0 runs on another node
    ended: list[int] = field(default_factory=list)  # pids the reaper had to end (none after a clean exit)
    leftover: list[int] = field(default_factory=list)  # pids that outlived SIGKILL (the reaper says so)

    @property
    def ok(self) -> bool:
        return all(s == "ok" for s in self.status.values())


class BenchRunner:
    def __init__(self, *, grace: float = 5.0, python: str = sys.executable) -> None:
        self.grace = grace
        self.python = python
        self.children_started = 0
        self.last_pgid: int | None = None  # the process group of the latest round (the reaper's pid)
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def command(self, plan_path: Path, rdzv: Rendezvous | None) -> list[str]:
        if rdzv is None:
            return [self.python, "-m", "exporter.benchmarks.launch", "--plan", str(plan_path)]
        return [
            self.python,
            "-m",
            "torch.distributed.run",
            *rdzv.torchrun_args(),
            "-m",
            "exporter.benchmarks.worker",
            "--plan",
            str(plan_path),
        ]

    def wrapped(self, command: list[str], record: Path) -> list[str]:
        """``command`` under the reaper, which ends every process it starts."""
        reaper = [self.python, "-m", "exporter.benchmarks.reaper", f"--grace={self.grace}"]
        return [*reaper, f"--record={record}", f"--parent={os.getpid()}", "--", *command]

    def run(
        self,
        plan: Plan,
        timeout: float,
        on_event: Callable[[Event], None] | None = None,
        rdzv: Rendezvous | None = None,
    ) -> Outcome:
        out = Outcome(plan=plan, result=RoundResult(plan.backend, plan.world_size), started=time.time())
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="gpuledger-bench-") as tmp:
            plan_path = Path(tmp) / "plan.json"
            plan.save(plan_path)
            with open(Path(tmp) / "stderr", "w+") as err:
                proc = subprocess.Popen(
                    self.wrapped(self.command(plan_path, rdzv), Path(tmp) / "reaped.json"),
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                    start_new_session=True,
                    cwd=tmp,
                )
                with self._lock:
                    self._proc = proc
                    self.children_started += 1
                    self.last_pgid = proc.pid
                begun: dict[str, float] = {}
                reader = threading.Thread(target=self._read, args=(proc, out, begun, on_event), daemon=True)
                reader.start()
                timed_out = False
                try:
                    out.exit_code = proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    timed_out = True
                    log.error("benchmark round exceeded %.0f s: ending all its processes", timeout)
                    self._stop(proc)
                    out.exit_code = proc.returncode
                with self._lock:
                    self._proc = None
                reader.join(timeout=5.0)
                if reader.is_alive():  # a survivor holds the pipe; closing it would wait on the reader
                    log.error("benchmark output still open after the round: a process survived it")
                elif proc.stdout is not None:
                    proc.stdout.close()
                for bench, t in begun.items():  # a benchmark cut short ran until now
                    out.durations.setdefault(bench, time.monotonic() - t)
                err.seek(0)
                out.stderr_tail = err.read()[-4000:]
            out.ended, out.leftover = _reaped(Path(tmp) / "reaped.json")
        out.duration = time.monotonic() - t0
        if rdzv is not None and not out.result.device and out.exit_code == 0:
            out.reported_elsewhere = True
            out.status = dict.fromkeys(plan.benches, "ok")
        else:
            out.status = _statuses(plan, out, timed_out)
        return out

    def cancel(self) -> None:
        """Kill a running round (daemon shutdown)."""
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            self._stop(proc)

    def _stop(self, proc: subprocess.Popen[str]) -> None:
        """SIGTERM the reaper, which ends the round's processes (its grace period, then SIGKILL);
        SIGKILL its group only if it does not exit itself."""
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=self.grace + KILL_WINDOW + 10.0)
        except subprocess.TimeoutExpired:
            log.error("the benchmark reaper did not exit: killing its process group")
            kill_group(proc, 0.0)

    @staticmethod
    def _read(
        proc: subprocess.Popen[str], out: Outcome, begun: dict[str, float], on_event: Callable[[Event], None] | None
    ) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith(EVENT_PREFIX):
                continue
            try:
                ev: Event = json.loads(line[len(EVENT_PREFIX) :])
            except json.JSONDecodeError:
                continue
            kind, bench = ev.get("event"), ev.get("bench", "")
            if kind == "start":
                out.result.device = str(ev.get("device", ""))
            elif kind == "begin":
                begun[bench] = time.monotonic()
            elif kind == "error":
                out.result.errors[bench] = str(ev.get("message", ""))
            elif kind == "result" and bench in PARSERS:
                try:
                    setattr(out.result, bench, PARSERS[bench](json.dumps(ev["data"])))
                except ValueError as e:  # a result that does not fit its type: named, never a value
                    out.result.errors[bench] = str(e)
            if kind in ("error", "result") and bench in begun:
                out.durations[bench] = time.monotonic() - begun[bench]
            if on_event is not None:
                on_event(ev)


def _statuses(plan: Plan, out: Outcome, timed_out: bool) -> dict[str, str]:
    """ok: a result and nothing wrong; failed: an error, wrong elements, or no result from a
    round that ended badly; timeout: no result from a round that was killed."""
    status = {}
    for bench in plan.benches:
        result = getattr(out.result, bench)
        if bench in out.result.errors:
            status[bench] = "failed"
        elif result is not None:
            bad = isinstance(result, AllreduceResult) and result.wrong > 0
            status[bench] = "failed" if bad else "ok"
        else:
            status[bench] = "timeout" if timed_out else "failed"
    return status


def _reaped(record: Path) -> tuple[list[int], list[int]]:
    """The reaper's record: (pids ended, pids left); nothing when it wrote none."""
    try:
        doc = json.loads(record.read_text())
        ended, left = [int(p) for p in doc["ended"]], [int(p) for p in doc["left"]]
    except (OSError, ValueError, KeyError, TypeError):
        return [], []
    if left:
        log.error("benchmark processes outlived SIGKILL: %s", left)
    return ended, left


def kill_group(proc: subprocess.Popen[str], grace: float) -> None:
    """SIGTERM the child's whole process group, then SIGKILL whatever is left after ``grace``."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        end = time.monotonic() + wait
        while time.monotonic() < end and group_alive(pgid):
            time.sleep(0.05)
        if not group_alive(pgid):
            break
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5.0)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a group of zombies still answers; count only members that are not zombies
    return any(_member_alive(pid, pgid) for pid in _pids())


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _member_alive(pid: int, pgid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return False
    return int(fields[2]) == pgid and fields[0] != "Z"
