"""Attacks on the history file: real exporters (replay reader) in child processes on loopback, one
per damaged or unusable file, all at once; the report on a damaged file; damage while running and a
full disk on an in-process writer (a real thread and file; its clock is advanced an hour, and
``PRAGMA max_page_count`` stands in for a full disk, so no root or tmpfs is needed).

    python -m bench.attacks.history
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.attacks import Row  # noqa: E402
from exporter import history  # noqa: E402
from exporter.readers import DeviceInfo  # noqa: E402
from exporter.snapshot import ROLLUP_FIELDS, MinuteRow  # noqa: E402

HOST = "127.0.0.1"
START_TIMEOUT = 20.0  # seconds for an exporter to answer /healthz
DEVS = [DeviceInfo(i, f"GPU-{i}", "NVIDIA H200", f"0000:{i:02x}:00.0") for i in range(8)]


def _rows(first: int, minutes: int) -> list[MinuteRow]:
    return [
        MinuteRow(first + 60 * m, d, {f: 30.0 for f in ROLLUP_FIELDS} | {"sampled_seconds": 60.0})
        for m in range(minutes)
        for d in DEVS
    ]


def _make(path: Path, minutes: int = 1440) -> None:
    """A day of 8 GPUs (11,520 minute rows), checkpointed into the main file."""
    now = int(time.time()) // 60 * 60
    db = history.connect(path)
    with history.transaction(db):
        history.insert_minutes(db, _rows(now - 60 * minutes, minutes), "node")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def _overwrite(path: Path, offset: int, n: int) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(random.Random(offset).randbytes(n))


def _page_size(path: Path) -> None:
    with path.open("r+b") as f:
        f.seek(16)
        f.write(b"\x00\x07")  # page size 7: not a power of two


def _write_text(path: Path, text: str) -> None:
    path.write_text(text)


def _newer(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()


@dataclass(frozen=True)
class Case:
    attack: str
    damage: Callable[[Path], None]  # applied to a copy of a healthy history (or to nothing)
    healthy_copy: bool  # start from a copy of the healthy file
    moved: bool  # a safe exporter moves it aside (damaged SQLite) or leaves it (anything else)
    up: int  # gpuledger_history_up a safe exporter reports after start


CASES = (
    Case("random bytes mid-file", lambda p: _overwrite(p, p.stat().st_size // 2, 4096), True, True, 1),
    Case("header magic overwritten", lambda p: _overwrite(p, 0, 16), True, True, 1),
    Case("header page size", _page_size, True, True, 1),
    Case("truncated to half", lambda p: os.truncate(p, p.stat().st_size // 2), True, True, 1),
    Case("path is a directory", lambda p: p.mkdir(), False, False, 0),
    Case("a text file", lambda p: _write_text(p, "not a database\n" * 100), False, False, 0),
    Case("a zero-length file", lambda p: p.touch(), False, False, 1),
    Case("newer schema (v99)", _newer, True, False, 0),
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _gpuledger() -> list[str]:
    exe = ROOT / ".venv" / "bin" / "gpuledger"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "gpuledger"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode(errors="replace")
    except OSError:
        return 0, ""


@dataclass
class Started:
    case: Case
    path: Path
    port: int
    proc: subprocess.Popen[bytes]
    log: Path


@contextlib.contextmanager
def _exporters(work: Path, healthy: Path) -> Iterator[list[Started]]:
    started = []
    try:
        for i, case in enumerate(CASES):
            folder = work / f"case{i}"
            folder.mkdir()
            path = folder / "history.db"
            if case.healthy_copy:
                shutil.copy(healthy, path)
            case.damage(path)
            port, log = _free_port(), folder / "exporter.log"
            with log.open("wb") as out:
                cmd = [*_gpuledger(), "exporter", "--reader", "replay", "--history", str(path)]
                proc = subprocess.Popen(
                    [*cmd, "--listen", f"{HOST}:{port}"], stdout=out, stderr=subprocess.STDOUT, env=_env(), cwd=ROOT
                )
            started.append(Started(case, path, port, proc, log))
        yield started
    finally:
        for s in started:
            if s.proc.poll() is None:
                s.proc.send_signal(signal.SIGTERM)
        for s in started:
            try:
                s.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                s.proc.kill()
                s.proc.wait()


def _gauge(text: str, name: str) -> str:
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return "absent" if m is None else str(int(float(m.group(1))))


def _observe(s: Started, deadline: float) -> Row:
    url = f"http://{HOST}:{s.port}"
    status, text = 0, ""
    while time.monotonic() < deadline and s.proc.poll() is None:
        if _get(url + "/healthz")[0] == 200:
            status, text = _get(url + "/metrics")
            break
        time.sleep(0.2)
    log = s.log.read_text(errors="replace")
    errors = [line for line in log.splitlines() if " ERROR " in line]
    aside = sorted(p.name for p in s.path.parent.glob("history.db.damaged-*"))
    gpu = status == 200 and "gpuledger_gpu_utilization_ratio{" in text
    up = _gauge(text, "gpuledger_history_up")
    damaged = _gauge(text, "gpuledger_history_damaged_files")
    exited = s.proc.poll()
    observed = (
        (f"exited {exited}; " if exited is not None else "")
        + f"GPU metrics {'served' if gpu else 'MISSING'}, history_up {up}, damaged_files {damaged}, "
        + (f"moved to {aside[0]}" if aside else "not moved")
        + f"; {len(errors)} error line(s)"
        + ("; TRACEBACK" if "Traceback" in log else "")
        + (f": {errors[0].split(': ', 1)[-1][:150]}" if errors else "")
    )
    expected = (
        f"GPU metrics served, history_up {s.case.up}, "
        + ("moved aside, a new history started" if s.case.moved else "file left as it is")
        + (", one error line" if s.case.up == 0 or s.case.moved else ", no error")
    )
    ok = (
        exited is None
        and gpu
        and up == str(s.case.up)
        and bool(aside) == s.case.moved
        and damaged == ("1" if s.case.moved else "0")
        and len(errors) == (1 if s.case.up == 0 or s.case.moved else 0)
        and "Traceback" not in log
    )
    return Row("history", f"exporter on {s.case.attack}", expected, observed, ok)


def _report(work: Path, healthy: Path) -> Row:
    path = work / "report" / "history.db"
    path.parent.mkdir()
    shutil.copy(healthy, path)
    _overwrite(path, path.stat().st_size // 2, 4096)
    cmd = [*_gpuledger(), "report", "--source", "embedded", "--history", str(path), "--out", str(work / "out")]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=_env(), cwd=ROOT)
        first = (p.stdout + p.stderr).strip().splitlines()[:1]
        rc: int | str = p.returncode
    except subprocess.TimeoutExpired:
        first, rc = ["(no answer in 30 s)"], "timeout"
    line = first[0] if first else ""
    ok = rc == 1 and str(path) in line and "damaged" in line and "Traceback" not in line
    return Row("history", "report on a damaged file", "exit 1 naming the file as damaged", f"exit {rc}: {line}", ok)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def _captured() -> Iterator[_Lines]:
    h, logger = _Lines(), logging.getLogger("exporter.history")
    logger.addHandler(h)
    try:
        yield h
    finally:
        logger.removeHandler(h)


def _while_running(work: Path, healthy: Path) -> Row:
    path = work / "running" / "history.db"
    path.parent.mkdir()
    shutil.copy(healthy, path)
    now = [time.time()]
    w = history.HistoryWriter(path, hostname="node", clock=lambda: now[0])
    w.start()
    with _captured() as h:
        w.submit(_rows(int(now[0]) // 60 * 60, 1))
        for k in range(8):  # bytes on eight pages while it runs
            _overwrite(path, 4096 * (1 + k * 3), 64)
        now[0] += 3600.0  # the hourly check is due
        w.submit(_rows(int(now[0]) // 60 * 60, 1))
        w.stop()
    aside = sorted(p.name for p in path.parent.glob("history.db.damaged-*"))
    new_rows = history.connect(path, readonly=True).execute("SELECT count(*) FROM gpu_minutes").fetchone()[0]
    ok = len(aside) == 1 and len(h.lines) == 1 and "damaged" in h.lines[0] and new_rows > 0
    observed = f"{len(h.lines)} error line(s); moved: {aside}; new history holds {new_rows} rows"
    return Row(
        "history",
        "bytes written while running (in-process writer)",
        "found at the next hourly quick_check, moved aside, new history",
        observed,
        ok,
    )


def _full_disk(work: Path) -> Row:
    path = work / "full" / "history.db"
    path.parent.mkdir()
    _make(path, 10)
    w = history.HistoryWriter(path, hostname="node")
    assert w._db is not None
    pages = w._db.execute("PRAGMA page_count").fetchone()[0]
    w._db.execute(f"PRAGMA max_page_count = {pages}")  # the file may not grow: SQLITE_FULL
    t = int(time.time()) // 60 * 60
    with _captured() as h:
        for k in range(3):
            w.submit(_rows(t + 3600 * k, 60))
            w._drain()
            w._write()
        down = not w.stats().up
        w._db.execute("PRAGMA max_page_count = 1073741823")  # space returns
        w.stop()
    kept = history.connect(path, readonly=True).execute("SELECT count(*) FROM gpu_minutes").fetchone()[0]
    line = h.lines[0] if h.lines else ""
    ok = down and len(h.lines) == 1 and "is full" in line and "no transaction" not in line and kept == 8 * 190
    return Row(
        "history",
        "disk full for 3 minutes (max_page_count)",
        "one line saying the disk is full, history_up 0, every row written when space returns",
        f"{len(h.lines)} line(s): {line[:120]}; history_up {0 if down else 1} while full; {kept} of 1520 rows",
        ok,
    )


def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="gpuledger-history-attack-") as tmp:
        work = Path(tmp)
        healthy = work / "healthy.db"
        _make(healthy)
        rows = []
        with _exporters(work, healthy) as started:
            deadline = time.monotonic() + START_TIMEOUT
            rows += [_observe(s, deadline) for s in started]
        rows.append(_report(work, healthy))
        rows.append(_while_running(work, healthy))
        rows.append(_full_disk(work))
        return rows


if __name__ == "__main__":
    for r in run():
        print(f"{'ok ' if r.ok else 'NO '} {r.attack}: {r.observed}")
