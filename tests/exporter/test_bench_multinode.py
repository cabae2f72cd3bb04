"""Rounds across nodes: two "nodes" on loopback (two runners, --nnodes 2, torchrun's c10d
rendezvous, gloo on CPU), and the reaper that ends every process a round started, wherever
torchrun put it. Every process a test starts carries a marker in its environment; the test finds
them by scanning /proc, so "none remain" is checked by pid, not guessed."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from exporter.benchmarks.plan import default_plan
from exporter.benchmarks.runner import BenchRunner, Outcome, Rendezvous
from exporter.benchmarks.worker import TEST_HANG_RANK
from tests.support.http import lasting_port
from tests.support.tools import require_torch
from tests.support.wait import wait_until

MARK = "GPULEDGER_BENCH_TEST_MARK"
Proc = tuple[int, int]  # pid, start time (a pid alone can be reused)


def _stat(pid: int) -> tuple[str, int] | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[0], int(fields[19])


def _alive(proc: Proc) -> bool:
    st = _stat(proc[0])
    return st is not None and st[0] != "Z" and st[1] == proc[1]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _module(cmd: str) -> str:
    args = cmd.split()
    i = next((i for i, a in enumerate(args) if a == "-m"), None)
    return args[i + 1] if i is not None and i + 1 < len(args) else ""


class Marked:
    """The processes whose environment carries this test's marker."""

    def __init__(self, mark: str) -> None:
        self.entry = f"{MARK}={mark}".encode()
        self.seen: dict[Proc, str] = {}  # every one found so far -> its latest command line

    def scan(self) -> set[Proc]:
        now = set()
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                env = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            st = _stat(int(name))
            if self.entry in env and st is not None and st[0] != "Z":
                proc = (int(name), st[1])
                now.add(proc)
                # the latest command line: a process caught between fork and exec shows its parent's
                self.seen[proc] = _cmdline(proc[0]) or self.seen.get(proc, "")
        return now

    def watch(self, futures: list[Future[Outcome]], timeout: float) -> list[Outcome]:
        """Collect pids while the rounds run; their outcomes (each within ``timeout``)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and not all(f.done() for f in futures):
            self.scan()
            time.sleep(0.1)
        return [f.result(timeout=max(0.0, end - time.monotonic())) for f in futures]

    def running(self, module: str) -> list[Proc]:
        """The processes seen that ran ``python [-u] -m module`` (not those that only passed it on)."""
        return [p for p, cmd in self.seen.items() if _module(cmd) == module]

    def none_left(self) -> bool:
        """Polled with a deadline: no process seen is alive, and none carries the marker."""
        return wait_until(lambda: not any(_alive(p) for p in self.seen) and not self.scan(), timeout=15.0)


@pytest.fixture
def marked(monkeypatch: pytest.MonkeyPatch) -> Iterator[Marked]:
    m = Marked(uuid.uuid4().hex)
    monkeypatch.setenv(MARK, m.entry.decode().partition("=")[2])
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    yield m
    for pid, start in m.scan() | {p for p in m.seen if _alive(p)}:  # a failed test leaves nothing behind
        if _alive((pid, start)):
            os.kill(pid, signal.SIGKILL)


def _two_nodes(runner: BenchRunner, timeout: float, marked: Marked) -> list[Outcome]:
    require_torch()
    plan = default_plan(("allreduce",), "gloo", 2, quick=True)
    rdzv = Rendezvous(nnodes=2, nproc_per_node=1, endpoint=f"127.0.0.1:{lasting_port()}", run_id=uuid.uuid4().hex)
    with ThreadPoolExecutor(2) as pool:  # two nodes: the same command twice, as srun would run it
        futures = [pool.submit(runner.run, plan, timeout, None, rdzv) for _ in range(2)]
        return marked.watch(futures, timeout + 60)


@pytest.mark.integration
def test_two_nodes_on_loopback_meet_and_report_once(marked: Marked) -> None:
    a, b = _two_nodes(BenchRunner(), 240, marked)
    assert a.status == b.status == {"allreduce": "ok"}, (a.stderr_tail, b.stderr_tail)
    [here] = [o for o in (a, b) if not o.reported_elsewhere]  # the node with global rank 0
    ar = here.result.allreduce
    assert ar is not None and ar.world_size == 2 and ar.wrong == 0 and ar.rows
    assert len(marked.running("exporter.benchmarks.worker")) == 2  # one rank per node
    assert len(marked.running("torch.distributed.run")) == 2
    assert a.ended == b.ended == [] and a.leftover == b.leftover == []  # everything exited by itself
    assert marked.none_left()


@pytest.mark.integration
def test_a_hung_rank_that_ignores_sigterm_is_ended_with_every_process_of_the_round(
    marked: Marked, monkeypatch: pytest.MonkeyPatch
) -> None:
    # global rank 1 ignores SIGTERM and never reaches the first collective; rank 0 waits in it.
    # torchrun gives each in a session of its own, so killing a process group misses them
    monkeypatch.setenv(TEST_HANG_RANK, "1")
    timeout = 25.0  # enough for torchrun, the rendezvous and both workers' torch import here
    a, b = _two_nodes(BenchRunner(grace=1.0), timeout, marked)
    assert a.status == b.status == {"allreduce": "timeout"}, (a.stderr_tail, b.stderr_tail)
    assert a.duration >= timeout and b.duration >= timeout
    workers = marked.running("exporter.benchmarks.worker")
    assert len(workers) == 2, f"the workers did not start within {timeout} s: {marked.seen}"
    agents = marked.running("torch.distributed.run")
    assert {pid for pid, _ in workers + agents} <= set(a.ended + b.ended)
    assert a.leftover == b.leftover == []
    assert marked.none_left(), [cmd for p, cmd in marked.seen.items() if _alive(p)]


ESCAPES = textwrap.dedent(
    """
    import os, signal, sys, time
    r, w = os.pipe()
    if os.fork() == 0:  # a grandchild that leaves the session and ignores SIGTERM
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        start = open("/proc/self/stat").read().rpartition(")")[2].split()[19]
        open(sys.argv[1], "w").write(f"{os.getpid()} {start}")
        os.write(w, b"x")
        time.sleep(10**6)
    os.read(r, 1)
    sys.exit(0)  # its parent is gone: it is an orphan now
    """
)


def test_the_reaper_ends_an_orphan_that_left_the_session_and_ignores_sigterm(marked: Marked, tmp_path: Path) -> None:
    said = tmp_path / "orphan"

    class Escapes(BenchRunner):  # no torch: the command leaves an orphan behind and exits 0
        def command(self, plan_path: Path, rdzv: Rendezvous | None) -> list[str]:
            return [sys.executable, "-c", ESCAPES, str(said)]

    out = Escapes(grace=0.5).run(default_plan(("allreduce",), "gloo", 1), 60)
    assert out.status == {"allreduce": "failed"} and out.exit_code == 0  # no result, but no timeout
    pid, start = (int(x) for x in said.read_text().split())
    assert out.ended == [pid] and out.leftover == []  # the reaper found it and had to end it
    marked.seen[(pid, start)] = "the orphan"
    assert marked.none_left()
