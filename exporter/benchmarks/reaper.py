"""Run a benchmark round's command and end every process it started: ``python -m
exporter.benchmarks.reaper --grace S --record PATH -- CMD ...``. Torch-free, Linux.

Why a subreaper. On several nodes the round runs under torchrun, which starts each worker in a
session (and process group) of its own, so killing the runner's process group leaves the workers
behind: a rank that ignores SIGTERM, or one stuck in a collective while torchrun is SIGKILLed
before it could forward the signal, holds its GPU memory until someone reboots. The choices were:

- pid files written by the workers: a worker that hangs before writing, or dies in its import, is
  never listed, and a grandchild (a data loader, a compiler) is never listed at all;
- ``PR_SET_PDEATHSIG`` in the workers: it fires when the parent *thread* ends, only for direct
  children, and only after torchrun itself is dead (which needs another mechanism anyway);
- the project's launcher with its own rendezvous: it would re-implement torchrun's c10d node
  ranks (or need a ``--node-rank`` the Slurm and Kubernetes recipes do not pass);
- ``PR_SET_CHILD_SUBREAPER`` (chosen): this process marks itself a subreaper, so every process
  below it, whatever session or group it moved to and however its parent died, stays in its tree
  (an orphan is reparented here, not to init). Ending the round means walking that tree in
  ``/proc``: SIGTERM to every process, ``grace`` seconds, then SIGKILL until the tree is empty
  (SIGKILL cannot be ignored or caught, and reaches a rank blocked in a collective). Processes
  are signalled through a pidfd opened after matching pid and start time, so a pid reused by an
  unrelated process is never hit. It is not in the daemon's own process (a subreaper must reap
  every orphan, and the daemon has other children), and it sets ``PR_SET_PDEATHSIG`` on itself,
  so a daemon that dies, even by SIGKILL, still gets its round ended.

The command's stdout and stderr are this process's. On SIGTERM, SIGINT or SIGHUP, and when the
command exits, the tree is ended; ``--record`` then gets JSON: the pids ended and any left (a
process in uninterruptible sleep can outlive the SIGKILL window). The exit status is the
command's (128 + N for a signal N), or the signal that stopped this process.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
KILL_WINDOW = 5.0  # seconds of SIGKILL rounds after the grace period
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time in clock ticks) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return int(fields[1]), fields[0], int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """Every live (non-zombie) process below ``root``: pid -> start time."""
    children: dict[int, list[tuple[int, int]]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _stat(int(name))) is not None and st[1] != "Z":
            children.setdefault(st[0], []).append((int(name), st[2]))
    out: dict[int, int] = {}
    todo = [root]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            if pid not in out:
                out[pid] = start
                todo.append(pid)
    return out


def _signal(pid: int, start: int, sig: signal.Signals) -> None:
    """Signal ``pid`` only if it is still the process that started at ``start``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:  # no pidfds (a kernel before 5.3): check, then signal by pid
        st = _stat(pid)
        if st is not None and st[2] == start:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return
    try:
        st = _stat(pid)
        if st is not None and st[2] == start:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, sig)
    finally:
        os.close(fd)


def _reap(child: int, status: dict[int, int]) -> None:
    """Collect every exited child (orphans land here); remember the command's wait status."""
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid == child:
            status[child] = st


def end_tree(root: int, child: int, status: dict[int, int], grace: float) -> tuple[list[int], list[int]]:
    """SIGTERM everything below ``root``, SIGKILL what is left after ``grace`` (again and again,
    for whatever appears meanwhile) until nothing is. Returns (pids ended, pids left)."""
    ended: set[int] = set()
    live = descendants(root)
    ended.update(live)
    for pid, start in live.items():
        _signal(pid, start, signal.SIGTERM)
    for sig, window in ((None, grace), (signal.SIGKILL, KILL_WINDOW)):
        end = time.monotonic() + window
        while True:
            _reap(child, status)
            live = descendants(root)
            ended.update(live)
            if not live or time.monotonic() >= end:
                break
            if sig is not None:
                for pid, start in live.items():
                    _signal(pid, start, sig)
            time.sleep(0.05)
        if not live:
            break
    _reap(child, status)
    return sorted(ended), sorted(live)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m exporter.benchmarks.reaper")
    ap.add_argument("--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL")
    ap.add_argument("--record", type=Path, help="write the pids ended and left here (JSON)")
    ap.add_argument("--parent", type=int, help="the pid that started this one (checked after PDEATHSIG)")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("a command to run is needed after --")
    stop: list[int] = []

    def on_stop(signum: int, frame: FrameType | None) -> None:
        stop.append(signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, on_stop)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if args.parent is not None and os.getppid() != args.parent:
        return 128 + signal.SIGTERM  # the parent died before PDEATHSIG was set: start nothing
    if stop:
        return 128 + stop[0]
    me = os.getpid()
    status: dict[int, int] = {}
    proc = subprocess.Popen(cmd)  # waited for below with os.waitpid, as every orphan is
    child = proc.pid
    while not stop and child not in status:
        _reap(child, status)
        time.sleep(0.05)
    ended, left = end_tree(me, child, status, args.grace)
    if child in status:
        proc.returncode = os.waitstatus_to_exitcode(status[child])
    if left:
        print(f"reaper: {len(left)} processes outlived SIGKILL: {left}", file=sys.stderr, flush=True)
    if args.record is not None:
        args.record.write_text(json.dumps({"ended": ended, "left": left}))
    if stop:
        signal.signal(stop[0], signal.SIG_DFL)
        os.kill(me, stop[0])
        return 128 + stop[0]
    st = status.get(child)
    if st is None:
        return 1
    return os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st)


if __name__ == "__main__":
    sys.exit(main())
